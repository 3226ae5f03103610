"""RUBiS's HTML: one function per page, from the page dicts of ``rubis.interactions``.

Pure functions of their arguments (no I/O, no clock), so a rendered page can be a cached
value. Every text from the database is escaped. The links and hidden fields are what the
client emulator reads to choose its next request, as RUBiS's client read its pages:

- ``?item=N`` in links to items (ViewItem, ViewBidHistory, BuyNowAuth, PutBidAuth),
  ``?user=N`` in links to users, ``&to=N`` for the user a comment is about;
- search pages link their next page with ``class="next"`` when the page is full;
- forms carry hidden inputs (``name="item" value="N"``, ``minBid``, ``maxQty``, …).
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

from rubis.interactions import Page

__all__ = [
    "STATIC",
    "about_me",
    "bid_history",
    "buy_now",
    "categories",
    "document",
    "error",
    "item",
    "put_bid",
    "put_comment",
    "region_categories",
    "regions",
    "search",
    "sell_categories",
    "user_info",
    "written",
]

_NAV = (
    '<p><a href="/">Home</a> | <a href="/browse">Browse</a> | <a href="/sell">Sell</a> | '
    '<a href="/about_me_auth">About me</a></p>'
)


def document(title: str, body: str) -> str:
    """A whole page: RUBiS's header, the title, the body."""
    return (
        f"<!DOCTYPE html><html><head><title>RUBiS: {escape(title)}</title></head><body>"
        f"{_NAV}<h2>{escape(title)}</h2>{body}</body></html>"
    )


def error(message: str) -> str:
    """RUBiS's error page."""
    return document("Sorry", f"<p>{escape(message)}</p>")


def _text(value: Any) -> str:
    return escape(str(value))


def _link(path: str, label: Any, **params: int) -> str:
    query = "&amp;".join(f"{name}={value}" for name, value in params.items())
    return f'<a href="/{path}?{query}">{_text(label)}</a>'


def _hidden(**fields: Any) -> str:
    return "".join(
        f'<input type="hidden" name="{name}" value="{_text(value)}">'
        for name, value in fields.items()
    )


def _form(action: str, fields: str, *, method: str = "get") -> str:
    return f'<form action="/{action}" method="{method}">{fields}<input type="submit"></form>'


def _login(action: str, **hidden: Any) -> str:
    inputs = '<input name="nickname"><input name="password" type="password">'
    return _form(action, _hidden(**hidden) + inputs)


def _list(rows: Iterable[str]) -> str:
    return "<ul>" + "".join(f"<li>{row}</li>" for row in rows) + "</ul>"


def _item_row(item: Page) -> str:
    price = item["max_bid"] or item["initial_price"]
    return (
        f"{_link('view_item', item['name'], item=item['id'])} {price:.2f} "
        f"({item['nb_of_bids']} bids, ends {_text(item['end_date'])})"
    )


#: The pages served without the database, by path: Home, Register, Browse, Sell, AboutMe's
#: login form (the forms that carry ids are rendered by the application from the query).
STATIC: dict[str, str] = {
    "": document("Welcome to RUBiS", "<p>An auction site.</p>"),
    "register": document(
        "Register",
        _form(
            "register_user",
            "".join(
                f'<input name="{name}">'
                for name in ("firstname", "lastname", "nickname", "password", "email", "region")
            ),
            method="post",
        ),
    ),
    "browse": document(
        "Browse",
        '<p><a href="/browse_categories">Categories</a> | '
        '<a href="/browse_regions">Regions</a></p>',
    ),
    "sell": document("Sell", _login("select_category_to_sell_item")),
    "about_me_auth": document("About me", _login("about_me")),
}


def login_form(page: str, **hidden: int) -> str:
    """BuyNowAuth, PutBidAuth, PutCommentAuth: a login form carrying the ids."""
    title, action = {
        "buy_now_auth": ("Buy now", "buy_now"),
        "put_bid_auth": ("Bid", "put_bid"),
        "put_comment_auth": ("Comment", "put_comment"),
    }[page]
    return document(title, _login(action, **hidden))


def sell_item_form(category: int, user: int) -> str:
    """23 SellItemForm."""
    inputs = "".join(
        f'<input name="{name}">'
        for name in ("name", "description", "initial_price", "reserve_price", "buy_now")
    )
    fields = _hidden(category=category, user=user) + inputs + '<input name="quantity">'
    return document("Sell an item", _form("register_item", fields + '<input name="days">'))


def categories(page: Page) -> str:
    """4 BrowseCategories."""
    rows = (
        _link("search_items_in_category", name, category=cid, page=0)
        for cid, name in page["categories"]
    )
    return document("Categories", _list(rows))


def search(page: Page, per_page: int = 20) -> str:
    """5 SearchItemsInCategory and 8 SearchItemsInRegion: the items and the page links."""
    place = {"category": page["category"]}
    if page["page"] == "SearchItemsInRegion":
        place = {"region": page["region"], **place}
    path = "search_items_in_region" if "region" in place else "search_items_in_category"
    number = page["number"]
    links = ""
    if number > 0:
        links += _link(path, "Previous page", **place, page=number - 1) + " "
    if len(page["items"]) >= per_page:
        params = "&amp;".join(f"{k}={v}" for k, v in {**place, "page": number + 1}.items())
        links += f'<a class="next" href="/{path}?{params}">Next page</a>'
    body = _list(_item_row(item) for item in page["items"]) if page["items"] else "<p>None</p>"
    return document(f"Items, page {number + 1}", body + f"<p>{links}</p>")


def regions(page: Page) -> str:
    """6 BrowseRegions."""
    rows = (_link("browse_categories_in_region", name, region=rid) for rid, name in page["regions"])
    return document("Regions", _list(rows))


def region_categories(page: Page) -> str:
    """7 BrowseCategoriesInRegion."""
    region = page["region_id"]
    rows = (
        _link("search_items_in_region", name, region=region, category=cid, page=0)
        for cid, name in page["categories"]
    )
    return document(f"Categories in {page['region']}", _list(rows))


def _item_details(page: Page) -> str:
    """ViewItem's and PutBid's common part."""
    item = page["item"]
    seller = _link("view_user_info", page["seller"], user=item["seller"])
    highest = "none" if page["max_bid"] is None else f"{page['max_bid']:.2f}"
    facts = [
        f"Current bid: {highest}",
        f"Quantity: {item['quantity']}",
        f"Buy now: {item['buy_now']:.2f}",
        f"Seller: {seller}",
        f"Started: {_text(item['start_date'])}, ends: {_text(item['end_date'])}",
        _link("view_bid_history", f"{page['bid_count']} bids", item=item["id"]),
        _link("put_comment_auth", "Comment on the seller", item=item["id"], to=item["seller"]),
    ]
    top = [f"{bid['bid']:.2f} x {bid['qty']}" for bid in page["top_bids"]]
    return _list(facts) + (_list(top) if top else "") + f"<p>{_text(item['description'])}</p>"


def item(page: Page) -> str:
    """9 ViewItem: the item, with links to bid, buy and comment."""
    item = page["item"]
    actions = [
        _link("put_bid_auth", "Bid now", item=item["id"]),
    ]
    if item["buy_now"] > 0:
        actions.append(_link("buy_now_auth", "Buy now", item=item["id"]))
    return document(str(item["name"]), _item_details(page) + "<p>" + " | ".join(actions) + "</p>")


def _comment_rows(comments: list[Page]) -> str:
    return _list(
        f"{_link('view_user_info', c['author'], user=c['from_user_id'])} "
        f"({c['rating']}, {_text(c['date'])}): {_text(c['comment'])}"
        for c in comments
    )


def user_info(page: Page) -> str:
    """10 ViewUserInfo."""
    user = page["user"]
    facts = _list(
        [
            f"{_text(user['firstname'])} {_text(user['lastname'])}",
            f"Member since {_text(user['creation_date'])}",
            f"Rating: {user['rating']}",
        ]
    )
    return document(f"User {user['nickname']}", facts + _comment_rows(page["comments"]))


def bid_history(page: Page) -> str:
    """11 ViewBidHistory."""
    rows = (
        f"{_link('view_user_info', bid['bidder'], user=bid['user_id'])} "
        f"{bid['bid']:.2f} x {bid['qty']} on {_text(bid['date'])}"
        for bid in page["bids"]
    )
    title = _link("view_item", page["name"], item=page["item_id"])
    return document("Bid history", f"<p>{title}</p>" + _list(rows))


def buy_now(page: Page) -> str:
    """13 BuyNow: the item and the purchase form."""
    item = page["item"]
    fields = _hidden(item=item["id"], buyer=page["buyer"], maxQty=item["quantity"])
    body = f"<p>{_item_row(item)}, sold by {_text(page['seller'])}</p>"
    return document("Buy now", body + _form("store_buy_now", fields + '<input name="qty">'))


def put_bid(page: Page) -> str:
    """16 PutBid: the item as ViewItem shows it and the bid form."""
    fields = _hidden(
        item=page["item"]["id"],
        user=page["bidder"],
        minBid=page["min_bid"],
        maxQty=page["item"]["quantity"],
    )
    inputs = '<input name="bid"><input name="max_bid"><input name="qty">'
    form = _form("store_bid", fields + inputs, method="post")
    return document(f"Bid on {page['item']['name']}", _item_details(page) + form)


def put_comment(page: Page) -> str:
    """19 PutComment: the comment form."""
    to = page["to_user"]
    fields = _hidden(item=page["item"]["id"], to=to["id"], author=page["author"])
    inputs = '<input name="rating"><textarea name="comment"></textarea>'
    body = f"<p>About {_text(to['nickname'])}, for {_text(page['item']['name'])}</p>"
    return document("Comment", body + _form("store_comment", fields + inputs, method="post"))


def sell_categories(page: Page) -> str:
    """22 SelectCategoryToSellItem."""
    rows = (
        _link("sell_item_form", name, category=cid, user=page["seller"])
        for cid, name in page["categories"]
    )
    return document("Choose a category", _list(rows))


def about_me(page: Page) -> str:
    """26 AboutMe."""
    user = page["user"]
    parts = [
        "<h3>Your bids</h3>",
        _list(f"{_item_row(e['item'])}, your max bid {e['max_bid']:.2f}" for e in page["bids"]),
        "<h3>Won</h3>",
        _list(_item_row(i) for i in page["won"]),
        "<h3>Bought</h3>",
        _list(f"{_item_row(b['item'])} x {b['qty']}" for b in page["bought"]),
        "<h3>Selling</h3>",
        _list(_item_row(i) for i in page["selling"]),
        "<h3>Sold</h3>",
        _list(_item_row(i) for i in page["sold"]),
        "<h3>Comments about you</h3>",
        _comment_rows(page["comments"]),
    ]
    return document(f"About {user['nickname']}", "".join(parts))


def written(title: str, message: str, *, item_id: int | None = None) -> str:
    """The page after a write; links the item it concerned."""
    link = f"<p>{_link('view_item', 'Back to the item', item=item_id)}</p>" if item_id else ""
    return document(title, f"<p>{escape(message)}</p>{link}")

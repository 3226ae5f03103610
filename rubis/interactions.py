"""The read pages of RUBiS's bidding mix, as data (``rubis.html`` renders them).

Each dynamic page is a function that builds it from the shared cacheable functions of
``rubis.queries`` inside the caller's read-only transaction (``item_page``, …): the web
application calls them from its cacheable page functions. ``Rubis(cache, staleness=30)``
wraps each in its own ``cache.read_only(staleness)`` (``not_before`` gives read-your-writes
after a write's ``commit_timestamp``). The search pages fetch a page of ids, then call
``get_item`` per id, as the TxCache port did. The static pages and forms need no database
and return their parameters. Writes are in ``rubis.writes``.

Every page that cannot be served — failed authentication, an unknown item or user — raises
``PageError``: RUBiS answers with an error page, and the emulator goes Home.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import txcache
from rubis import queries
from rubis.queries import Record

__all__ = [
    "Page",
    "PageError",
    "Rubis",
    "about_me_page",
    "bid_history_page",
    "buy_now_page",
    "categories_page",
    "category_search_page",
    "item_page",
    "put_bid_page",
    "put_comment_page",
    "region_categories_page",
    "region_search_page",
    "regions_page",
    "sell_categories_page",
    "user_info_page",
]

Page = dict[str, Any]


class PageError(Exception):
    """An error page (its message says why)."""


def _item(item_id: int) -> Record:
    """The item, or an error page."""
    item = queries.get_item(item_id)
    if item is None:
        raise PageError(f"there is no item {item_id}")
    return item


def _user(user_id: int) -> Record:
    """The user, or an error page."""
    user = queries.get_user(user_id)
    if user is None:
        raise PageError(f"there is no user {user_id}")
    return user


def _nickname(user_id: int) -> str:
    """A user's nickname (RUBiS shows it for sellers, bidders and comment authors)."""
    return str(_user(user_id)["nickname"])


def _login(nickname: str, password: str) -> int:
    """The authenticated user's id, or an error page."""
    user_id = queries.authenticate(nickname, password)
    if user_id is None:
        raise PageError("you don't have an account on RUBiS or the password is wrong")
    return user_id


def _item_view(item_id: int) -> Page:
    """ViewItem's data: the item, its highest bid, its top bids when it offers more than
    one, its bid count, the seller's nickname, and the minimum next bid."""
    item = _item(item_id)
    bids = queries.item_bids(item_id)
    highest = max((bid["bid"] for bid in bids), default=None)
    top = sorted(bids, key=lambda bid: (-bid["bid"], bid["id"]))[: item["quantity"]]
    return {
        "item": item,
        "max_bid": highest,
        "top_bids": top if item["quantity"] > 1 else [],
        "bid_count": len(bids),
        "seller": _nickname(item["seller"]),
        "min_bid": item["initial_price"] if highest is None else highest + 1,
    }


def _comments(user_id: int) -> list[Page]:
    """The comments about a user with their authors' nicknames."""
    return [
        {**comment, "author": _nickname(comment["from_user_id"])}
        for comment in queries.comments_about(user_id)
    ]


# The dynamic pages, without a transaction: call them inside ``cache.read_only`` (as
# ``Rubis`` does) or inside a cacheable page function (as the web application does).


def categories_page() -> Page:
    """4 BrowseCategories."""
    return {"page": "BrowseCategories", "categories": queries.categories()}


def category_search_page(category: int, page: int, now: datetime, per_page: int = 20) -> Page:
    """5 SearchItemsInCategory: a page of running auctions of ``category``."""
    ids = queries.category_item_ids(category, now, page, per_page)
    items = [_item(item_id) for item_id in ids]
    return {"page": "SearchItemsInCategory", "category": category, "number": page, "items": items}


def regions_page() -> Page:
    """6 BrowseRegions."""
    return {"page": "BrowseRegions", "regions": queries.regions()}


def region_categories_page(region: int) -> Page:
    """7 BrowseCategoriesInRegion."""
    names = dict(queries.regions())
    if region not in names:
        raise PageError(f"there is no region {region}")
    return {
        "page": "BrowseCategoriesInRegion",
        "region": names[region],
        "region_id": region,
        "categories": queries.categories(),
    }


def region_search_page(
    region: int, category: int, page: int, now: datetime, per_page: int = 20
) -> Page:
    """8 SearchItemsInRegion: running auctions of ``category`` sold from ``region``."""
    ids = queries.region_item_ids(region, category, now, page, per_page)
    items = [_item(item_id) for item_id in ids]
    return {
        "page": "SearchItemsInRegion",
        "region": region,
        "category": category,
        "number": page,
        "items": items,
    }


def item_page(item_id: int) -> Page:
    """9 ViewItem."""
    return {"page": "ViewItem", **_item_view(item_id)}


def user_info_page(user_id: int) -> Page:
    """10 ViewUserInfo: the user and the comments about them."""
    return {"page": "ViewUserInfo", "user": _user(user_id), "comments": _comments(user_id)}


def bid_history_page(item_id: int) -> Page:
    """11 ViewBidHistory: the item's bids, newest first, with the bidders' nicknames."""
    name = _item(item_id)["name"]
    bids = [{**bid, "bidder": _nickname(bid["user_id"])} for bid in queries.item_bids(item_id)]
    return {"page": "ViewBidHistory", "item_id": item_id, "name": name, "bids": bids}


def buy_now_page(item_id: int, nickname: str, password: str) -> Page:
    """13 BuyNow: the buyer, the item and its seller."""
    buyer = _login(nickname, password)
    item = _item(item_id)
    return {"page": "BuyNow", "buyer": buyer, "item": item, "seller": _nickname(item["seller"])}


def put_bid_page(item_id: int, nickname: str, password: str) -> Page:
    """16 PutBid: the bidder, then the item as ViewItem shows it."""
    bidder = _login(nickname, password)
    return {"page": "PutBid", "bidder": bidder, **_item_view(item_id)}


def put_comment_page(item_id: int, to_user_id: int, nickname: str, password: str) -> Page:
    """19 PutComment: the author, the item and the user commented on."""
    author = _login(nickname, password)
    return {
        "page": "PutComment",
        "author": author,
        "item": _item(item_id),
        "to_user": _user(to_user_id),
    }


def sell_categories_page(nickname: str, password: str) -> Page:
    """22 SelectCategoryToSellItem: the seller and the categories."""
    seller = _login(nickname, password)
    return {
        "page": "SelectCategoryToSellItem",
        "seller": seller,
        "categories": queries.categories(),
    }


def about_me_page(nickname: str, password: str, now: datetime) -> Page:
    """26 AboutMe: the user's bids, wins, purchases, sales and the comments about them."""
    user_id = _login(nickname, password)
    return {"page": "AboutMe", "user": _user(user_id), **_about(user_id, now)}


@dataclass(slots=True)
class Rubis:
    """The read interactions over one txcache ``Cache``, each dynamic one in its own
    read-only transaction."""

    cache: txcache.Cache
    staleness: float = 30.0
    per_page: int = 20

    def _read(self, not_before: int | None) -> txcache.ReadOnlyTransaction:
        return self.cache.read_only(self.staleness, not_before=not_before)

    # static pages and forms (no database)

    def home(self) -> Page:
        """0 Home."""
        return {"page": "Home"}

    def register(self) -> Page:
        """1 Register: the registration form."""
        return {"page": "Register"}

    def browse(self) -> Page:
        """3 Browse: links to categories and regions."""
        return {"page": "Browse"}

    def buy_now_auth(self, item_id: int) -> Page:
        """12 BuyNowAuth: the login form for buying ``item_id``."""
        return {"page": "BuyNowAuth", "item_id": item_id}

    def put_bid_auth(self, item_id: int) -> Page:
        """15 PutBidAuth: the login form for bidding on ``item_id``."""
        return {"page": "PutBidAuth", "item_id": item_id}

    def put_comment_auth(self, item_id: int, to_user_id: int) -> Page:
        """18 PutCommentAuth: the login form for commenting."""
        return {"page": "PutCommentAuth", "item_id": item_id, "to_user_id": to_user_id}

    def sell(self) -> Page:
        """21 Sell: the login form for selling."""
        return {"page": "Sell"}

    def sell_item_form(self, category: int, user_id: int) -> Page:
        """23 SellItemForm: the item form."""
        return {"page": "SellItemForm", "category": category, "user_id": user_id}

    def about_me_auth(self) -> Page:
        """25 AboutMe's login form."""
        return {"page": "AboutMeAuth"}

    # browsing

    def browse_categories(self, *, not_before: int | None = None) -> Page:
        """4 BrowseCategories."""
        with self._read(not_before):
            return categories_page()

    def search_items_in_category(
        self, category: int, page: int, now: datetime, *, not_before: int | None = None
    ) -> Page:
        """5 SearchItemsInCategory."""
        with self._read(not_before):
            return category_search_page(category, page, now, self.per_page)

    def browse_regions(self, *, not_before: int | None = None) -> Page:
        """6 BrowseRegions."""
        with self._read(not_before):
            return regions_page()

    def browse_categories_in_region(self, region: int, *, not_before: int | None = None) -> Page:
        """7 BrowseCategoriesInRegion."""
        with self._read(not_before):
            return region_categories_page(region)

    def search_items_in_region(
        self, region: int, category: int, page: int, now: datetime, *, not_before: int | None = None
    ) -> Page:
        """8 SearchItemsInRegion."""
        with self._read(not_before):
            return region_search_page(region, category, page, now, self.per_page)

    def view_item(self, item_id: int, *, not_before: int | None = None) -> Page:
        """9 ViewItem."""
        with self._read(not_before):
            return item_page(item_id)

    def view_user_info(self, user_id: int, *, not_before: int | None = None) -> Page:
        """10 ViewUserInfo."""
        with self._read(not_before):
            return user_info_page(user_id)

    def view_bid_history(self, item_id: int, *, not_before: int | None = None) -> Page:
        """11 ViewBidHistory."""
        with self._read(not_before):
            return bid_history_page(item_id)

    # pages behind a login

    def buy_now(
        self, item_id: int, nickname: str, password: str, *, not_before: int | None = None
    ) -> Page:
        """13 BuyNow."""
        with self._read(not_before):
            return buy_now_page(item_id, nickname, password)

    def put_bid(
        self, item_id: int, nickname: str, password: str, *, not_before: int | None = None
    ) -> Page:
        """16 PutBid."""
        with self._read(not_before):
            return put_bid_page(item_id, nickname, password)

    def put_comment(
        self,
        item_id: int,
        to_user_id: int,
        nickname: str,
        password: str,
        *,
        not_before: int | None = None,
    ) -> Page:
        """19 PutComment."""
        with self._read(not_before):
            return put_comment_page(item_id, to_user_id, nickname, password)

    def select_category_to_sell_item(
        self, nickname: str, password: str, *, not_before: int | None = None
    ) -> Page:
        """22 SelectCategoryToSellItem."""
        with self._read(not_before):
            return sell_categories_page(nickname, password)

    def about_me(
        self, nickname: str, password: str, now: datetime, *, not_before: int | None = None
    ) -> Page:
        """26 AboutMe."""
        with self._read(not_before):
            return about_me_page(nickname, password, now)


def _about(user_id: int, now: datetime) -> Page:
    """AboutMe's lists, each item through ``get_item``."""
    bids = queries.user_current_bids(user_id, now)
    bought = queries.user_bought(user_id, now)
    return {
        "bids": [{"item": _item(item), "max_bid": bid} for item, bid in bids],
        "won": [_item(item) for item in queries.user_won(user_id, now)],
        "bought": [{**purchase, "item": _item(purchase["item_id"])} for purchase in bought],
        "selling": [_item(item) for item in queries.user_selling(user_id)],
        "sold": [_item(item) for item in queries.user_sold(user_id, now)],
        "comments": _comments(user_id),
    }

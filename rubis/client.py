"""What an emulated RUBiS user requests next, from the page it is on. No I/O.

RUBiS's client built each request from its state and the last HTML page it received; so does
``Visitor.request``:

- the session's user is drawn uniformly (``user{N}``/``password{N}``, whose id is ``N``);
- categories and regions are drawn uniformly (ids 1-based: RUBiS's client drew 0-based ids
  for 1-based tables), except that a search repeated from a full search page follows its
  "next page" link, and SearchItemsInRegion from BrowseCategoriesInRegion follows one of
  that page's links (the page's region, a uniform category);
- an item or user id is drawn uniformly from the distinct ids the previous page links to;
- forms are filled from the previous page's hidden fields: a bid is the minimum bid plus
  1-10, its maximum the minimum plus twice that, a quantity uniform up to the page's;
- what the previous page does not give (after Back, say) comes from what the session saw
  last; a request that cannot be built at all (no item ever seen) is an error page, which
  sends the user Home.
"""

from __future__ import annotations

import html
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from rubis import data

__all__ = ["ParsedPage", "Request", "Visitor", "parse_page"]

_LINK = re.compile(r'href="/(\w*)\??([^"]*)"')
_NEXT = re.compile(r'class="next" href="(/[^"]*)"')
_HIDDEN = re.compile(r'type="hidden" name="(\w+)" value="([^"]*)"')
_RATINGS = (-5, -3, 0, 3, 5)
_TEXT = "This is a comment or a description written by the RUBiS client emulator. "


@dataclass(frozen=True, slots=True)
class Request:
    """An HTTP request: ``GET path`` or ``POST path`` with a urlencoded body."""

    method: str
    path: str
    body: str | None = None


@dataclass(slots=True)
class ParsedPage:
    """The links of a page (path → the parameters of each link to it), its hidden fields
    and its "next page" link."""

    links: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    next_page: str | None = None

    def ids(self, name: str, *paths: str) -> list[int]:
        """The distinct values of parameter ``name`` in links to ``paths``, in page order."""
        found = [
            int(params[name])
            for path in paths
            for params in self.links.get(path, [])
            if params.get(name, "").isdigit()
        ]
        return list(dict.fromkeys(found))


def parse_page(text: str) -> ParsedPage:
    """Read the links, hidden fields and next-page link of an HTML page."""
    page = ParsedPage()
    for path, query in _LINK.findall(text):
        params = (pair.partition("=") for pair in query.split("&amp;") if pair)
        page.links.setdefault(path, []).append({name: value for name, _, value in params})
    page.fields = {name: html.unescape(value) for name, value in _HIDDEN.findall(text)}
    found = _NEXT.search(text)
    page.next_page = html.unescape(found.group(1)) if found else None
    return page


_ITEM_PATHS = ("view_item", "view_bid_history", "put_bid_auth", "buy_now_auth", "put_comment_auth")


@dataclass(slots=True)
class Visitor:
    """One session's user: who they are and what they saw last."""

    rng: random.Random
    user_id: int
    page: ParsedPage = field(default_factory=ParsedPage)
    memory: dict[str, str] = field(default_factory=dict)
    categories: int = len(data.categories())
    regions: tuple[str, ...] = tuple(data.regions())

    @classmethod
    def start(cls, rng: random.Random, users: int) -> Visitor:
        """A new session of a uniformly drawn user."""
        return cls(rng, rng.randint(1, users))

    def saw(self, text: str) -> None:
        """Remember the page just received."""
        self.page = parse_page(text)
        self.memory.update(self.page.fields)

    def _login(self) -> dict[str, str | int]:
        return {"nickname": f"user{self.user_id}", "password": f"password{self.user_id}"}

    def _pick(self, name: str, *paths: str) -> int | None:
        """A uniform choice among the ids the page links to (or holds in a hidden field),
        else the one remembered."""
        ids = self.page.ids(name, *paths)
        if not ids and self.page.fields.get(name, "").isdigit():
            ids = [int(self.page.fields[name])]
        if ids:
            chosen = self.rng.choice(ids)
            self.memory[name] = str(chosen)
            return chosen
        remembered = self.memory.get(name, "")
        return int(remembered) if remembered.isdigit() else None

    def _field(self, name: str, default: str) -> str:
        return self.page.fields.get(name) or self.memory.get(name) or default

    def request(self, state: int, previous: int) -> Request | None:
        """The request for ``state`` coming from ``previous``; ``None`` if it cannot be
        built (an error page)."""
        build = _BUILDERS[state]
        return build(self, previous)

    # one builder per state ------------------------------------------------------------

    def _static(self, path: str) -> Request:
        return Request("GET", path)

    def _get(self, path: str, **params: str | int | None) -> Request | None:
        if any(value is None for value in params.values()):
            return None
        return Request("GET", f"{path}?{urlencode(params)}")

    def _post(self, path: str, **params: str | int | float | None) -> Request | None:
        if any(value is None for value in params.values()):
            return None
        return Request("POST", path, urlencode(params))

    def register_user(self, previous: int) -> Request | None:
        name = f"e{self.rng.getrandbits(40):010x}"
        region = self.rng.choice(self.regions)
        return self._post(
            "/register_user",
            firstname=f"Great{name}",
            lastname=f"User{name}",
            nickname=name,
            password=f"password{name}",
            email=f"{name}@rubis.com",
            region=region,
        )

    def search_in_category(self, previous: int) -> Request | None:
        if previous == 5 and self.page.next_page:
            return Request("GET", self.page.next_page)
        category = self.rng.randint(1, self.categories)
        return self._get("/search_items_in_category", category=category, page=0)

    def categories_in_region(self, previous: int) -> Request | None:
        return self._get("/browse_categories_in_region", region=self._region())

    def _region(self) -> int:
        return self.rng.randint(1, len(self.regions))

    def search_in_region(self, previous: int) -> Request | None:
        if previous == 8 and self.page.next_page:
            return Request("GET", self.page.next_page)
        links = self.page.links.get("search_items_in_region", [])
        if previous == 7 and links:
            return self._get("/search_items_in_region", **self.rng.choice(links))
        category = self.rng.randint(1, self.categories)
        return self._get("/search_items_in_region", region=self._region(), category=category)

    def item_page(self, path: str) -> Request | None:
        return self._get(path, item=self._pick("item", *_ITEM_PATHS))

    def user_info(self, previous: int) -> Request | None:
        return self._get("/view_user_info", user=self._pick("user", "view_user_info"))

    def buy_now(self, previous: int) -> Request | None:
        return self._get("/buy_now", item=self._pick("item", *_ITEM_PATHS), **self._login())

    def store_buy_now(self, previous: int) -> Request | None:
        item, buyer = self._pick("item", *_ITEM_PATHS), self._field("buyer", str(self.user_id))
        qty = self.rng.randint(1, max(1, int(self._field("maxQty", "1"))))
        return self._post("/store_buy_now", item=item, buyer=buyer, qty=qty)

    def put_bid(self, previous: int) -> Request | None:
        return self._get("/put_bid", item=self._pick("item", *_ITEM_PATHS), **self._login())

    def store_bid(self, previous: int) -> Request | None:
        item, user = self._pick("item", *_ITEM_PATHS), self._field("user", str(self.user_id))
        minimum = float(self._field("minBid", "1"))
        add = self.rng.randint(1, 10)
        qty = self.rng.randint(1, max(1, int(self._field("maxQty", "1"))))
        return self._post(
            "/store_bid",
            item=item,
            user=user,
            bid=minimum + add,
            max_bid=minimum + 2 * add,
            qty=qty,
        )

    def put_comment_auth(self, previous: int) -> Request | None:
        item, to = self._pick("item", *_ITEM_PATHS), self._pick("to", "put_comment_auth")
        return self._get("/put_comment_auth", item=item, to=to)

    def put_comment(self, previous: int) -> Request | None:
        item, to = self._pick("item", *_ITEM_PATHS), self._pick("to", "put_comment_auth")
        return self._get("/put_comment", item=item, to=to, **self._login())

    def store_comment(self, previous: int) -> Request | None:
        item, to = self._pick("item", *_ITEM_PATHS), self._pick("to", "put_comment_auth")
        author = self._field("author", str(self.user_id))
        rating = self.rng.choice(_RATINGS)
        comment = _TEXT * 28
        comment = comment[: self.rng.randint(1, 2048)]
        return self._post(
            "/store_comment", item=item, to=to, author=author, rating=rating, comment=comment
        )

    def sell_item_form(self, previous: int) -> Request | None:
        links = self.page.links.get("sell_item_form", [])
        if links:
            return self._get("/sell_item_form", **self.rng.choice(links))
        category = self.rng.randint(1, self.categories)
        return self._get("/sell_item_form", category=category, user=self.user_id)

    def register_item(self, previous: int) -> Request | None:
        category = self._field("category", str(self.rng.randint(1, self.categories)))
        initial = self.rng.randint(1, 5000)
        reserve = initial + self.rng.randint(0, 999) if self.rng.random() < 0.4 else 0
        buy_now = initial + reserve + self.rng.randint(0, 999) if self.rng.random() < 0.1 else 0
        quantity = 1 if self.rng.random() < 0.8 else self.rng.randint(1, 10)
        return self._post(
            "/register_item",
            user=self._field("user", str(self.user_id)),
            category=category,
            name=f"RUBiS item of the emulator #{self.rng.getrandbits(32)}",
            description=(_TEXT * 110)[: self.rng.randint(1, 8192)],
            initial_price=initial,
            reserve_price=reserve,
            buy_now=buy_now,
            quantity=quantity,
            days=self.rng.randint(1, 7),
        )


_BUILDERS: tuple[Callable[[Visitor, int], Request | None], ...] = (
    lambda v, p: v._static("/"),
    lambda v, p: v._static("/register"),
    Visitor.register_user,
    lambda v, p: v._static("/browse"),
    lambda v, p: v._static("/browse_categories"),
    Visitor.search_in_category,
    lambda v, p: v._static("/browse_regions"),
    Visitor.categories_in_region,
    Visitor.search_in_region,
    lambda v, p: v.item_page("/view_item"),
    Visitor.user_info,
    lambda v, p: v.item_page("/view_bid_history"),
    lambda v, p: v.item_page("/buy_now_auth"),
    Visitor.buy_now,
    Visitor.store_buy_now,
    lambda v, p: v.item_page("/put_bid_auth"),
    Visitor.put_bid,
    Visitor.store_bid,
    Visitor.put_comment_auth,
    Visitor.put_comment,
    Visitor.store_comment,
    lambda v, p: v._static("/sell"),
    lambda v, p: v._get("/select_category_to_sell_item", **v._login()),
    Visitor.sell_item_form,
    Visitor.register_item,
    lambda v, p: v._static("/about_me_auth"),
    lambda v, p: v._get("/about_me", **v._login()),
)

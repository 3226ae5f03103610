"""The web application's requests, responses and handlers: one handler per dynamic path.

A handler takes the ``Application`` and a ``Request`` and returns a ``Response``. Read pages
go through ``Application.read`` (one read-only transaction around the page's cacheable
function); writes call ``rubis.writes`` with the exact virtual time and answer through
``Application.written`` (which sets the ``not_before`` cookie). The forms that carry ids are
rendered here without a transaction. The static pages are ``rubis.html.STATIC``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from rubis import html, pages, writes

if TYPE_CHECKING:
    from rubis.app import Application

__all__ = ["COOKIE", "ROUTES", "Request", "Response", "parse_request"]

Params = Mapping[str, str]
#: The cookie carrying the session's last commit timestamp.
COOKIE = "txcache_nb"


@dataclass(frozen=True, slots=True)
class Request:
    """What a handler needs of an HTTP request."""

    params: Params
    not_before: int | None

    def int(self, name: str) -> int:
        """An integer parameter (``ValueError`` when missing or malformed)."""
        return int(self.text(name))

    def number(self, name: str) -> float:
        """A decimal parameter."""
        return float(self.text(name))

    def text(self, name: str) -> str:
        """A text parameter."""
        try:
            return self.params[name]
        except KeyError:
            raise ValueError(f"the parameter {name} is missing") from None


@dataclass(frozen=True, slots=True)
class Response:
    """A page and, after a write, the commit timestamp to set as the cookie."""

    body: str
    status: str = "200 OK"
    commit_timestamp: int | None = None


def parse_request(environ: Mapping[str, Any]) -> Request:
    """The query string and a urlencoded body as parameters; the ``not_before`` cookie."""
    params = dict(parse_qsl(environ.get("QUERY_STRING", "")))
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length > 0:
        params.update(parse_qsl(environ["wsgi.input"].read(length).decode()))
    cookie: SimpleCookie = SimpleCookie(environ.get("HTTP_COOKIE", ""))
    morsel = cookie.get(COOKIE)
    not_before = int(morsel.value) if morsel is not None and morsel.value.isdigit() else None
    return Request(params, not_before)


Handler = Callable[["Application", Request], Response]


def _login(r: Request) -> tuple[str, str]:
    return r.text("nickname"), r.text("password")


def _search_in_category(app: Application, r: Request) -> Response:
    args = (r.int("category"), int(r.params.get("page", 0)), app.clock.page_now())
    return app.read(r, pages.search_items_in_category, *args, app.settings.per_page)


def _search_in_region(app: Application, r: Request) -> Response:
    args = (r.int("region"), r.int("category"), int(r.params.get("page", 0)))
    now = app.clock.page_now()
    return app.read(r, pages.search_items_in_region, *args, now, app.settings.per_page)


def _register_user(app: Application, r: Request) -> Response:
    fields = ("firstname", "lastname", "nickname", "password", "email", "region")
    done = writes.register_user(
        app.cache, **{name: r.text(name) for name in fields}, now=app.clock.now()
    )
    return app.written(done, "Registered")


def _store_buy_now(app: Application, r: Request) -> Response:
    item = r.int("item")
    done = writes.store_buy_now(
        app.cache, buyer=r.int("buyer"), item_id=item, qty=r.int("qty"), now=app.clock.now()
    )
    return app.written(done, "Bought", item)


def _store_bid(app: Application, r: Request) -> Response:
    item = r.int("item")
    done = writes.store_bid(
        app.cache,
        user_id=r.int("user"),
        item_id=item,
        bid=r.number("bid"),
        max_bid=r.number("max_bid"),
        qty=r.int("qty"),
        now=app.clock.now(),
    )
    return app.written(done, "Bid stored", item)


def _store_comment(app: Application, r: Request) -> Response:
    item = r.int("item")
    done = writes.store_comment(
        app.cache,
        from_user_id=r.int("author"),
        to_user_id=r.int("to"),
        item_id=item,
        rating=r.int("rating"),
        comment=r.text("comment"),
        now=app.clock.now(),
    )
    return app.written(done, "Comment stored", item)


def _register_item(app: Application, r: Request) -> Response:
    done = writes.register_item(
        app.cache,
        seller=r.int("user"),
        category=r.int("category"),
        name=r.text("name"),
        description=r.text("description"),
        initial_price=r.number("initial_price"),
        reserve_price=r.number("reserve_price"),
        buy_now=r.number("buy_now"),
        quantity=r.int("quantity"),
        days=r.int("days"),
        now=app.clock.now(),
    )
    return app.written(done, "Item registered", done.id)


#: The dynamic paths (and the forms that carry ids), by path without slashes.
ROUTES: dict[str, Handler] = {
    "register_user": _register_user,
    "browse_categories": lambda app, r: app.read(r, pages.browse_categories),
    "search_items_in_category": _search_in_category,
    "browse_regions": lambda app, r: app.read(r, pages.browse_regions),
    "browse_categories_in_region": lambda app, r: app.read(
        r, pages.browse_categories_in_region, r.int("region")
    ),
    "search_items_in_region": _search_in_region,
    "view_item": lambda app, r: app.read(r, pages.view_item, r.int("item")),
    "view_user_info": lambda app, r: app.read(r, pages.view_user_info, r.int("user")),
    "view_bid_history": lambda app, r: app.read(r, pages.bid_history, r.int("item")),
    "buy_now_auth": lambda app, r: Response(html.login_form("buy_now_auth", item=r.int("item"))),
    "buy_now": lambda app, r: app.read(r, pages.buy_now, r.int("item"), *_login(r)),
    "store_buy_now": _store_buy_now,
    "put_bid_auth": lambda app, r: Response(html.login_form("put_bid_auth", item=r.int("item"))),
    "put_bid": lambda app, r: app.read(r, pages.put_bid, r.int("item"), *_login(r)),
    "store_bid": _store_bid,
    "put_comment_auth": lambda app, r: Response(
        html.login_form("put_comment_auth", item=r.int("item"), to=r.int("to"))
    ),
    "put_comment": lambda app, r: app.read(
        r, pages.put_comment, r.int("item"), r.int("to"), *_login(r)
    ),
    "store_comment": _store_comment,
    "select_category_to_sell_item": lambda app, r: app.read(
        r, pages.select_category_to_sell_item, *_login(r)
    ),
    "sell_item_form": lambda app, r: Response(
        html.sell_item_form(r.int("category"), r.int("user"))
    ),
    "register_item": _register_item,
    "about_me": lambda app, r: app.read(r, pages.about_me, *_login(r), app.clock.page_now()),
}

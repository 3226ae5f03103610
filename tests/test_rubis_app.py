"""The RUBiS web application over HTTP against the real stack (PostgreSQL loaded with
``tiny``, a cache node, the agent, the application under granian), and the client emulator
run against it end to end.

One stack serves the module; tests that write use their own items and users.
"""

from __future__ import annotations

import html
import random
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest
import redis
from psycopg import sql

from library_fixtures import AGENT_ARGS
from postgres_fixtures import drop_database
from rubis import emulator, generate
from rubis.app import Clock
from rubis.client import Visitor, parse_page
from rubis.mix import exact_mix
from rubis.process import AppServer
from rubis.transitions import STATES, load_table
from txcache.stack import EmbeddedPostgres, NodeProcess, Stack, StackOptions

NOW = generate.CLOCK_START
USERS = generate.PRESETS["tiny"].users


@dataclass
class Reply:
    status: int
    body: str
    set_cookie: str | None

    @property
    def cookie(self) -> str | None:
        return self.set_cookie.split(";")[0] if self.set_cookie else None

    def text(self) -> str:
        return html.unescape(self.body)


@dataclass
class AppStack:
    """What the tests use of the module's stack: the application's URL, an admin
    connection, the cache node."""

    url: str
    admin: psycopg.Connection
    node: NodeProcess

    def get(
        self, path: str, cookie: str | None = None, body: dict[str, Any] | None = None
    ) -> Reply:
        data = urlencode(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data)
        if cookie:
            request.add_header("Cookie", cookie)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, text = response.status, response.read().decode()
                set_cookie = response.headers.get("Set-Cookie")
        except urllib.error.HTTPError as error:
            status, text, set_cookie = error.code, error.read().decode(), None
        return Reply(status, text, set_cookie)

    def row(self, query: str, *params: object) -> tuple[Any, ...]:
        found = self.admin.execute(query, params).fetchone()
        assert found is not None
        return found

    def one(self, query: str, *params: object) -> Any:
        return self.row(query, *params)[0]

    def column(self, query: str, *params: object) -> list[Any]:
        return [row[0] for row in self.admin.execute(query, params)]

    def hits(self) -> tuple[int, int]:
        client = redis.Redis(host=self.node.host, port=self.node.port, protocol=2)
        try:
            info = {k: int(v) for k, v in client.info().items() if isinstance(v, int)}
        finally:
            client.close()
        misses = sum(v for k, v in info.items() if k.startswith("misses_"))
        return info["hits"], misses


@pytest.fixture(scope="module")
def stack(postgres: EmbeddedPostgres) -> Iterator[AppStack]:
    """A database of the session's PostgreSQL loaded with ``tiny``, then set up, one node
    and the agent (:class:`txcache.stack.Stack`), and the application serving it."""
    name = "rubis_app"
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = postgres.dsn_for(name)
    options = StackOptions(dsn=dsn, nodes=1, max_memory="64mb", agent_args=AGENT_ARGS)
    try:
        with psycopg.connect(dsn, autocommit=True) as admin:
            generate.load(admin, generate.PRESETS["tiny"], seed=5)
            with Stack(options) as running:
                env = {**running.settings(), "TXCACHE_REFRESH_INTERVAL": "0.05"}
                with AppServer(env, workers=2, threads=4) as server:
                    yield AppStack(server.url, admin, running.nodes[0])
    finally:
        drop_database(postgres, name)


def links(body: str, path: str, name: str) -> list[int]:
    return parse_page(body).ids(name, path)


def test_static_pages_and_forms(stack: AppStack) -> None:
    for path in ("/", "/register", "/browse", "/sell", "/about_me_auth"):
        assert stack.get(path).status == 200
    form = parse_page(stack.get("/put_comment_auth?item=5&to=7").body)
    assert form.fields == {"item": "5", "to": "7"}
    assert stack.get("/nowhere").status == 404


def test_browsing_pages(stack: AppStack) -> None:
    categories = stack.get("/browse_categories").text()
    assert stack.column("SELECT name FROM categories ORDER BY id")[3] in categories
    regions = stack.get("/browse_regions").body
    assert links(regions, "browse_categories_in_region", "region") == list(range(1, 63))
    in_region = stack.get("/browse_categories_in_region?region=62")
    assert "WI--Milwaukee" in in_region.text()
    assert stack.get("/browse_categories_in_region?region=63").status == 400


def test_searches_list_what_the_database_holds(stack: AppStack) -> None:
    category = stack.one("SELECT category FROM items GROUP BY 1 ORDER BY count(*) DESC, 1")
    expected = stack.column(
        "SELECT id FROM items WHERE category = %s AND end_date >= %s ORDER BY end_date, id",
        category,
        NOW,
    )
    first = stack.get(f"/search_items_in_category?category={category}&page=0").body
    assert links(first, "view_item", "item") == expected[:20]
    following = parse_page(first).next_page
    assert following == f"/search_items_in_category?category={category}&page=1"
    assert links(stack.get(following).body, "view_item", "item") == expected[20:40]
    region, category = stack.row(
        "SELECT region, category FROM items_by_rc GROUP BY 1, 2 ORDER BY count(*) DESC, 1, 2"
    )
    in_region = stack.column(
        "SELECT item_id FROM items_by_rc WHERE region = %s AND category = %s AND end_date >= %s "
        "ORDER BY end_date, item_id LIMIT 20",
        region,
        category,
        NOW,
    )
    page = stack.get(f"/search_items_in_region?region={region}&category={category}").body
    assert links(page, "view_item", "item") == in_region


def test_item_user_and_bid_history_pages(stack: AppStack) -> None:
    item_id, seller, name = stack.row(
        "SELECT id, seller, name FROM items WHERE nb_of_bids > 3 ORDER BY id LIMIT 1"
    )
    page = stack.get(f"/view_item?item={item_id}").text()
    highest = stack.one("SELECT max(bid) FROM bids WHERE item_id = %s", item_id)
    assert name in page
    assert f"Current bid: {highest:.2f}" in page
    assert f">user{seller}<" in page
    bidders = stack.column(
        "SELECT user_id FROM bids WHERE item_id = %s ORDER BY date DESC, id DESC", item_id
    )
    history = stack.get(f"/view_bid_history?item={item_id}").body
    assert links(history, "view_user_info", "user") == list(dict.fromkeys(bidders))
    authors = stack.column(
        "SELECT from_user_id FROM comments WHERE to_user_id = %s ORDER BY date DESC, id DESC",
        seller,
    )
    user = stack.get(f"/view_user_info?user={seller}").body
    assert links(user, "view_user_info", "user") == list(dict.fromkeys(authors))
    assert stack.get("/view_item?item=100000").status == 400


def test_pages_behind_a_login(stack: AppStack) -> None:
    item_id = stack.one("SELECT id FROM items WHERE nb_of_bids > 0 ORDER BY id LIMIT 1")
    login = "nickname=user3&password=password3"
    assert stack.get(f"/put_bid?item={item_id}&nickname=user3&password=bad").status == 400
    bid = parse_page(stack.get(f"/put_bid?item={item_id}&{login}").body).fields
    highest = stack.one("SELECT max(bid) FROM bids WHERE item_id = %s", item_id)
    assert (bid["user"], float(bid["minBid"])) == ("3", highest + 1)
    buy = parse_page(stack.get(f"/buy_now?item={item_id}&{login}").body).fields
    assert buy["buyer"] == "3"
    comment = parse_page(stack.get(f"/put_comment?item={item_id}&to=9&{login}").body).fields
    assert comment == {"item": str(item_id), "to": "9", "author": "3"}
    sell = stack.get(f"/select_category_to_sell_item?{login}").body
    assert links(sell, "sell_item_form", "category") == list(range(1, 21))
    about = stack.get(f"/about_me?{login}").body
    selling = stack.column("SELECT id FROM items WHERE seller = 3 ORDER BY end_date, id LIMIT 20")
    assert set(selling) <= set(links(about, "view_item", "item"))


def test_a_bid_through_the_app_shows_on_the_next_page(stack: AppStack) -> None:
    item_id = stack.one("SELECT id FROM items WHERE quantity = 1 ORDER BY id DESC LIMIT 1")
    before = stack.get(f"/view_item?item={item_id}").text()  # now cached
    count = stack.one("SELECT nb_of_bids FROM items WHERE id = %s", item_id)
    assert f"{count} bids" in before
    fields = parse_page(
        stack.get(f"/put_bid?item={item_id}&nickname=user7&password=password7").body
    )
    minimum = float(fields.fields["minBid"])
    form = {"item": item_id, "user": 7, "bid": minimum + 2, "max_bid": minimum + 4, "qty": 1}
    stored = stack.get("/store_bid", body=form)
    assert stored.status == 200
    assert stored.cookie is not None
    assert stored.cookie.startswith("txcache_nb=")
    assert stored.set_cookie is not None
    assert "Max-Age=31" in stored.set_cookie  # staleness 30 s + 1: then no longer needed
    after = stack.get(f"/view_item?item={item_id}", cookie=stored.cookie).text()
    assert f"{count + 1} bids" in after
    assert f"Current bid: {minimum + 2:.2f}" in after
    assert stack.get("/store_bid", body={**form, "bid": minimum}).status == 400  # too low now


def test_a_registered_user_can_log_in(stack: AppStack) -> None:
    form = {"firstname": "A", "lastname": "B", "nickname": "webuser", "password": "pw"}
    stored = stack.get("/register_user", body={**form, "email": "a@b", "region": "OH--Dayton"})
    assert stored.status == 200
    page = stack.get("/select_category_to_sell_item?nickname=webuser&password=pw", stored.cookie)
    user_id = stack.one("SELECT id FROM users WHERE nickname = 'webuser'")
    assert links(page.body, "sell_item_form", "user")[0] == user_id


def test_the_clock_rounds_page_times_to_its_step() -> None:
    start = datetime(2010, 10, 4)
    clock = Clock(start, anchor=0.0, step=60.0)
    assert clock.page_now() <= clock.now() < clock.page_now() + timedelta(seconds=60)
    assert (clock.page_now() - start).total_seconds() % 60 == 0


def test_a_bid_is_the_minimum_plus_one_to_ten_and_its_max_twice_that() -> None:
    visitor = Visitor.start(random.Random(3), USERS)
    visitor.saw(
        '<input type="hidden" name="item" value="12"><input type="hidden" name="minBid" '
        'value="100.0"><input type="hidden" name="maxQty" value="1">'
    )
    request = visitor.request(STATES.index("StoreBid"), STATES.index("PutBid"))
    assert request is not None
    assert request.method == "POST"
    assert request.body is not None
    form = dict(pair.split("=") for pair in request.body.split("&"))
    add = float(form["bid"]) - 100
    assert 1 <= add <= 10
    assert float(form["max_bid"]) == 100 + 2 * add
    assert (form["item"], form["qty"]) == ("12", "1")


def test_emulated_clients_run_the_bidding_mix_through_the_cache(stack: AppStack) -> None:
    hits_before, _ = stack.hits()
    report = emulator.run(stack.url, clients=4, duration=10, users=USERS, peak=True, seed=2)
    summary = report.as_dict()
    assert summary["errors"] == 0, summary["error_samples"]
    assert summary["error_pages"] < 0.05 * report.requests, summary["error_page_reasons"]
    hits, misses = stack.hits()
    assert hits > hits_before
    assert hits / (hits + misses) > 0.2
    expected = exact_mix(load_table("default")).shares
    counts = report.counts()
    measured = [counts.get(name, 0) / report.requests for name in STATES]
    distance = sum(abs(m - e) for m, e in zip(measured, expected, strict=True)) / 2
    assert distance < 0.05 + 2.5 / report.requests**0.5, counts
    assert counts["StoreBid"] > 0
    assert counts["ViewItem"] > 0


def test_the_emulators_sessions_go_on_from_one_run_to_the_next(stack: AppStack) -> None:
    """With think times a session lasts minutes: a benchmark's short runs must continue
    the sessions under way, not start every client at Home again."""
    emulation = emulator.Emulation(stack.url, clients=2, users=USERS, peak=True, seed=3)
    try:
        first = emulation.run(1.0)
        under_way = [
            (client.session, client.session.requests)
            for client in emulation.clients
            if client.session is not None
        ]
        assert first.requests > 0
        assert under_way, "no session was under way as the run ended"
        emulation.run(1.0)
        for session, requests in under_way:
            assert session.requests > requests, "a session under way did not go on"
    finally:
        emulation.close()

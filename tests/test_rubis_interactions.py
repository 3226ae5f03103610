"""The RUBiS interactions against the real stack: PostgreSQL loaded with ``tiny``, a cache
node, the agent, and the library.

One stack serves the module (starting it costs more than the tests); each test that writes
uses its own items and users, so the tests do not depend on each other's order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import txcache
from library_fixtures import AGENT_ARGS, wait_for_pin
from postgres_fixtures import drop_database
from rubis import generate, queries, writes
from rubis.interactions import PageError, Rubis
from txcache.stack import EmbeddedPostgres, Stack, StackOptions

NOW = generate.CLOCK_START
LATER = NOW + timedelta(hours=1)


@dataclass
class RubisStack:
    """What the tests use of the module's stack: the library, an admin connection, RUBiS."""

    cache: txcache.Cache
    admin: psycopg.Connection
    rubis: Rubis

    def row(self, query: str, *params: object) -> tuple[Any, ...]:
        found = self.admin.execute(query, params).fetchone()
        assert found is not None
        return found

    def one(self, query: str, *params: object) -> Any:
        return self.row(query, *params)[0]

    def column(self, query: str, *params: object) -> list[Any]:
        return [row[0] for row in self.admin.execute(query, params)]


@pytest.fixture(scope="module")
def stack(postgres: EmbeddedPostgres) -> Iterator[RubisStack]:
    """A database of the session's PostgreSQL loaded with ``tiny``, then set up, one node
    and the agent (:class:`txcache.stack.Stack`), and the library, once it knows a pin."""
    name = "rubis_interactions"
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = postgres.dsn_for(name)
    options = StackOptions(dsn=dsn, nodes=1, max_memory="64mb", agent_args=AGENT_ARGS)
    try:
        with psycopg.connect(dsn, autocommit=True) as admin:
            generate.load(admin, generate.PRESETS["tiny"], seed=5)
            with Stack(options) as running, running.connect(refresh_interval=0.05) as cache:
                wait_for_pins(cache)
                yield RubisStack(cache, admin, Rubis(cache, staleness=30))
    finally:
        drop_database(postgres, name)


def wait_for_pins(cache: txcache.Cache, timeout: float = 20.0) -> None:
    """Wait until the library knows a pin (asking the agent)."""
    wait_for_pin(cache, timeout=timeout)


def ids(items: list[dict[str, Any]]) -> list[int]:
    return [item["id"] for item in items]


def test_browsing_pages_list_categories_and_regions(stack: RubisStack) -> None:
    assert len(stack.rubis.browse_categories()["categories"]) == 20
    regions = stack.rubis.browse_regions()["regions"]
    assert regions[0] == (1, "AZ--Phoenix")
    assert len(regions) == 62
    page = stack.rubis.browse_categories_in_region(62)
    assert page["region"] == "WI--Milwaukee"
    with pytest.raises(PageError):
        stack.rubis.browse_categories_in_region(63)


def test_category_search_pages_by_end_date_then_id(stack: RubisStack) -> None:
    category = stack.one("SELECT category FROM items GROUP BY category ORDER BY count(*) DESC")
    expected = stack.column(
        "SELECT id FROM items WHERE category = %s AND end_date >= %s ORDER BY end_date, id",
        category,
        NOW,
    )
    assert len(expected) > 20
    first = stack.rubis.search_items_in_category(category, 0, NOW)["items"]
    second = stack.rubis.search_items_in_category(category, 1, NOW)["items"]
    assert ids(first) + ids(second) == expected[:40]
    assert all(item["category"] == category and not item["old"] for item in first)


def test_region_search_reads_items_by_rc(stack: RubisStack) -> None:
    region, category = stack.row(
        "SELECT u.region, i.category FROM items i JOIN users u ON u.id = i.seller "
        "GROUP BY 1, 2 ORDER BY count(*) DESC, 1, 2 LIMIT 1"
    )
    expected = stack.column(
        "SELECT i.id FROM items i JOIN users u ON u.id = i.seller WHERE u.region = %s "
        "AND i.category = %s AND i.end_date >= %s ORDER BY i.end_date, i.id LIMIT 20",
        region,
        category,
        NOW,
    )
    page = stack.rubis.search_items_in_region(region, category, 0, NOW)
    assert ids(page["items"]) == expected
    assert expected


def test_view_item_of_an_active_and_an_old_item(stack: RubisStack) -> None:
    for table in ("items", "old_items"):
        item_id, quantity, seller = stack.row(
            f"SELECT id, quantity, seller FROM {table} WHERE nb_of_bids > 5 AND quantity > 1 "
            "ORDER BY id LIMIT 1"
        )
        page = stack.rubis.view_item(item_id)
        assert page["item"]["old"] == (table == "old_items")
        assert page["bid_count"] == stack.one(
            "SELECT count(*) FROM bids WHERE item_id = %s", item_id
        )
        assert page["max_bid"] == stack.one("SELECT max(bid) FROM bids WHERE item_id = %s", item_id)
        top = stack.column(
            "SELECT bid FROM bids WHERE item_id = %s ORDER BY bid DESC LIMIT %s", item_id, quantity
        )
        assert [bid["bid"] for bid in page["top_bids"]] == top
        assert page["seller"] == f"user{seller}"
    with pytest.raises(PageError):
        stack.rubis.view_item(10_000)


def test_view_user_info_and_bid_history(stack: RubisStack) -> None:
    user_id = stack.one("SELECT to_user_id FROM comments GROUP BY 1 ORDER BY count(*) DESC, 1")
    page = stack.rubis.view_user_info(user_id)
    assert page["user"]["nickname"] == f"user{user_id}"
    assert "password" not in page["user"]
    expected = stack.column(
        "SELECT from_user_id FROM comments WHERE to_user_id = %s ORDER BY date DESC, id DESC",
        user_id,
    )
    assert [c["author"] for c in page["comments"]] == [f"user{u}" for u in expected]
    item_id = stack.one("SELECT id FROM items WHERE nb_of_bids > 3 ORDER BY id")
    history = stack.rubis.view_bid_history(item_id)
    bidders = stack.column(
        "SELECT user_id FROM bids WHERE item_id = %s ORDER BY date DESC, id DESC", item_id
    )
    assert [bid["bidder"] for bid in history["bids"]] == [f"user{u}" for u in bidders]


def test_pages_behind_a_login(stack: RubisStack) -> None:
    with pytest.raises(PageError):
        stack.rubis.put_bid(600, "user3", "wrong")
    assert stack.rubis.put_bid(600, "user3", "password3")["bidder"] == 3
    assert stack.rubis.buy_now(600, "user4", "password4")["buyer"] == 4
    page = stack.rubis.put_comment(600, 9, "user5", "password5")
    assert (page["author"], page["to_user"]["id"], page["item"]["id"]) == (5, 9, 600)
    assert len(stack.rubis.select_category_to_sell_item("user6", "password6")["categories"]) == 20


def test_about_me(stack: RubisStack) -> None:
    user_id = stack.one(
        "SELECT b.user_id FROM bids b JOIN items i ON i.id = b.item_id "
        "GROUP BY 1 ORDER BY count(*) DESC, 1"
    )
    page = stack.rubis.about_me(f"user{user_id}", f"password{user_id}", NOW)
    bid_on = stack.column(
        "SELECT DISTINCT b.item_id FROM bids b JOIN items i ON i.id = b.item_id "
        "WHERE b.user_id = %s ORDER BY 1",
        user_id,
    )
    assert [entry["item"]["id"] for entry in page["bids"]] == bid_on
    won = stack.column(
        "SELECT DISTINCT b.item_id FROM bids b JOIN old_items o ON o.id = b.item_id "
        "WHERE b.user_id = %s ORDER BY 1",
        user_id,
    )
    assert ids(page["won"]) == won  # every old item ended within 30 days of the clock
    selling = stack.column(
        "SELECT id FROM items WHERE seller = %s ORDER BY end_date, id LIMIT 20", user_id
    )
    assert ids(page["selling"]) == selling
    assert len(page["comments"]) == stack.one(
        "SELECT count(*) FROM comments WHERE to_user_id = %s", user_id
    )


def test_a_repeated_page_is_served_from_the_cache(stack: RubisStack) -> None:
    item_id = stack.one("SELECT id FROM items WHERE nb_of_bids > 0 ORDER BY id DESC")
    first = stack.rubis.view_item(item_id)
    hits = queries.get_item.stats.hits, queries.item_bids.stats.hits
    assert stack.rubis.view_item(item_id) == first
    assert queries.get_item.stats.hits > hits[0]
    assert queries.item_bids.stats.hits > hits[1]


def test_a_bid_is_seen_by_the_next_page(stack: RubisStack) -> None:
    item_id = stack.one(
        "SELECT id FROM items WHERE quantity = 1 AND buy_now = 0 ORDER BY id OFFSET 5"
    )
    before = stack.rubis.put_bid(item_id, "user7", "password7")
    minimum = before["min_bid"]
    with pytest.raises(PageError):
        writes.store_bid(
            stack.cache,
            user_id=7,
            item_id=item_id,
            bid=minimum - 1,
            max_bid=minimum,
            qty=1,
            now=LATER,
        )
    written = writes.store_bid(
        stack.cache,
        user_id=7,
        item_id=item_id,
        bid=minimum + 3,
        max_bid=minimum + 6,
        qty=1,
        now=LATER,
    )
    after = stack.rubis.view_item(item_id, not_before=written.commit_timestamp)
    assert after["max_bid"] == minimum + 3
    assert after["bid_count"] == before["bid_count"] + 1
    assert after["item"]["nb_of_bids"] == before["item"]["nb_of_bids"] + 1
    assert after["item"]["max_bid"] == minimum + 6
    assert after["min_bid"] == minimum + 4


def test_register_user_then_log_in(stack: RubisStack) -> None:
    new: dict[str, Any] = {
        "firstname": "New",
        "lastname": "Comer",
        "email": "n@rubis.com",
        "now": LATER,
    }
    taken: dict[str, Any] = {"nickname": "newcomer", "password": "x", "region": "WI--Milwaukee"}
    written = writes.register_user(
        stack.cache, nickname="newcomer", password="pw", region="OH--Dayton", **new
    )
    page = stack.rubis.select_category_to_sell_item(
        "newcomer", "pw", not_before=written.commit_timestamp
    )
    assert page["seller"] == written.id
    assert stack.one("SELECT region FROM users WHERE id = %s", written.id) == 45
    with pytest.raises(PageError, match="taken"):
        writes.register_user(stack.cache, **taken, **new)
    with pytest.raises(PageError, match="region"):
        writes.register_user(stack.cache, nickname="other", password="x", region="Atlantis", **new)


def test_buying_the_last_one_ends_the_auction(stack: RubisStack) -> None:
    item_id, category = stack.row(
        "SELECT id, category FROM items WHERE buy_now > 0 AND quantity = 1 ORDER BY id LIMIT 1"
    )
    written = writes.store_buy_now(stack.cache, buyer=8, item_id=item_id, qty=1, now=LATER)
    assert stack.one("SELECT quantity FROM items WHERE id = %s", item_id) == 0
    assert stack.one("SELECT end_date FROM items_by_rc WHERE item_id = %s", item_id) == LATER
    rubis = Rubis(stack.cache, per_page=1000)
    later = LATER + timedelta(minutes=1)
    listed = rubis.search_items_in_category(category, 0, later, not_before=written.commit_timestamp)
    assert item_id not in ids(listed["items"])
    with pytest.raises(PageError):
        writes.store_buy_now(stack.cache, buyer=8, item_id=item_id, qty=1, now=LATER)


def test_a_comment_adds_its_rating_not_the_total(stack: RubisStack) -> None:
    rating = stack.one("SELECT rating FROM users WHERE id = 11")
    written = writes.store_comment(
        stack.cache, from_user_id=12, to_user_id=11, item_id=3, rating=5, comment="ok", now=LATER
    )
    page = stack.rubis.view_user_info(11, not_before=written.commit_timestamp)
    assert page["user"]["rating"] == rating + 5
    assert page["comments"][0]["rating"] == 5
    assert page["comments"][0]["author"] == "user12"


def test_a_new_item_is_found_by_the_region_search(stack: RubisStack) -> None:
    seller, region = 10, 11  # user i lives in region i mod 62 + 1
    written = writes.register_item(
        stack.cache,
        seller=seller,
        category=4,
        name="new",
        description="a new item",
        initial_price=10.0,
        reserve_price=0.0,
        buy_now=0.0,
        quantity=1,
        days=3,
        now=LATER,
    )
    rubis = Rubis(stack.cache, per_page=1000)
    page = rubis.search_items_in_region(region, 4, 0, LATER, not_before=written.commit_timestamp)
    assert written.id in ids(page["items"])
    assert rubis.view_item(written.id)["seller"] == "user10"


def test_every_cached_function_stored_deterministic_values(stack: RubisStack) -> None:
    functions = [getattr(queries, name) for name in queries.__all__]
    functions = [f for f in functions if isinstance(f, txcache.CacheableFunction)]
    assert len(functions) == 14
    for function in functions:
        assert function.stats.inserts["nondeterministic"] == 0, function.stats.name
    assert sum(function.stats.inserts["inserted"] for function in functions) > 0

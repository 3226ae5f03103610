"""The RUBiS data generator at the ``tiny`` preset, against a real PostgreSQL."""

from __future__ import annotations

import math
from collections.abc import Iterator
from statistics import mean
from typing import Any

import psycopg
import pytest

from rubis import data, generate, schema
from rubis._items import spread

TINY = generate.PRESETS["tiny"]
GROUPS = {"old_items": TINY.old_items, "items": TINY.active_items}

Connection = psycopg.Connection[tuple[Any, ...]]
"""A connection to the loaded database: rows of whatever the queries select."""


@pytest.fixture
def tiny(database: str) -> Iterator[Connection]:
    """A connection to a database loaded with ``tiny`` at seed 7."""
    with psycopg.connect(database, autocommit=True) as conn:
        generate.load(conn, TINY, seed=7)
        yield conn


def scalar(conn: Connection, query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def column(conn: Connection, query: str) -> list[Any]:
    return [row[0] for row in conn.execute(query)]


def test_row_counts(tiny: Connection) -> None:
    expected = {
        "categories": 20,
        "regions": 62,
        "users": TINY.users,
        "items": TINY.active_items,
        "old_items": TINY.old_items,
        "comments": TINY.active_items + TINY.old_items,
        "items_by_rc": TINY.active_items,
        "buy_now": 0,
        "clock": 1,
    }
    for table, count in expected.items():
        assert scalar(tiny, f"SELECT count(*) FROM {table}") == count, table
    nb_of_bids = scalar(
        tiny,
        "SELECT sum(nb_of_bids) FROM (SELECT nb_of_bids FROM items "
        "UNION ALL SELECT nb_of_bids FROM old_items) t",
    )
    assert scalar(tiny, "SELECT count(*) FROM bids") == nb_of_bids


def test_ids_are_old_items_then_active_items(tiny: Connection) -> None:
    assert scalar(tiny, "SELECT min(id) || '-' || max(id) FROM old_items") == "1-500"
    assert scalar(tiny, "SELECT min(id) || '-' || max(id) FROM items") == "501-800"
    assert scalar(tiny, "SELECT now FROM clock") == generate.CLOCK_START
    assert scalar(tiny, "SELECT count(*) FROM items WHERE end_date <= (SELECT now FROM clock)") == 0
    assert (
        scalar(tiny, "SELECT count(*) FROM old_items WHERE end_date >= (SELECT now FROM clock)")
        == 0
    )


def test_every_index_exists(tiny: Connection) -> None:
    names = set(column(tiny, "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'"))
    assert set(schema.INDEXES) <= names


def test_users_follow_initdb(tiny: Connection) -> None:
    rows = tiny.execute(
        "SELECT id, firstname, lastname, nickname, password, region FROM users ORDER BY id"
    ).fetchall()
    assert [row[0] for row in rows] == list(range(1, TINY.users + 1))
    for i, first, last, nickname, password, region in rows:
        assert (first, last, nickname, password) == (
            f"Great{i}",
            f"User{i}",
            f"user{i}",
            f"password{i}",
        )
        assert region == i % 62 + 1  # 1-based: user 62 is in region 1, user 61 in 62
    assert scalar(tiny, "SELECT count(*) FROM users u JOIN regions r ON r.id = u.region") == (
        TINY.users
    )


@pytest.mark.parametrize("table", sorted(GROUPS))
def test_exact_shares_of_reserve_buy_now_and_quantity_one(tiny: Connection, table: str) -> None:
    count = GROUPS[table]
    row = tiny.execute(
        f"SELECT count(*) FILTER (WHERE reserve_price > 0), count(*) FILTER (WHERE buy_now > 0), "
        f"count(*) FILTER (WHERE quantity = 1) FROM {table}"
    ).fetchone()
    assert row is not None
    reserve, buy_now, unique = row
    assert (reserve, buy_now) == (math.ceil(0.4 * count), math.ceil(0.1 * count))
    # 80 % have quantity 1; the others draw 1-10, so about a tenth of them have 1 too
    others = count - math.ceil(0.8 * count)
    assert abs(unique - math.ceil(0.8 * count) - others / 10) < 5 * math.sqrt(others * 0.09)
    outside = scalar(
        tiny,
        f"SELECT count(*) FROM {table} WHERE initial_price NOT BETWEEN 1 AND 5000 "
        "OR quantity NOT BETWEEN 1 AND 10 "
        "OR (reserve_price > 0 AND reserve_price - initial_price NOT BETWEEN 0 AND 999) "
        "OR (buy_now > 0 AND (reserve_price = 0 OR quantity <> 1 "
        "    OR buy_now - initial_price - reserve_price NOT BETWEEN 0 AND 999))",
    )
    assert outside == 0


@pytest.mark.parametrize("table", sorted(GROUPS))
def test_descriptions_are_uniform_up_to_8_kb(tiny: Connection, table: str) -> None:
    lengths = column(tiny, f"SELECT length(description) FROM {table}")
    assert min(lengths) >= 1
    assert max(lengths) <= 8192
    assert abs(mean(lengths) - 4096.5) < 5 * 2365 / math.sqrt(len(lengths))


def test_bids_follow_initdb(tiny: Connection) -> None:
    per_item = column(
        tiny,
        "SELECT nb_of_bids FROM items UNION ALL SELECT nb_of_bids FROM old_items",
    )
    assert min(per_item) == 0
    assert max(per_item) == 19
    assert abs(mean(per_item) - 9.5) < 5 * 5.77 / math.sqrt(len(per_item))
    mismatched = scalar(
        tiny,
        "SELECT count(*) FROM (SELECT id, nb_of_bids, max_bid, quantity FROM items UNION ALL "
        "SELECT id, nb_of_bids, max_bid, quantity FROM old_items) i "
        "LEFT JOIN (SELECT item_id, count(*) n, max(qty) q FROM bids "
        "GROUP BY item_id) b ON b.item_id = i.id "
        "WHERE coalesce(b.n, 0) <> i.nb_of_bids OR b.q > i.quantity",
    )
    assert mismatched == 0


def test_each_bid_raises_the_price_by_1_to_10(tiny: Connection) -> None:
    rows = tiny.execute(
        "SELECT b.item_id, b.bid, b.max_bid, b.user_id, "
        "coalesce(i.initial_price, o.initial_price) FROM bids b "
        "LEFT JOIN items i ON i.id = b.item_id LEFT JOIN old_items o ON o.id = b.item_id "
        "ORDER BY b.id"
    ).fetchall()
    price: dict[int, float] = {}
    stored: dict[int, float] = {}
    for item_id, bid, max_bid, user_id, initial in rows:
        raised = bid - price.get(item_id, initial)
        assert 1 <= raised <= 10
        assert max_bid == bid + raised
        assert 1 <= user_id <= TINY.users
        price[item_id] = bid
        # RUBiS's StoreBid: the max bid is stored when the bid exceeds the stored one
        if bid > stored.get(item_id, 0.0):
            stored[item_id] = max_bid
    items = tiny.execute(
        "SELECT id, max_bid FROM items UNION ALL SELECT id, max_bid FROM old_items"
    ).fetchall()
    assert {item_id: max_bid for item_id, max_bid in items} == {
        item_id: stored.get(item_id, 0.0) for item_id, _ in items
    }


def test_one_comment_per_item_about_its_seller(
    tiny: Connection,
) -> None:
    wrong = scalar(
        tiny,
        "SELECT count(*) FROM (SELECT id, seller FROM items UNION ALL "
        "SELECT id, seller FROM old_items) i "
        "LEFT JOIN comments c ON c.item_id = i.id "
        "WHERE c.id IS NULL OR c.to_user_id <> i.seller",
    )
    assert wrong == 0
    assert set(column(tiny, "SELECT DISTINCT rating FROM comments")) == {-5, -3, 0, 3, 5}
    lengths = column(tiny, "SELECT length(comment) FROM comments")
    assert min(lengths) >= 1
    assert max(lengths) <= 2048
    unrated = scalar(
        tiny,
        "SELECT count(*) FROM users u LEFT JOIN (SELECT to_user_id, sum(rating) s "
        "FROM comments GROUP BY to_user_id) c ON c.to_user_id = u.id "
        "WHERE u.rating <> coalesce(c.s, 0)",
    )
    assert unrated == 0


def test_active_items_follow_the_category_counts(
    tiny: Connection,
) -> None:
    rows = tiny.execute("SELECT category, count(*) FROM items GROUP BY category").fetchall()
    counts: dict[int, int] = dict(rows)
    weights = [category.count for category in data.categories()]
    expected = spread(TINY.active_items, weights)
    assert [counts.get(i, 0) for i in range(1, 21)] == expected
    assert scalar(tiny, "SELECT min(category) || '-' || max(category) FROM old_items") == "1-20"


def test_items_by_rc_matches_items_and_sellers(
    tiny: Connection,
) -> None:
    differences = scalar(
        tiny,
        "SELECT count(*) FROM (SELECT i.id, u.region, i.category, i.end_date FROM items i "
        "JOIN users u ON u.id = i.seller) j FULL JOIN items_by_rc r ON r.item_id = j.id "
        "WHERE r.item_id IS NULL OR j.id IS NULL "
        "OR (r.region, r.category, r.end_date) <> (j.region, j.category, j.end_date)",
    )
    assert differences == 0


def test_spread_splits_by_largest_remainders() -> None:
    assert spread(10, [1, 1, 1]) == [4, 3, 3]
    assert spread(7, [5, 0, 2]) == [5, 0, 2]
    assert sum(spread(300, [c.count for c in data.categories()])) == 300


TABLES = ["users", "items", "old_items", "bids", "comments", "items_by_rc"]


def fingerprint(conn: Connection) -> list[object]:
    return [
        scalar(conn, f"SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM {table} t")
        for table in TABLES
    ]


def test_the_same_seed_gives_the_same_database(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        generate.load(conn, TINY, seed=3)
        first = fingerprint(conn)
        schema.drop_tables(conn)
        generate.load(conn, TINY, seed=3)
        assert fingerprint(conn) == first
        schema.drop_tables(conn)
        generate.load(conn, TINY, seed=4)
        other = fingerprint(conn)
    assert all(a != b for a, b in zip(first, other, strict=True))

"""Rows shaped by a psycopg row factory: the same keys and values from a hit as from a miss,
and a factory whose rows the cache cannot store exactly refused when stored."""

from __future__ import annotations

import datetime
import decimal

import pytest
from psycopg.rows import dict_row, namedtuple_row

import txcache
from library_fixtures import LibraryStack


@txcache.cacheable
def item_row(item_id: int) -> dict[str, object] | None:
    """One item as a dict, with a computed column of a type of its own."""
    return txcache.query_one(
        "SELECT id, name, price, price::numeric / 3 AS third, "
        "date '2026-11-26' + id AS due FROM items WHERE id = %s",
        (item_id,),
        row_factory=dict_row,
    )


@txcache.cacheable
def item_tuple(item_id: int) -> object:
    """One item as a named tuple: not a type the cache stores exactly."""
    return txcache.query_one(
        "SELECT id, name FROM items WHERE id = %s", (item_id,), row_factory=namedtuple_row
    )


def test_dict_rows_are_identical_from_a_hit_and_from_a_miss(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=60):
        missed = item_row(4)
    hits = item_row.stats.hits
    with lib.cache.read_only(staleness=60):
        hit = item_row(4)
    assert item_row.stats.hits == hits + 1
    assert hit == missed
    assert hit is not None
    assert missed is not None
    assert list(hit) == list(missed) == ["id", "name", "price", "third", "due"]  # key order
    assert [type(value) for value in hit.values()] == [
        int, str, int, decimal.Decimal, datetime.date
    ]  # fmt: skip


def test_rows_the_cache_cannot_store_exactly_are_refused_when_stored(lib: LibraryStack) -> None:
    with lib.cache.read_only(staleness=60), pytest.raises(txcache.UnsupportedValue):
        item_tuple(4)


def test_a_read_write_transaction_takes_a_row_factory_too(lib: LibraryStack) -> None:
    with lib.cache.read_write() as tx:
        row = tx.query_one("SELECT id, name FROM items WHERE id = 2", row_factory=dict_row)
        rows = txcache.query("SELECT id FROM items WHERE id < 3 ORDER BY id", row_factory=dict_row)
    assert row == {"id": 2, "name": "item 2"}
    assert rows == [{"id": 1}, {"id": 2}]

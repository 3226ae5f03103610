"""Manual invalidation, the escape hatch for what the database cannot see: ``fn.invalidate``
makes one call's results stale at a commit, ``fn.invalidate_all`` every call's; callers'
results go stale with them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pytest

import txcache
from library_fixtures import LibraryStack
from txcache.errors import TransactionError

EXCHANGE = {"EUR": 100, "USD": 90}  # an external service the database knows nothing of


@txcache.cacheable(manual_invalidation=True)
def rate(currency: str) -> int:
    """A value read from outside the database."""
    return EXCHANGE[currency]


@txcache.cacheable
def price_in(item_id: int, currency: str) -> int:
    """A database read combined with the external value: goes stale with it."""
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0]) * rate(currency)


@txcache.cacheable
def plain(n: int) -> int:
    """A function without manual invalidation."""
    return n


T = TypeVar("T")


def read(lib: LibraryStack, call: Callable[[], T], not_before: int | None = None) -> T:
    with lib.cache.read_only(staleness=60, not_before=not_before):
        return call()


@dataclass(frozen=True)
class Warm:
    """The stack once every function's results are cached, and the token they were read at."""

    lib: LibraryStack
    token: int | None


@pytest.fixture
def warm(lib: LibraryStack) -> Warm:
    EXCHANGE.update(EUR=100, USD=90)
    lib.caught_up()
    lib.fresh_pins()
    token = rate.invalidate_all()  # results of earlier tests of this module
    lib.caught_up()
    for _ in range(2):
        assert read(lib, lambda: price_in(2, "EUR"), token) == 2000
        assert read(lib, lambda: rate("USD"), token) == 90
    # A read at a pin before it would run rate() again, on today's EXCHANGE: a result of a
    # function that reads outside the database is what it returned at some moment.
    return Warm(lib, token)


def test_invalidate_makes_one_call_stale_and_its_callers_with_it(warm: Warm) -> None:
    lib = warm.lib
    EXCHANGE["EUR"] = 110
    assert read(lib, lambda: rate("EUR"), warm.token) == 100  # cached: the database saw nothing
    hits = rate.stats.hits
    token = rate.invalidate("EUR")
    assert token is not None
    lib.caught_up()
    assert read(lib, lambda: rate("EUR"), token) == 110
    assert read(lib, lambda: price_in(2, "EUR"), token) == 2200  # the caller too
    usd_hits = rate.stats.hits
    assert read(lib, lambda: rate("USD"), token) == 90
    assert rate.stats.hits == usd_hits + 1  # another call stays cached
    assert rate.stats.hits > hits


def test_invalidate_all_makes_every_call_stale(warm: Warm) -> None:
    lib = warm.lib
    EXCHANGE.update(EUR=120, USD=95)
    token = rate.invalidate_all()
    lib.caught_up()
    assert read(lib, lambda: rate("EUR"), token) == 120
    assert read(lib, lambda: rate("USD"), token) == 95


def test_an_invalidation_in_a_read_write_transaction_commits_with_it(warm: Warm) -> None:
    lib = warm.lib
    EXCHANGE["EUR"] = 130
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = price WHERE id = 2")
        assert rate.invalidate("EUR") is None  # the block's commit is the token
    assert tx.commit_timestamp is not None
    lib.caught_up()
    assert read(lib, lambda: rate("EUR"), tx.commit_timestamp) == 130


def test_an_invalidation_rolled_back_invalidates_nothing(warm: Warm) -> None:
    lib = warm.lib
    EXCHANGE["EUR"] = 140

    def invalidate_then_fail() -> None:
        with lib.cache.read_write():
            rate.invalidate("EUR")
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        invalidate_then_fail()
    token = lib.cache.timestamp()
    lib.caught_up()
    assert read(lib, lambda: rate("EUR"), token) == 100


def test_a_read_only_transaction_cannot_invalidate(warm: Warm) -> None:
    with warm.lib.cache.read_only(), pytest.raises(TransactionError, match="read/write"):
        rate.invalidate("EUR")


def test_a_function_without_manual_invalidation_says_how_to_declare_it(lib: LibraryStack) -> None:
    with pytest.raises(TypeError, match=r"manual_invalidation=True"):
        plain.invalidate(1)

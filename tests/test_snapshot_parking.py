"""Consecutive read-only transactions at one pin share one database transaction
(txcache._parking): what is reused, what is not, and the bound on what it costs a schema
change — against a real stack. The lot's own rules are unit-tested at the end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest

import txcache
from library_fixtures import LibraryStack
from txcache import Pin, PinSet
from txcache._parking import ParkedSnapshot, ParkingLot
from txcache._session import SessionContext
from txcache.stack import wait_until


class StickyPolicy:
    """The newest pin the first time, then that same pin while the set has it: two blocks
    choose one pin whatever the agent takes meanwhile."""

    def __init__(self) -> None:
        self.ts: int | None = None

    def __call__(self, pin_set: PinSet, now: float) -> Pin | None:
        same = pin_set.within(self.ts, self.ts + 1) if self.ts is not None else []
        if same:
            return same[0]
        newest = pin_set.newest()
        self.ts = newest.ts if newest is not None else None
        return newest


@txcache.cacheable
def price_of(item_id: int) -> int:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


@pytest.fixture
def sticky(database: str) -> Iterator[LibraryStack]:
    """The library stack with the sticky pin policy and a long hold (the test ends it)."""
    with LibraryStack(database, pin_policy=StickyPolicy(), snapshot_hold=30) as stack:
        stack.caught_up()
        stack.fresh_pins()
        yield stack


def started_at(cache: txcache.Cache) -> tuple[Any, int]:
    """When one read-only block's database transaction began (equal in two blocks only if
    they shared one), and how many statements in it ran the rewrite check. Its queries
    are all analysed: a block that ran one the analysis refused is not parked."""
    with cache.read_only(staleness=60) as tx:
        txcache.query_one("SELECT price FROM items WHERE id = %s", (1,))
    return tx._database_began, tx.rewrite_checks


def test_blocks_at_one_pin_run_in_one_database_transaction(sticky: LibraryStack) -> None:
    first, checks = started_at(sticky.cache)
    assert checks == 1, "a new database transaction checks each statement"
    second, checks = started_at(sticky.cache)
    assert second == first, "the second block ran in the first one's database transaction"
    assert checks == 0, "items was verified in it already"
    assert sticky.cache.parking.reused == 1


def test_a_failed_block_is_not_kept(sticky: LibraryStack) -> None:
    first, _ = started_at(sticky.cache)
    with pytest.raises(psycopg.errors.DivisionByZero), sticky.cache.read_only(staleness=60):
        txcache.query_one("SELECT 1 / 0")
    assert len(sticky.cache.parking) == 0
    later, _ = started_at(sticky.cache)
    assert later != first


def test_no_hold_no_reuse(database: str) -> None:
    with LibraryStack(database, pin_policy=StickyPolicy(), snapshot_hold=0) as lib:
        lib.caught_up()
        lib.fresh_pins()
        first, _ = started_at(lib.cache)
        assert len(lib.cache.parking) == 0
        assert started_at(lib.cache)[0] != first


def test_a_schema_change_waits_for_a_parked_transaction_only_as_long_as_the_hold(
    database: str,
) -> None:
    """The parked transaction holds items' AccessShareLock: an ALTER TABLE waits until the
    cache's worker ends it (0.2 s after it began, checked every 0.2 s), never for its
    lock_timeout."""
    with LibraryStack(database, pin_policy=StickyPolicy(), snapshot_hold=0.2) as lib:
        lib.caught_up()
        lib.fresh_pins()
        started_at(lib.cache)
        with psycopg.connect(lib.dsn, autocommit=True) as ddl:
            ddl.execute("SET lock_timeout = '20s'")
            ddl.execute("ALTER TABLE items ADD COLUMN note text")
        assert len(lib.cache.parking) == 0


def test_a_transaction_at_another_pin_uses_a_parked_connection_not_the_pool(
    database: str,
) -> None:
    """With one pooled connection, parked at an old pin, a block that needs a newer one
    takes that connection (its transaction ended) instead of waiting for the pool."""
    with LibraryStack(database, pool_size=1, pool_timeout=2, snapshot_hold=30) as lib:
        lib.caught_up()
        lib.fresh_pins()
        with lib.cache.read_only(staleness=60):
            assert price_of(2) == 20
        assert len(lib.cache.parking) == 1
        token = lib.commit("UPDATE items SET price = 21 WHERE id = 2")
        with lib.cache.read_only(staleness=60, not_before=token):
            assert price_of(2) == 21


def test_an_event_loop_blocked_by_a_schema_change_does_not_wait_forever(database: str) -> None:
    """The async cache's worker runs on the loop: the loop blocked by a synchronous ALTER
    TABLE that waits for the parked transaction's lock cannot end it. The watchdog thread
    ends its session a second past the hold, and the loop's next block still works."""
    with LibraryStack(database) as lib:
        lib.caught_up()
        lib.fresh_pins()

        async def main() -> int:
            cache = await txcache.connect_async(
                dsn=lib.dsn,
                nodes=lib.node_addresses,
                agent=lib.agent_address,
                refresh_interval=0.05,
                pin_policy=StickyPolicy(),
                snapshot_hold=0.2,
            )
            try:
                async with cache.read_only(staleness=60):
                    await txcache.aio.query_one("SELECT price FROM items WHERE id = 3")
                assert len(cache.parking) == 1
                with psycopg.connect(lib.dsn, autocommit=True) as ddl:  # blocks the loop
                    ddl.execute("SET lock_timeout = '20s'")
                    ddl.execute("ALTER TABLE items ADD COLUMN blocked text")
                async with cache.read_only(staleness=60):
                    row = await txcache.aio.query_one("SELECT price FROM items WHERE id = 3")
                assert row is not None
                return int(row[0])
            finally:
                await cache.close()

        assert asyncio.run(main()) == 30


def backend_pid() -> int:
    """The PostgreSQL session the current read-only block runs in."""
    row = txcache.query_one("SELECT pg_backend_pid()")
    assert row is not None
    return int(row[0])


def session_ended(lib: LibraryStack, pid: int) -> bool:
    """Whether the PostgreSQL session ``pid`` is gone."""
    row = lib.admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is None


def pool_whole(cache: txcache.Cache) -> bool:
    """Whether every connection the pool made is back in it or parked (none lost)."""
    stats = cache.pool.get_stats()
    return stats.get("pool_available", 0) + len(cache.parking) == stats.get("pool_size", 0)


def test_a_block_that_ends_after_close_parks_nothing(sticky: LibraryStack) -> None:
    """A block still running when its cache is closed (a shutdown hook while a request
    finishes) ends its database transaction instead of parking it: nothing ends a parked one
    once the cache is closed, and its locks would hold off schema changes for good. The
    closed cache then refuses blocks."""
    cache = sticky.cache
    with cache.read_only(staleness=60):
        session = backend_pid()
        cache.close()
    assert len(cache.parking) == 0
    wait_until(lambda: session_ended(sticky, session), "the block's session to end")
    with pytest.raises(psycopg_pool.PoolClosed), cache.read_only(staleness=60):
        txcache.query_one("SELECT 1")


def test_an_async_block_that_ends_after_close_parks_nothing(sticky: LibraryStack) -> None:
    """:func:`test_a_block_that_ends_after_close_parks_nothing` for the async cache."""

    async def main() -> int:
        cache = await txcache.connect_async(
            dsn=sticky.dsn,
            nodes=sticky.node_addresses,
            agent=sticky.agent_address,
            refresh_interval=0.05,
            pin_policy=StickyPolicy(),
            snapshot_hold=30,
        )
        try:
            async with cache.read_only(staleness=60):
                row = await txcache.aio.query_one("SELECT pg_backend_pid()")
                await cache.close()
            assert len(cache.parking) == 0
            with pytest.raises(psycopg_pool.PoolClosed):
                async with cache.read_only(staleness=60):
                    await txcache.aio.query_one("SELECT 1")
        finally:
            await cache.close()
        assert row is not None
        return int(row[0])

    session = asyncio.run(main())
    wait_until(lambda: session_ended(sticky, session), "the async block's session to end")


def test_a_block_interrupted_as_it_resumes_a_parked_transaction_gives_its_connection_back(
    sticky: LibraryStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C (``KeyboardInterrupt``, raised wherever the main thread is) that lands after
    a block took its connection but before it holds it: the connection goes back to the pool,
    not lost to it."""
    started_at(sticky.cache)
    assert len(sticky.cache.parking) == 1
    note_session = txcache.ReadOnlyTransaction._note_session

    def interrupted(transaction: txcache.ReadOnlyTransaction, connection: Any) -> None:
        monkeypatch.setattr(txcache.ReadOnlyTransaction, "_note_session", note_session)
        raise KeyboardInterrupt

    monkeypatch.setattr(txcache.ReadOnlyTransaction, "_note_session", interrupted)
    with pytest.raises(KeyboardInterrupt), sticky.cache.read_only(staleness=60):
        txcache.query_one("SELECT price FROM items WHERE id = %s", (1,))
    assert sticky.cache.parking.reused == 1, "the block took the parked connection"
    wait_until(lambda: pool_whole(sticky.cache), "the interrupted block's connection to come back")
    started_at(sticky.cache)


# -- the lot's rules (no I/O) -----------------------------------------------------------------

CONTEXT = SessionContext("sysid", 5, "app", 10, "app", (2200,), (("TimeZone", "UTC"),))


def parked(connection: str, ts: int, began: float, context: Any = CONTEXT) -> ParkedSnapshot[str]:
    pin = Pin(ts=ts, snapshot_id=f"s{ts}", current_as_of=0.0)
    return ParkedSnapshot(connection, pin, context, frozenset(), began)


def test_the_lot_keeps_young_transactions_and_gives_back_the_rest() -> None:
    lot: ParkingLot[str] = ParkingLot(hold=1.0, limit=2)
    old = parked("old", 5, began=0.0)
    assert lot.park(old, now=1.0) is old, "as old as the hold: not kept"
    a, b, c = parked("a", 5, 0.5), parked("b", 6, 0.6), parked("c", 6, 0.7)
    assert lot.park(a, now=0.8) is None
    assert lot.park(b, now=0.8) is None
    assert lot.park(c, now=0.8) is a, "full: the oldest goes"
    assert lot.take(a.pin, CONTEXT, now=0.9) is None
    refreshed = Pin(ts=6, snapshot_id="s6", current_as_of=9.0)
    assert lot.take(refreshed, CONTEXT, now=0.9) is c, "the youngest at the snapshot"
    assert lot.expired(now=1.61) == [b]
    assert len(lot) == 0


def test_a_transaction_parked_late_but_begun_early_does_not_hide_a_young_one() -> None:
    lot: ParkingLot[str] = ParkingLot(hold=1.0, limit=4)
    young, early = parked("young", 8, began=0.5), parked("early", 8, began=0.0)
    assert lot.park(young, now=0.6) is None
    assert lot.park(early, now=0.7) is None, "finished last, began first"
    assert lot.take(young.pin, CONTEXT, now=1.2) is young


def test_the_lot_never_gives_a_transaction_past_its_hold_or_of_another_context() -> None:
    lot: ParkingLot[str] = ParkingLot(hold=1.0, limit=4)
    one = parked("one", 7, 0.0)
    assert lot.park(one, now=0.1) is None
    assert lot.take(one.pin, CONTEXT, now=1.0) is None, "too old now"
    assert lot.take_any() is one, "still there, for a block at another pin"
    lot.park(one, now=0.1)
    assert lot.take(one.pin, object(), now=0.2) is None  # type: ignore[arg-type]
    assert lot.overdue(now=1.5, grace=1.0) == []
    assert lot.overdue(now=2.0, grace=1.0) == [one]

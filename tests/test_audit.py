"""The sampled audit (``audit_rate``, docs/library.md "Audit"): a sampled cache hit is re-run
at the pin it was read at and compared. A wrong cached value is planted the way a real
one arises: the function reads something outside the database (``OUTSIDE``), which the
test changes after the value was cached. Every wait is for a counter to move."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

import psycopg
import pytest

import txcache
from async_fixtures import AsyncLib
from library_fixtures import LibraryStack
from txcache import aio, metrics
from txcache._pinset import Pin
from txcache._read_only_core import BEGIN_READ_ONLY, NO_SNAPSHOT
from txcache.aio import AsyncCache
from txcache.stack import wait_until

OUTSIDE = {"suffix": ""}
"""What the functions read besides the database: changing it plants a wrong cached value."""


@txcache.cacheable
def label(item_id: int) -> str:
    """An item's name, and something the database knows nothing of."""
    row = txcache.query_one("SELECT name FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return str(row[0]) + OUTSIDE["suffix"]


@txcache.cacheable
async def async_label(item_id: int) -> str:
    """:func:`label`, for the async driver."""
    row = await aio.query_one("SELECT name FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return str(row[0]) + OUTSIDE["suffix"]


@pytest.fixture(autouse=True)
def nothing_outside() -> Iterator[None]:
    OUTSIDE["suffix"] = ""
    yield
    OUTSIDE["suffix"] = ""


@pytest.fixture
def audited(database: str) -> Iterator[LibraryStack]:
    """The library stack, its cache auditing every hit."""
    with LibraryStack(database, audit_rate=1.0) as stack:
        yield stack


def read(lib: LibraryStack, item_id: int) -> str:
    with lib.cache.read_only(staleness=60):
        return label(item_id)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, what, timeout=20)


def warm(lib: LibraryStack, item_id: int) -> None:
    """``label(item_id)`` cached, and its first hit checked: a later change of ``OUTSIDE``
    is not seen by that check."""
    lib.caught_up()
    lib.fresh_pins()
    read(lib, item_id)  # a miss: the value is stored
    hits, checks = label.stats.hits, label.audit.checks
    read(lib, item_id)
    assert label.stats.hits == hits + 1
    wait_for(lambda: label.audit.checks > checks, "the audit to check the first hit")


def test_nothing_is_audited_at_rate_0(lib: LibraryStack) -> None:
    assert lib.cache.auditor is None
    lib.caught_up()
    lib.fresh_pins()
    counts = label.audit.as_dict()
    for _ in range(3):
        read(lib, 1)
    assert label.stats.hits >= 2
    assert label.audit.as_dict() == counts


def test_a_correct_hit_is_checked_and_matches(audited: LibraryStack) -> None:
    checks, mismatches = label.audit.checks, label.audit.mismatches
    warm(audited, 2)
    read(audited, 2)
    wait_for(lambda: label.audit.checks >= checks + 2, "the audit to check the second hit")
    assert label.audit.mismatches == mismatches


def test_a_wrong_cached_value_is_a_mismatch_in_the_log_and_the_metrics(
    audited: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="txcache")
    warm(audited, 3)
    mismatches = label.audit.mismatches
    OUTSIDE["suffix"] = " (changed outside the database)"
    with audited.cache.read_only(staleness=60) as tx:
        assert label(3) == "item 3"  # the cached value, as the database cannot say otherwise
        pin = tx.pin_set.newest()
    assert pin is not None
    wait_for(lambda: label.audit.mismatches > mismatches, "the audit to find the mismatch")
    [line] = [r.getMessage() for r in caplog.records if "audit mismatch" in r.getMessage()]
    assert label.keys.name in line
    assert label.key(3).hex() in line
    assert f"pin {pin.ts}" in line
    assert "not deterministic or reads something outside the database" in line
    assert "please report it" in line
    assert "it stays cached" in line
    assert read(audited, 3) == "item 3", "without audit_invalidate the value stays"
    # That hit is audited too, in the background: the count may grow while it renders.
    before = label.audit.mismatches
    rendered = metrics.render()
    sample = f'txcache_audit_mismatches_total{{function="{label.keys.name}"}} '
    [value] = [
        line.removeprefix(sample) for line in rendered.splitlines() if line.startswith(sample)
    ]
    assert before <= float(value) <= label.audit.mismatches


def test_a_block_that_fails_drops_its_samples(audited: LibraryStack) -> None:
    warm(audited, 4)
    skipped, checks = label.audit.skipped, label.audit.checks

    def fail_after_a_hit() -> None:
        with audited.cache.read_only(staleness=60):
            label(4)
            raise RuntimeError("the application's own failure")

    with pytest.raises(RuntimeError):
        fail_after_a_hit()
    assert label.audit.skipped == skipped + 1  # counted as the block ended
    assert label.audit.checks == checks


def test_audit_invalidate_deletes_the_mismatched_value(database: str) -> None:
    with LibraryStack(database, audit_rate=1.0, audit_invalidate=True) as lib:
        warm(lib, 5)
        mismatches, misses = label.audit.mismatches, label.stats.miss_count
        OUTSIDE["suffix"] = "!"
        assert read(lib, 5) == "item 5"
        wait_for(lambda: label.audit.mismatches > mismatches, "the audit to find the mismatch")
        assert read(lib, 5) == "item 5!", "the next call runs the function again"
        assert label.stats.miss_count == misses + 1


def snapshot_gone(lib: LibraryStack, pin: Pin) -> bool:
    """Whether ``pin``'s snapshot can no longer be imported."""
    try:
        lib.admin.execute(f"{BEGIN_READ_ONLY}; SET TRANSACTION SNAPSHOT '{pin.snapshot_id}'")
    except psycopg.Error as error:
        lib.admin.execute("ROLLBACK")
        return error.sqlstate in NO_SNAPSHOT
    lib.admin.execute("ROLLBACK")
    return False


def test_a_pin_released_before_its_check_is_skipped_not_a_mismatch(database: str) -> None:
    """The check waits for the pool's one connection, which the test holds until the agent
    (whose sessions export the pins) has stopped and the pin's snapshot is gone."""
    with LibraryStack(database, audit_rate=1.0, pool_size=1, snapshot_hold=0) as lib:
        warm(lib, 6)
        audit = label.audit
        skipped, checks, mismatches = audit.skipped, audit.checks, audit.mismatches
        held = lib.cache.pool.getconn()
        try:
            with lib.cache.read_only(staleness=60) as tx:
                assert label(6) == "item 6"  # a hit: no connection needed
                pin = tx.pin_set.newest()
            assert pin is not None
            assert lib.agent is not None
            lib.agent.stop()
            wait_for(lambda: snapshot_gone(lib, pin), f"pin {pin.ts}'s snapshot to be gone")
        finally:
            lib.cache.pool.putconn(held)
        wait_for(lambda: audit.skipped > skipped, "the check to be skipped")
        assert (audit.checks, audit.mismatches) == (checks, mismatches)


def test_the_async_driver_finds_and_deletes_a_mismatch(
    alib: AsyncLib, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="txcache")
    audit = async_label.audit

    async def read_async(cache: AsyncCache) -> str:
        async with cache.read_only(staleness=60):
            return await async_label(7)

    async def until(condition: Callable[[], bool], what: str) -> None:
        # In a worker thread: the audit's task needs the loop meanwhile.
        await asyncio.to_thread(wait_for, condition, what)

    async def body(cache: AsyncCache) -> None:
        assert await read_async(cache) == "item 7"  # a miss: stored
        checks = audit.checks
        assert await read_async(cache) == "item 7"
        await until(lambda: audit.checks > checks, "the audit to check the first hit")
        mismatches = audit.mismatches
        OUTSIDE["suffix"] = "!"
        assert await read_async(cache) == "item 7"  # the cached value
        await until(lambda: audit.mismatches > mismatches, "the audit to find the mismatch")
        assert await read_async(cache) == "item 7!", "deleted: the function runs again"

    alib.run(body, audit_rate=1.0, audit_invalidate=True)
    assert any(
        "audit mismatch" in r.getMessage() and async_label.keys.name in r.getMessage()
        for r in caplog.records
    )

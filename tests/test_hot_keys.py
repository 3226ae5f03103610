"""One recompute per hot key: concurrent misses of one key wait for the caller that holds its
lease (docs/library.md, "Hot keys: one recompute"), against the real stack.

Many threads (or tasks) miss one popular key right after an invalidation; one computes it,
the others wait for its store and hit it. A holder that raises, or is interrupted or cancelled,
releases the lease at once; one that takes longer than the lease loses it to the next caller.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import txcache
from async_fixtures import AsyncLib
from library_fixtures import LibraryStack
from txcache import aio
from txcache.aio import AsyncCache
from txcache.stack import wait_until

THREADS = 12

runs: list[int] = []
"""The categories :func:`category_total` computed, one entry per run (a miss)."""
slow_first = threading.Event()
"""Set: the next run waits on :data:`released` first (a slow holder)."""
released = threading.Event()
fail_with: list[BaseException] = []
"""Holds an exception: the next run raises it (a holder that fails, or is interrupted)."""
stalled: dict[str, asyncio.Event] = {}
"""Holds an event: the next run of :func:`async_category_total` waits for it (a holder that
is cancelled while it computes)."""


@txcache.cacheable
def category_total(category: int) -> int:
    """The total price of a category's items, slowly enough that concurrent callers miss
    together."""
    runs.append(category)
    if slow_first.is_set():
        slow_first.clear()
        released.wait(30)
    if fail_with:
        raise fail_with.pop()
    time.sleep(0.1)
    row = txcache.query_one("SELECT sum(price) FROM items WHERE category = %s", (category,))
    assert row is not None
    return int(row[0])


@txcache.cacheable
async def async_category_total(category: int) -> int:
    """:func:`category_total` for tasks."""
    runs.append(category)
    stall = stalled.pop("next", None)
    if stall is not None:
        await stall.wait()
    await asyncio.sleep(0.1)
    row = await aio.query_one("SELECT sum(price) FROM items WHERE category = %s", (category,))
    assert row is not None
    return int(row[0])


@pytest.fixture
def lib(database: str) -> Iterator[LibraryStack]:
    """The library stack with a 2 s lease."""
    with LibraryStack(database, lease=2.0) as stack:
        runs.clear()
        fail_with.clear()
        stalled.clear()
        for event in (slow_first, released):
            event.clear()
        yield stack


def read(lib: LibraryStack, not_before: int | None = None) -> int:
    with lib.cache.read_only(staleness=60, not_before=not_before):
        return category_total(1)


def together(count: int, call: Callable[[], int]) -> list[int]:
    """``call()`` in ``count`` threads released at once; their results."""
    start = threading.Barrier(count)
    results: list[int] = []

    def one() -> None:
        start.wait()
        results.append(call())

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == count, "a caller did not finish"
    return results


def test_concurrent_misses_after_an_invalidation_compute_once(lib: LibraryStack) -> None:
    before = read(lib)
    token = lib.commit("UPDATE items SET price = price + 1 WHERE id = 1")  # category 1
    runs.clear()
    results = together(THREADS, lambda: read(lib, not_before=token))
    assert results == [before + 1] * THREADS
    assert runs == [1], f"{len(runs)} computations for one invalidated key"
    assert category_total.stats.lease_waits >= 1


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("the holder failed"), KeyboardInterrupt()],
    ids=["raises", "interrupted"],
)
def test_a_holder_that_fails_hands_the_lease_over_at_once(
    lib: LibraryStack, failure: BaseException
) -> None:
    fail_with.append(failure)
    started = time.monotonic()
    outcomes: list[str] = []

    def call() -> int:
        try:
            return read(lib)
        except type(failure):
            outcomes.append("failed")
            return -1

    results = together(2, call)
    assert outcomes == ["failed"]
    assert len(runs) == 2
    assert time.monotonic() - started < 2.0, "the waiter waited for the lease to expire"
    assert sorted(results)[1] > 0


def test_a_holder_slower_than_its_lease_loses_it_to_a_waiter(lib: LibraryStack) -> None:
    holder = threading.Thread(target=read, args=(lib,))
    slow_first.set()
    holder.start()
    try:
        wait_until(lambda: runs, "the slow holder to start its run (holding the lease)")
        started = time.monotonic()
        assert read(lib) > 0  # waits for the 2 s lease, then computes itself
        waited = time.monotonic() - started
    finally:
        released.set()
        holder.join(30)
    assert len(runs) == 2
    assert waited >= 1.5, f"took the lease over after {waited:.2f} s"


def test_concurrent_tasks_missing_one_key_compute_once(lib: LibraryStack, alib: AsyncLib) -> None:
    async def warm(cache: AsyncCache) -> int:
        async with cache.read_only(staleness=60):
            return await async_category_total(2)

    before = alib.run(warm)
    token = lib.commit("UPDATE items SET price = price + 1 WHERE id = 2")  # category 2
    runs.clear()

    async def herd(cache: AsyncCache) -> list[int]:
        async def one() -> int:
            async with cache.read_only(staleness=60, not_before=token):
                return await async_category_total(2)

        return await asyncio.gather(*(one() for _ in range(THREADS)))

    assert alib.run(herd) == [before + 1] * THREADS
    assert runs == [2], f"{len(runs)} computations for one invalidated key"


def test_a_holder_cancelled_hands_the_lease_over_at_once(alib: AsyncLib) -> None:
    """The task holding the key's lease is cancelled while it computes (a request timed
    out): the task waiting for the lease takes over at once, not when the lease expires."""

    async def body(cache: AsyncCache) -> tuple[int, float]:
        async def one() -> int:
            async with cache.read_only(staleness=60):
                return await async_category_total(0)

        stalled["next"] = asyncio.Event()  # never set: the holder computes until cancelled
        holder = asyncio.create_task(one())
        await asyncio.to_thread(wait_until, lambda: runs, "the holder to start computing")
        waits = async_category_total.stats.lease_waits
        waiter = asyncio.create_task(one())
        await asyncio.to_thread(
            wait_until,
            lambda: async_category_total.stats.lease_waits > waits,
            "the second caller to wait for the lease",
        )
        holder.cancel()
        cancelled = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await holder
        total = await waiter
        return total, time.monotonic() - cancelled

    total, waited = alib.run(body, lease=2.0)
    assert total > 0
    assert runs == [0, 0]
    assert waited < 1.0, f"the waiter waited {waited:.2f} s: for the lease to expire (2 s)"

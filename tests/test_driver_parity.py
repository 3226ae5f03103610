"""The sync and the async drivers behave alike where they used to drift (the sync one is
generated from the async one, tools/async_to_sync.py): ownership is checked on the uncached
path too, ``run_directly_when`` holds for both, a failure while beginning gives the
connection back the same way, and both commit timestamps are the same token."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import psycopg
import pytest

import txcache
from async_fixtures import AsyncLib
from library_fixtures import LibraryStack
from txcache import _cacheable_base
from txcache.aio import AsyncCache


@txcache.cacheable
def doubled(number: int) -> int:
    return 2 * number


@txcache.cacheable
async def doubled_async(number: int) -> int:
    return 2 * number


def test_an_uncached_sync_call_from_another_thread_is_refused(lib: LibraryStack) -> None:
    """A read/write transaction runs cacheable functions uncached; from a thread that did
    not begin it, the call is refused, as in the async driver for another task."""
    errors: list[BaseException] = []
    with lib.cache.read_write():
        inherited = contextvars.copy_context()  # as asyncio.to_thread hands a thread

        def elsewhere() -> None:
            try:
                doubled(1)  # no query of its own: the call itself is refused
            except txcache.TransactionError as error:
                errors.append(error)

        worker = threading.Thread(target=inherited.run, args=(elsewhere,))
        worker.start()
        worker.join()
    assert len(errors) == 1
    assert "thread that began it" in str(errors[0])


@pytest.fixture
def direct() -> Any:
    """A registered run-directly condition, on while the test sets it."""
    state = {"on": False}

    def condition() -> bool:
        return state["on"]

    _cacheable_base.run_directly_when(condition)
    yield state
    _cacheable_base._direct_conditions.remove(condition)


def test_run_directly_when_holds_for_sync_and_async_calls(
    lib: LibraryStack, alib: AsyncLib, direct: dict[str, bool]
) -> None:
    direct["on"] = True
    before = doubled.stats.uncached
    assert doubled(1) == 2  # outside any transaction: directly, not in an implicit one
    assert doubled.stats.uncached == before + 1

    async def body(cache: AsyncCache) -> None:
        before = doubled_async.stats.uncached
        assert await doubled_async(1) == 2
        assert doubled_async.stats.uncached == before + 1

    alib.run(body)


def kill_pooled_sessions(lib: LibraryStack) -> None:
    """End every session of the library's pool behind its back (its connections look idle
    and fail at their next statement)."""
    lib.admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND application_name = ''"
    )


def test_a_failure_while_beginning_gives_the_connection_back_in_both_drivers(
    lib: LibraryStack, alib: AsyncLib
) -> None:
    with lib.cache.read_write() as tx:
        tx.execute("SELECT 1")
    kill_pooled_sessions(lib)
    with pytest.raises(psycopg.OperationalError), lib.cache.read_write():
        pass
    with lib.cache.read_write() as tx:  # the broken connection was closed and replaced
        assert tx.query_one("SELECT 2") == (2,)

    async def body(cache: AsyncCache) -> None:
        async with cache.read_write() as tx:
            await tx.execute("SELECT 1")
        kill_pooled_sessions(lib)
        with pytest.raises(psycopg.OperationalError):
            async with cache.read_write():
                pass
        async with cache.read_write() as tx:
            assert await tx.query_one("SELECT 2") == (2,)

    alib.run(body, pool_size=1)


def test_both_commit_timestamps_name_the_commit(lib: LibraryStack, alib: AsyncLib) -> None:
    """A property of the sync transaction, a coroutine of the async one: the one difference
    of API left between them, and the same token."""
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = price WHERE id = 1")
    sync_token = tx.commit_timestamp
    assert isinstance(sync_token, int)

    async def body(cache: AsyncCache) -> int | None:
        async with cache.read_write() as written:
            await written.execute("UPDATE items SET price = price WHERE id = 2")
        return await written.commit_timestamp()

    async_token = alib.run(body)
    assert isinstance(async_token, int)
    assert async_token > sync_token
    assert asyncio.iscoroutinefunction(txcache.AsyncReadWriteTransaction.commit_timestamp)
    assert isinstance(txcache.ReadWriteTransaction.commit_timestamp, property)

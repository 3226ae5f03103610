"""Cancellation and timeouts in async transactions (docs/library.md, "Async"): an interrupted
call stores nothing, a statement interrupted mid-way fails its block and leaves no query
running, every connection goes back to the pool usable (rolled back or replaced), and the
next transaction works. Each body ends with the pool whole (``AsyncLib.run`` checks it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import AsyncIterator

import psycopg
import pytest

import txcache
from async_fixtures import AsyncLib, assert_pool_whole
from test_async_resp import stop
from txcache import aio
from txcache.aio import AsyncCache
from txcache.stack import wait_until

ran: list[int] = []
paused: dict[str, asyncio.Event] = {}  # set by slow_price once its query ran
SLEEPING = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE state = 'active' AND query LIKE '%pg_sleep(%' AND pid <> pg_backend_pid()"
)


@txcache.cacheable
async def slow_price(item_id: int, pause: float) -> int:
    """A query, then a pause outside the database."""
    ran.append(item_id)
    row = await aio.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    if pause:
        paused["event"].set()
        await asyncio.sleep(pause)
    assert row is not None
    return int(row[0])


@txcache.cacheable
async def sleepy_price(item_id: int, pause: float) -> int:
    """A query that takes ``pause`` seconds in the database (``pg_sleep``, vouched for
    with the ``safe_functions`` setting)."""
    ran.append(item_id)
    row = await aio.query_one(
        "SELECT price FROM items, pg_sleep(%s) WHERE id = %s", (pause, item_id)
    )
    assert row is not None
    return int(row[0])


@contextlib.asynccontextmanager
async def timeout_when(event: asyncio.Event) -> AsyncIterator[None]:
    """``asyncio.timeout`` that expires as soon as ``event`` is set (not after a time a
    loaded machine could overrun)."""
    async with asyncio.timeout(None) as timeout:

        async def expire() -> None:
            await event.wait()
            timeout.reschedule(asyncio.get_running_loop().time())

        watcher = asyncio.create_task(expire())
        try:
            yield
        finally:
            watcher.cancel()


def sleeping_queries(alib: AsyncLib) -> int:
    row = alib.lib.admin.execute(SLEEPING).fetchone()
    assert row is not None
    return int(row[0])


def test_a_timeout_outside_the_database_stores_nothing_and_the_block_goes_on(
    alib: AsyncLib,
) -> None:
    ran.clear()

    async def body(cache: AsyncCache) -> None:
        paused["event"] = asyncio.Event()
        async with cache.read_only(staleness=60) as tx:
            with pytest.raises(TimeoutError):
                async with timeout_when(paused["event"]):
                    await slow_price(1, 30.0)
            assert not tx.failed  # no statement was interrupted
            assert tx.frames == []
            assert await slow_price(2, 0) == 20
        misses = slow_price.stats.misses["compulsory"]
        async with cache.read_only(staleness=60):
            assert await slow_price(1, 0) == 10  # nothing was stored: it runs again
            assert await slow_price(2, 0) == 20  # a hit
        assert slow_price.stats.misses["compulsory"] == misses + 1

    alib.run(body)
    assert ran == [1, 2, 1]


def test_a_timeout_inside_a_statement_fails_the_block_and_cancels_the_query(alib: AsyncLib) -> None:
    ran.clear()

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60) as tx:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await sleepy_price(3, 30.0)
            assert tx.failed
            with pytest.raises(txcache.TransactionError, match="failed earlier"):
                await sleepy_price(4, 0)
            with pytest.raises(txcache.TransactionError, match="failed earlier"):
                await aio.query("SELECT 1")
        assert sleeping_queries(alib) == 0  # psycopg cancelled it in the server
        async with cache.read_only(staleness=60):
            assert await sleepy_price(3, 0) == 30  # nothing stored; the connection is clean

    alib.run(body, safe_functions=["pg_sleep"], pool_size=1)
    assert ran == [3, 3]


def test_a_task_cancelled_in_a_block_gives_its_connection_back(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        started = asyncio.Event()

        async def reader() -> None:
            async with cache.read_only(staleness=60):
                started.set()
                await aio.query("SELECT pg_sleep(30)")

        task = asyncio.create_task(reader())
        await started.wait()
        await asyncio.sleep(0.3)
        assert sleeping_queries(alib) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert txcache.current_transaction() is None
        async with cache.read_only(staleness=60):  # the pool's one connection, usable
            assert await aio.query_one("SELECT price FROM items WHERE id = 5") == (50,)
        assert sleeping_queries(alib) == 0

    alib.run(body, pool_size=1)


def test_a_cancelled_write_commits_nothing(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async def writer() -> None:
            async with cache.read_write():
                await aio.execute("UPDATE items SET price = 0 WHERE id = 6")
                await aio.execute("SELECT pg_sleep(30)")

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await writer()
        async with cache.read_write():  # the same (only) connection, rolled back and reset
            assert await aio.query_one("SELECT price FROM items WHERE id = 6") == (60,)
            assert await aio.query_one("SHOW transaction_isolation") == ("read committed",)

    alib.run(body, pool_size=1)
    with psycopg.connect(alib.lib.dsn) as connection:
        assert connection.execute("SELECT price FROM items WHERE id = 6").fetchone() == (60,)


def test_a_task_cancelled_while_waiting_for_a_connection_takes_none(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async with cache.read_write():
            await aio.execute("SELECT 1")  # holds the only connection

            async def waiter() -> None:
                async with asyncio.timeout(0.2), cache.read_write():
                    pass

            with pytest.raises(TimeoutError):
                await asyncio.create_task(waiter())  # a task of its own may begin one
        async with cache.read_write():
            assert await aio.query_one("SELECT 1") == (1,)

    alib.run(body, pool_size=1)


def test_a_task_cancelled_while_a_parked_connection_rolls_back_gives_it_back(
    alib: AsyncLib,
) -> None:
    """A block takes a parked connection before the pool's, rolling its database transaction
    back first. A task cancelled during that ``ROLLBACK`` (its session stopped, as a slow
    server would be) gives the connection back all the same: the pool's only one."""

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60) as tx:
            await aio.query_one("SELECT name FROM items WHERE id = 1")  # analysed: parked
            session = tx._connection.info.backend_pid  # type: ignore[union-attr]
        assert len(cache.parking) == 1

        async def writer() -> None:
            async with cache.read_write():
                await aio.execute("SELECT 1")

        stop(session)  # its ROLLBACK waits until the session runs again
        try:
            task = asyncio.create_task(writer())
            await asyncio.to_thread(
                wait_until, lambda: len(cache.parking) == 0, "the writer to take the parked one"
            )
            task.cancel()
        finally:
            os.kill(session, signal.SIGCONT)
        with pytest.raises(asyncio.CancelledError):
            await task
        async with cache.read_write():
            assert await aio.query_one("SELECT 1") == (1,)

    alib.run(body, pool_size=1, pool_timeout=2, snapshot_hold=30)


def test_a_lookup_cut_short_changes_nothing(alib: AsyncLib) -> None:
    """A node that does not answer (stopped), and a timeout shorter than the node's: the
    lookup is abandoned, the block is not failed, and its reply is dropped when it comes."""
    lib = alib.lib
    pids = [node.process.pid for node in lib.nodes]

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            await slow_price(7, 0)  # a miss: the connections are open
        async with cache.read_only(staleness=60) as tx:
            for pid in pids:
                stop(pid)
            try:
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await slow_price(7, 0)
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            assert not tx.failed
            assert await slow_price(7, 0) == 70  # a hit, on the same connection
        assert cache.ring is not None
        assert all(node.is_up() for node in cache.ring.nodes)

    alib.run(body, node_timeout=5.0)


def test_timestamp_calls_cut_short_give_their_connections_back(alib: AsyncLib) -> None:
    """``cache.timestamp()`` borrows a pooled connection for one statement; cut short at
    any point (timeouts of a fraction of a millisecond to a few), each goes back, so the
    pool stays whole (``alib.run`` checks) and read/write blocks still get one each."""

    async def body(cache: AsyncCache) -> None:
        loop = asyncio.get_running_loop()
        ends = loop.time() + 3.0
        rng = random.Random(7)

        async def cut_short() -> int:
            cut = 0
            while loop.time() < ends:
                try:
                    async with asyncio.timeout(rng.uniform(0.0002, 0.005)):
                        await cache.timestamp()
                except TimeoutError:
                    cut += 1
            return cut

        cuts = await asyncio.gather(*(cut_short() for _ in range(8)))
        assert sum(cuts) > 0, "the timeouts cut calls short"
        await assert_pool_whole(cache)

        async def write() -> None:
            async with cache.read_write():
                await aio.execute("SELECT 1")

        await asyncio.gather(*(write() for _ in range(2)))

    alib.run(body, pool_size=2, pool_timeout=5)


def test_a_block_reading_after_a_token_never_waits_for_a_second_connection(
    alib: AsyncLib,
) -> None:
    """A token newer than the agent's fresh pin (a write made elsewhere, then
    ``cache.timestamp()``; or a lock-only write) has the block read the WAL position to
    judge it — on the connection it holds: with a pool of one, a second would wait
    ``pool_timeout`` and fail."""

    async def body(cache: AsyncCache) -> None:
        for _ in range(3):
            with psycopg.connect(alib.lib.dsn, autocommit=True) as outside:
                outside.execute("UPDATE items SET price = price + 1 WHERE id = 5")
            token = await cache.timestamp()
            async with cache.read_only(staleness=5, not_before=token):
                row = await aio.query_one("SELECT price FROM items WHERE id = 5")
            assert row is not None
        async with cache.read_write() as tx:
            await aio.query("SELECT price FROM items WHERE id = 5 FOR UPDATE")
        async with cache.read_only(staleness=5, not_before=await tx.commit_timestamp()):
            assert await aio.query_one("SELECT price FROM items WHERE id = 5") == row

    alib.run(body, pool_size=1, pool_timeout=2)

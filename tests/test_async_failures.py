"""The async library when parts die (docs/library.md, "Failures"): slower, never wrong,
never an application error — as the sync library (tests/test_library_failures.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import txcache
from async_fixtures import AsyncLib, agent_back, fresh_pins
from conftest import running_agent
from test_async_resp import stop
from txcache import aio
from txcache.aio import AsyncCache

reads: list[int] = []


@txcache.cacheable
async def price(item_id: int) -> int:
    reads.append(item_id)
    row = await aio.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


async def prices(
    cache: AsyncCache, staleness: float = 60, not_before: int | None = None
) -> list[int]:
    async with cache.read_only(staleness=staleness, not_before=not_before):
        return [await price(item_id) for item_id in range(1, 21)]


def truth(alib: AsyncLib) -> list[int]:
    rows = alib.lib.admin.execute("SELECT price FROM items ORDER BY id").fetchall()
    return [int(row[0]) for row in rows]


async def update_all(cache: AsyncCache, delta: int) -> int | None:
    async with cache.read_write() as tx:
        await tx.execute("UPDATE items SET price = price + %s", (delta,))
    return await tx.commit_timestamp()


def test_a_dead_node_means_misses_not_errors(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        assert await prices(cache) == truth(alib)
        alib.lib.nodes[0].kill()
        reads.clear()
        unavailable = price.stats.misses["unavailable"]
        assert await prices(cache) == truth(alib)
        assert price.stats.misses["unavailable"] - unavailable == 1, "one call finds it dead"
        assert 0 < len(reads) < 20, "only the dead node's keys ran: the live node's were cached"
        reads.clear()
        assert await prices(cache) == truth(alib)
        assert reads == [], "the dead node's keys are on the live node while it is down"
        token = await update_all(cache, 1)
        assert await prices(cache, not_before=token) == truth(alib)

    alib.run(body)


def test_a_stalled_node_is_skipped_after_its_timeout(alib: AsyncLib) -> None:
    pid = alib.lib.nodes[1].process.pid

    async def body(cache: AsyncCache) -> None:
        assert await prices(cache) == truth(alib)
        stop(pid)
        try:
            started = time.monotonic()
            assert await prices(cache) == truth(alib)
            assert time.monotonic() - started < 5, "one timeout, then the node is skipped"
        finally:
            os.kill(pid, signal.SIGCONT)

    alib.run(body, node_timeout=0.3)


def test_a_dead_agent_means_the_database_answers(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        assert await prices(cache) == truth(alib)
        running_agent(alib.lib).kill()
        token = await update_all(cache, 5)
        assert token is not None, "a WAL position stands in for the commit LSN"
        assert await prices(cache, not_before=token) == truth(alib)
        assert await prices(cache, staleness=0) == truth(alib)
        assert cache.agent is not None
        # Deliberately idle until the last pins the dead agent listed have expired.
        await asyncio.sleep(cache.agent.pin_list_ttl + 0.1)
        async with cache.read_only(staleness=60) as tx:
            assert [await price(i) for i in range(1, 21)] == truth(alib)
            assert tx.uncached, "the dead agent's pins are not offered"

    alib.run(body)


def test_caching_resumes_when_the_agent_returns(alib: AsyncLib) -> None:
    lib = alib.lib

    async def body(cache: AsyncCache) -> None:
        running_agent(lib).kill()
        await update_all(cache, 7)
        assert await prices(cache, staleness=0) == truth(alib)
        await asyncio.to_thread(lib.restart_agent)
        await agent_back(cache)
        await fresh_pins(cache)
        assert await prices(cache) == truth(alib)
        reads.clear()
        assert await prices(cache) == truth(alib)
        assert reads == [], "cached again"

    alib.run(body)

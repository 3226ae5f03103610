"""The async library's cache hit against the sync library's, and against bare round trips.

One stack (embedded PostgreSQL, one node, the agent), one cached row. In each
round, one after the other: a bare ``TXGET`` of the sync RESP client; a one-hit read-only
transaction of the sync library (``with cache.read_only(): get_item(1)``); a bare ``TXGET``
of the async client (``await connection.call``); a one-hit async transaction (``async with
acache.read_only(): await aget_item(1)``). Rounds alternate so that machine noise falls on
all four alike; the report gives each one's quantiles and the ratios of the p50s — the goal
is async p50 within 1.5x of sync p50.

    .venv/bin/python bench/async_hit_latency.py [--quick] [--storage disk|tmpfs]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from _common import bench_stack, postgres
from _report import log, machine_note, percentile, result_name, table, write_report

import txcache
from txcache import protocol
from txcache.aio import AsyncCache
from txcache.protocol import AsyncRespConnection
from txcache.stack import Stack, wait_until

SCHEMA = "CREATE TABLE items (id int PRIMARY KEY, name text); INSERT INTO items VALUES (1, 'a')"
QUERY = "SELECT id, name FROM items WHERE id = %s"


@txcache.cacheable
def get_item(item_id: int) -> Any:
    """The sync cacheable read."""
    return txcache.query_one(QUERY, (item_id,))


@txcache.cacheable
async def aget_item(item_id: int) -> Any:
    """The same read, async (its own function: its own key, cached once too)."""
    return await txcache.aio.query_one(QUERY, (item_id,))


def timed(call: Callable[[], object], count: int) -> list[float]:
    """``count`` timings of ``call``, in µs."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


async def atimed(call: Callable[[], Coroutine[Any, Any, object]], count: int) -> list[float]:
    """``count`` timings of ``await call()``, in µs."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def sync_hit(cache: txcache.Cache) -> None:
    with cache.read_only(staleness=60):
        get_item(1)


async def async_hit(cache: AsyncCache) -> None:
    async with cache.read_only(staleness=60):
        await aget_item(1)


async def measure(stack: Stack, rounds: int, per_round: int) -> dict[str, list[float]]:
    """Every kind's samples, rounds interleaved."""
    node = stack.node_addresses[0]
    host, port = node.rsplit(":", 1)
    key = b"bench:bare"
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with stack.connect() as cache, protocol.connect(node) as bare:
        acache = await txcache.connect_async(stack.dsn, nodes=[node], agent=stack.agent_address)
        abare = await AsyncRespConnection.open((host, int(port)))
        try:
            wait_until(lambda: cache.agent is not None and cache.agent.refresh(), "pins")
            for _ in range(3):  # cache both functions' row, warm both paths
                sync_hit(cache)
                await async_hit(acache)
            misses = get_item.stats.miss_count + aget_item.stats.miss_count
            for number in range(rounds):
                samples["sync TXGET"] += timed(lambda: bare.call("TXGET", key, 0, 1), per_round)
                samples["sync hit"] += timed(lambda: sync_hit(cache), per_round)
                samples["async TXGET"] += await atimed(
                    lambda: abare.call("TXGET", key, 0, 1), per_round
                )
                samples["async hit"] += await atimed(lambda: async_hit(acache), per_round)
                log(f"round {number + 1}/{rounds}")
            missed = get_item.stats.miss_count + aget_item.stats.miss_count - misses
            log(f"misses among the timed calls: {missed}")
        finally:
            abare.close()
            await acache.close()
    return samples


KINDS = ("sync TXGET", "sync hit", "async TXGET", "async hit")


def report(samples: dict[str, list[float]]) -> list[str]:
    """The quantiles of each kind and the p50 ratios."""
    p50 = {kind: percentile(values, 0.5) for kind, values in samples.items()}
    rows = [
        [kind, len(values), *(f"{percentile(values, q):.1f}" for q in (0.5, 0.9, 0.99))]
        for kind, values in samples.items()
    ]
    ratio = p50["async hit"] / p50["sync hit"]
    return [
        "Threads are not pinned to CPUs: a round trip to a node whose thread waits on another "
        "vCPU pays that vCPU's wake-up (library_hit_latency.md, *split*/*free*), in every "
        "column alike. The difference between a hit and a bare `TXGET` is the library's own "
        "cost.",
        "",
        *table(["", "samples", "p50 µs", "p90 µs", "p99 µs"], rows, "lrrrr"),
        "",
        f"- async hit / sync hit (p50): **{ratio:.2f}x** (goal: at most 1.5x)",
        f"- async hit over a bare async TXGET (p50): "
        f"{p50['async hit'] - p50['async TXGET']:.1f} µs; sync hit over a bare sync TXGET: "
        f"{p50['sync hit'] - p50['sync TXGET']:.1f} µs",
    ]


def main() -> None:
    """Parse the arguments, measure, write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 rounds of 200")
    parser.add_argument(
        "--storage", choices=("disk", "tmpfs"), default="disk", help="the cluster's storage"
    )
    args = parser.parse_args()
    rounds, per_round = (3, 200) if args.quick else (15, 2000)
    with postgres(args.storage) as server, bench_stack(server.dsn, schema_sql=SCHEMA) as stack:
        samples = asyncio.run(measure(stack, rounds, per_round))
        note = machine_note()
    name = result_name("async_hit_latency", args.quick, args.storage)
    path = write_report(
        name, "Async cache hit against the sync one", note, report(samples), {"samples": samples}
    )
    log(f"report: {path}")


if __name__ == "__main__":
    main()

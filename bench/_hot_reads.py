"""The hot-set read workload ``hangs.py``, ``failover.py`` and ``audit.py`` share: a table of
items, a ``@cacheable`` read of one item's name, the ids each reader thread walks, and the
reader threads that time every read until stopped (:class:`Readers`).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Iterator
from typing import NamedTuple, Self

import psycopg

import txcache

HOT = 200
"""The ids the readers of :class:`Readers` walk: 1 to ``HOT``."""


def items_schema(rows: int = 1000) -> tuple[str, ...]:
    """The statements that create ``items`` (id, name) with ids 1 to ``rows``."""
    return (
        "CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL)",
        f"INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, {rows}) i",
    )


@txcache.cacheable
def item_name(item_id: int) -> str:
    """The read every transaction of the workload makes (a hit once warm)."""
    row = txcache.query_one("SELECT name FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return str(row[0])


def hot_items(thread: int, hot: int = HOT) -> Iterator[int]:
    """The ids reader ``thread`` reads, endlessly: every id from 1 to ``hot`` in turn,
    seven apart, starting at ``thread`` (a stride coprime with ``hot`` visits them all;
    threads start apart so that they do not miss the same key at once). After its first
    round every read is a hit while nothing is invalidated."""
    stride = _coprime_stride(hot)
    item = thread % hot
    while True:
        item = (item + stride) % hot
        yield item + 1


def _coprime_stride(hot: int) -> int:
    """7, or the next number sharing no factor with ``hot``."""
    stride = 7
    while math.gcd(stride, hot) != 1:
        stride += 1
    return stride


class Read(NamedTuple):
    """One read of :class:`Readers`: which thread made it, when it began (``time.monotonic``),
    how long it took, and whether it hit the cache."""

    thread: int
    start: float
    seconds: float
    hit: bool


class Readers:
    """``threads`` threads reading :func:`item_name` over the hot set through ``cache``, one
    read-only transaction (``staleness``) per read, from the ``with`` block's start to its
    end; each read is recorded (:class:`Read`).

    With ``direct``, each transaction also runs one query on the database itself (the item's
    row, read directly: never cached), so that every transaction reaches the server of its
    pin. With ``write_every``, one more thread renames a random hot item every that many
    seconds through ``cache`` (invalidations keep flowing); a write that fails (the
    database away) is skipped, and the next tries again.

    A read failing with one of ``retry_on`` is counted in :attr:`failures` (its start) and the
    thread tries again shortly: for a part the benchmark takes away on purpose. Any other
    error is kept in :attr:`errors` and ends its thread. Subclasses may add threads of their
    own to ``_threads`` before the ``with`` block; they stop on ``_stop``."""

    def __init__(
        self,
        cache: txcache.Cache,
        threads: int,
        staleness: float,
        retry_on: tuple[type[BaseException], ...] = (),
        *,
        direct: bool = False,
        write_every: float | None = None,
    ) -> None:
        """Readers of ``cache``, not started yet."""
        self.cache = cache
        self.staleness = staleness
        self.retry_on = retry_on
        self.direct = direct
        self.reads: list[Read] = []
        self.failures: list[float] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read, args=(i,)) for i in range(threads)]
        if write_every is not None:
            self._threads.append(threading.Thread(target=self._write, args=(write_every,)))

    def __enter__(self) -> Self:
        """Start every thread."""
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop every thread and wait for it (its read in flight ends first)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _read(self, thread: int) -> None:
        items = hot_items(thread)
        while not self._stop.is_set():
            item = next(items)
            started = time.monotonic()
            try:
                with self.cache.read_only(staleness=self.staleness) as transaction:
                    item_name(item)
                    if self.direct:
                        txcache.query_one("SELECT name FROM items WHERE id = %s", (item,))
            except self.retry_on:
                with self._lock:
                    self.failures.append(started)
                self._stop.wait(0.05)  # the part is away: try again shortly
                continue
            except BaseException as error:
                self.errors.append(error)
                raise  # the thread's traceback too: a benchmark may not check `errors`
            took = time.monotonic() - started
            with self._lock:
                self.reads.append(Read(thread, started, took, transaction.hits > 0))

    def _write(self, every: float) -> None:
        chosen = random.Random(1)
        while not self._stop.wait(every):
            try:
                with self.cache.read_write() as transaction:
                    item = chosen.randrange(1, HOT + 1)
                    transaction.execute(
                        "UPDATE items SET name = %s WHERE id = %s", (f"item {item} v", item)
                    )
            except (psycopg.Error, txcache.TxcacheError):
                pass  # the database is away: the next write tries again

    def between(self, began: float, ended: float) -> list[Read]:
        """The reads that began from ``began`` to before ``ended``."""
        with self._lock:
            return [read for read in self.reads if began <= read.start < ended]

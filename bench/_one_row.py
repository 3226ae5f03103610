"""The one-row read both ``miss_cost.py`` and ``break_even.py`` measure: a table of rows
read by primary key, the stack on a server with ``pg_stat_statements``, the transaction of
each mode, and the database's run time.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from _common import (
    STORAGE_HELP,
    bench_stack,
    create_database,
    database_note,
    execute,
    postgres,
)
from _cpu import postmaster_pid
from _report import machine_note
from psycopg.conninfo import make_conninfo

import txcache
from txcache.stack import Stack

QUERY = "SELECT id, name, price FROM rows WHERE id = %s"
SCHEMA = (
    "CREATE TABLE rows (id integer PRIMARY KEY, name text NOT NULL, price integer NOT NULL)",
    "INSERT INTO rows SELECT i, 'row ' || i, i % 1000 FROM generate_series(1, {rows}) i",
    "VACUUM ANALYZE rows",
    "CREATE EXTENSION pg_stat_statements",
    # Every page in shared buffers: a miss reads a row never read before, and would
    # otherwise pay for bringing its page in — and warm it for the plain read after it.
    "CREATE EXTENSION pg_prewarm",
    "SELECT pg_prewarm('rows'), pg_prewarm('rows_pkey')",
)
SERVER = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_planning": "on",
}
HOT = 100
"""The ids the *hit* mode cycles through (cached before the rounds)."""


@txcache.cacheable
def get_row(row_id: int) -> tuple[Any, ...] | None:
    """One row of ``rows``, as a tuple."""
    return txcache.query_one(QUERY, (row_id,))


def database_run_seconds(server: Any) -> float:
    """Run time so far of the postmaster and every process under it, from ``schedstat``
    (nanoseconds, where ``stat``'s CPU times count 10 ms ticks)."""
    postmaster = postmaster_pid(server)
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if postmaster in (int(entry.name), parent):
                total += int((entry / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # exited meanwhile
            continue
    return total / 1e9


@dataclass
class Bench:
    """The server, the stack on it, a connected cache and a plain connection; with a
    standby (``--standby``), the standby and a cache that runs its misses there."""

    server: Any
    stack: Stack
    cache: txcache.Cache
    plain: psycopg.Connection[Any]
    note: dict[str, Any]
    background: float = 0.0
    """Database run time per second with the stack idle."""
    fresh_ids: Iterator[int] = field(default_factory=lambda: itertools.count(HOT + 1))
    standby: Any = None
    """The streaming standby (``--standby``), else ``None``."""
    replica_cache: txcache.Cache | None = None
    """A cache connected with ``replicas`` naming the standby."""
    standby_background: float = 0.0
    """The standby's run time per second with the stack idle."""
    on_standby: list[bool] = field(default_factory=list)
    """Per transaction of :func:`standby_transaction`, whether it ran on the standby (one
    whose pin's snapshot went meanwhile runs at the primary's pin of its commit point)."""


@dataclass
class Series:
    """One mode's samples over every round."""

    latencies: list[float] = field(default_factory=list)
    database_seconds: float = 0.0
    standby_seconds: float = 0.0
    """The standby's run time beyond its idle background (``--standby``)."""
    transactions: int = 0

    def cpu_per_transaction(self) -> float:
        """Database (the primary's) seconds per transaction."""
        return self.database_seconds / max(1, self.transactions)

    def standby_cpu_per_transaction(self) -> float:
        """The standby's seconds per transaction."""
        return self.standby_seconds / max(1, self.transactions)


def plain_transaction(bench: Bench, row_id: int) -> None:
    """The read the application would make without txcache."""
    with bench.plain.transaction():
        bench.plain.execute(QUERY, (row_id,)).fetchone()


def bare_transaction(bench: Bench, row_id: int) -> None:
    """The same query in a txcache read-only transaction, not cached."""
    with bench.cache.read_only():
        txcache.query_one(QUERY, (row_id,))


def cached_transaction(bench: Bench, row_id: int) -> None:
    """The same row through the cacheable function."""
    with bench.cache.read_only():
        get_row(row_id)


def idle_background(bench: Bench, seconds: float) -> float:
    """The database's run time per second while nothing but the stack itself runs (the
    standby's too, into :attr:`Bench.standby_background`)."""
    standby = database_run_seconds(bench.standby) if bench.standby is not None else 0.0
    before, t0 = database_run_seconds(bench.server), time.perf_counter()
    time.sleep(seconds)  # a measurement of idleness, not a wait for an event
    elapsed = time.perf_counter() - t0
    if bench.standby is not None:
        bench.standby_background = (database_run_seconds(bench.standby) - standby) / elapsed
    return (database_run_seconds(bench.server) - before) / elapsed


def standby_transaction(bench: Bench, row_id: int) -> None:
    """The cacheable function in a transaction of the cache with ``replicas``: a miss runs
    on the standby (counted in :attr:`Bench.on_standby`, which the report gives)."""
    assert bench.replica_cache is not None
    with bench.replica_cache.read_only() as tx:
        get_row(row_id)
    bench.on_standby.append(tx.snapshot is not None and tx.snapshot.server == STANDBY)


STANDBY = "standby"
"""The standby's name, for the agent's ``--standby`` and the library's ``replicas``."""


@contextmanager
def one_row_bench(args: argparse.Namespace) -> Iterator[Bench]:
    """PostgreSQL with ``rows`` and pg_stat_statements, one node, the agent, a cache; with
    ``args.standby``, beside a streaming standby the agent pins too, and a second cache
    that runs its misses there."""
    standby = getattr(args, "standby", False)
    with postgres(args.storage, SERVER, standbys=int(standby)) as servers, ExitStack() as exits:
        server = servers.primary if standby else servers
        dsn = create_database(server, "bench")
        execute(dsn, *(statement.format(rows=args.rows) for statement in SCHEMA))
        standby_dsn = make_conninfo(servers.standby.dsn, dbname="bench") if standby else ""
        flags = ("--standby", f"{STANDBY}={standby_dsn}") if standby else ()
        stack = exits.enter_context(bench_stack(dsn, max_memory="256mb", agent_args=flags))
        note = machine_note(database_note(dsn, args.storage))
        stack.caught_up()
        cache = stack.connect()
        exits.callback(cache.close)
        replica_cache = None
        if standby:
            replica_cache = stack.connect(replicas={STANDBY: standby_dsn})
            exits.callback(replica_cache.close)
        plain = exits.enter_context(psycopg.connect(dsn))
        standby_server = servers.standby if standby else None
        yield Bench(
            server, stack, cache, plain, note, standby=standby_server, replica_cache=replica_cache
        )


def one_row_parser(description: str) -> argparse.ArgumentParser:
    """A parser with the options every one-row benchmark takes: ``--quick``, ``--rows``,
    ``--idle`` and ``--storage``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the table")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds to measure idleness")
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="tmpfs", help=STORAGE_HELP)
    return parser

"""What ``library_hit_latency.py`` times through the library's public API: the stack it
measures, the CPU placements, the series of samples, and each series' round — hits in
read-only transactions, empty and one-hit transactions, bare round trips to the node, the
same row from PostgreSQL, a cProfile of the hit loop, and hits while the database commits.

The step-by-step replay of the hit path is in :mod:`_hit_layers`; the report in
:mod:`_hit_report`.
"""

from __future__ import annotations

import cProfile
import hashlib
import io
import os
import pstats
import shlex
import shutil
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis
from _common import Pgbench
from _cpu import ForeignCpu, set_affinity
from _report import git, log, summarize

import txcache
from txcache.protocol import RespConnection, parse_address
from txcache.stack import Stack

STALENESS = 30.0
GOAL_P50_US = 50.0
ITEM_QUERY = "SELECT id, name, price FROM items WHERE id = %s"
LIBRARY_DIR = Path(txcache.__file__).resolve().parent

perf_ns = time.perf_counter_ns


@txcache.cacheable
def get_item(item_id: int) -> tuple[Any, ...] | None:
    """One row of ``items``, as a tuple."""
    return txcache.query_one(ITEM_QUERY, (item_id,))


# -- the stack and where it runs -------------------------------------------------------------


@dataclass
class HitBench:
    """What the measurements use: the server, the stack on it and a connected cache."""

    server: Any
    stack: Stack
    cache: txcache.Cache
    note: dict[str, Any]
    cpus: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    """The CPUs this script may use (the placements pin to the first two)."""
    server_cpus: set[int] = field(default_factory=set)
    """Where the nodes run now; database backends opened for a series are put there too."""

    @property
    def dsn(self) -> str:
        """The benchmark database."""
        return self.stack.dsn


PLACEMENTS = {
    "same": "this process, both nodes and the psycopg backend pinned to one CPU",
    "split": "this process pinned to one CPU, both nodes and the psycopg backend to another",
    "free": "nothing pinned: the kernel places every thread (what an application gets)",
}


def place(bench: HitBench, placement: str) -> None:
    """Pin this process (every thread: the agent refresher too) and the nodes' threads."""
    everywhere = set(bench.cpus)
    if placement == "free":
        mine = theirs = everywhere
    elif placement == "same":
        mine = theirs = {bench.cpus[0]}
    else:
        mine, theirs = {bench.cpus[0]}, {bench.cpus[1]}
    set_affinity(os.getpid(), mine)
    for node in bench.stack.nodes:
        set_affinity(node.process.pid, theirs)
    bench.server_cpus = theirs


def idle_note() -> str:
    """How this machine's CPUs idle: a guest whose idle vCPU halts at once (no halt
    polling) pays a hypervisor wake-up on every cross-CPU round trip."""
    cpuidle = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    driver = cpuidle.read_text().strip() if cpuidle.exists() else "unknown"
    polling = [word for word in Path("/proc/cmdline").read_text().split() if "halt_poll" in word]
    return f"cpuidle driver {driver}" + (f", kernel {' '.join(polling)}" if polling else "")


def library_note() -> str:
    """Which library code ran: the commit, whether python/txcache had uncommitted changes,
    and a digest of the sources as imported (other engineers edit them meanwhile)."""
    digest = hashlib.sha256()
    for path in sorted(LIBRARY_DIR.rglob("*.py")):
        digest.update(path.relative_to(LIBRARY_DIR).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", str(LIBRARY_DIR))
    state = " with uncommitted changes" if dirty else ""
    return f"python/txcache at commit {commit}{state} (sources sha256 {digest.hexdigest()[:12]})"


# -- series ----------------------------------------------------------------------------------


@dataclass
class Series:
    """Samples of one measured thing, in nanoseconds."""

    label: str
    samples: list[int] = field(default_factory=list)

    def summary_us(self) -> dict[str, float]:
        """Count, mean and percentiles in microseconds."""
        return summarize([ns / 1000 for ns in self.samples])


@dataclass
class Results:
    """Everything measured, per CPU placement (:data:`PLACEMENTS`)."""

    placement: str = "free"
    """Where the series being measured now go."""
    series: dict[str, dict[str, Series]] = field(default_factory=dict)
    """placement → series name → samples."""
    tight: dict[str, dict[str, float]] = field(default_factory=dict)
    """placement → step → mean ns per call in a tight loop."""
    foreign_cpu: dict[str, list[float]] = field(default_factory=dict)
    """placement → CPU seconds of other work on the machine, per round."""
    pins_at_begin: dict[str, list[int]] = field(default_factory=dict)
    """placement → pins in the set of each hit-loop transaction at its start."""
    commits: dict[str, Any] = field(default_factory=dict)
    """The commit phase: pgbench's command, pins listed."""
    warm_ms: list[float] = field(default_factory=list)
    warm_stats: dict[str, Any] = field(default_factory=dict)
    hit_stats: dict[str, Any] = field(default_factory=dict)
    profile: str = ""
    value_bytes: int = 0
    pin_scaling: dict[int, dict[str, float]] = field(default_factory=dict)
    """live pins → ns of a transaction's begin and of its first hit's pin-set work."""

    def add(self, name: str, label: str, samples: list[int]) -> None:
        """Append ``samples`` to series ``name`` of the current placement."""
        here = self.series.setdefault(self.placement, {})
        here.setdefault(name, Series(label)).samples.extend(samples)

    def summary(self, placement: str, name: str) -> dict[str, float]:
        """The summary (µs) of one series."""
        return self.series[placement][name].summary_us()


def item_ids(count: int, items: int, start: int) -> list[int]:
    """``count`` ids cycling through 1..``items`` from ``start``."""
    return [(start + n) % items + 1 for n in range(count)]


def check_row(row: tuple[Any, ...] | None, item_id: int) -> None:
    """The row ``get_item(item_id)`` must return."""
    assert row is not None, item_id
    assert row[0] == item_id, row


# -- through the public API ------------------------------------------------------------------


def warm(bench: HitBench, items: int, results: Results) -> None:
    """One read-only transaction calls get_item for every id (all misses: stored)."""
    before = get_item.stats.as_dict()
    with bench.cache.read_only(staleness=STALENESS):
        for item_id in range(1, items + 1):
            t0 = perf_ns()
            row = get_item(item_id)
            results.warm_ms.append((perf_ns() - t0) / 1e6)
            check_row(row, item_id)
    after = get_item.stats.as_dict()
    results.warm_stats = {"before": before, "after": after}
    inserts: Any = after["inserts"]
    assert after["hits"] == 0, after
    assert sum(inserts.values()) == items, after
    assert inserts.get("inserted", 0) == items, f"not all stored: {after}"


def hit_round(
    bench: HitBench, per: int, items: int, results: Results, transactions: int, offset: int
) -> None:
    """``transactions`` read-only transactions of ``per`` timed calls each."""
    hits, misses = get_item.stats.hits, get_item.stats.miss_count
    samples: list[int] = []
    firsts: list[int] = []
    for t in range(transactions):
        ids = item_ids(per, items, offset + t * per)
        with bench.cache.read_only(staleness=STALENESS) as tx:
            results.pins_at_begin.setdefault(results.placement, []).append(len(tx.pin_set))
            for n, item_id in enumerate(ids):
                t0 = perf_ns()
                row = get_item(item_id)
                elapsed = perf_ns() - t0
                samples.append(elapsed)
                if n == 0:
                    firsts.append(elapsed)
                check_row(row, item_id)
            assert tx.snapshot is None, "a hit loop touched the database"
    assert get_item.stats.hits == hits + transactions * per, get_item.stats
    assert get_item.stats.miss_count == misses, f"misses during the hit loop: {get_item.stats}"
    results.add("hit", "**library hit** (every call)", samples)
    later = [s for n, s in enumerate(samples) if n % per]
    results.add("hit_later", "library hit, calls 2..N of a transaction", later)
    results.add("hit_first_in_loop", "library hit, call 1 of a transaction (hit loop)", firsts)


def transaction_round(bench: HitBench, items: int, results: Results, count: int) -> None:
    """Empty read-only transactions, and transactions of one hit with its parts timed."""
    cache = bench.cache
    empty: list[int] = []
    for _ in range(count):
        t0 = perf_ns()
        with cache.read_only(staleness=STALENESS):
            pass
        empty.append(perf_ns() - t0)
    begin, first, end, whole = [], [], [], []
    hits = get_item.stats.hits
    for item_id in item_ids(count, items, 7 * count):
        t0 = perf_ns()
        with cache.read_only(staleness=STALENESS):
            t1 = perf_ns()
            row = get_item(item_id)
            t2 = perf_ns()
        t3 = perf_ns()
        check_row(row, item_id)
        begin.append(t1 - t0)
        first.append(t2 - t1)
        end.append(t3 - t2)
        whole.append(t3 - t0)
    assert get_item.stats.hits == hits + count, "a fresh-transaction call was not a hit"
    results.add("empty_tx", "empty read-only transaction (begin + end)", empty)
    results.add("fresh_begin", "fresh transaction: begin (`with` entered)", begin)
    results.add("fresh_hit", "**fresh transaction: first call (hit)**", first)
    results.add("fresh_end", "fresh transaction: end (`with` left)", end)
    results.add("fresh_whole", "fresh transaction: begin + one hit + end", whole)


# -- bare round trips and the database -------------------------------------------------------


@dataclass
class Probe:
    """One key, the node that owns it, the TXGET bounds a transaction uses, the bytes."""

    key: bytes
    node: Any
    """The cache's :class:`CacheNode` of the key (``cache.ring.node_for``)."""
    lo: int
    hi: int
    value: bytes
    address: tuple[str, int]


def probe_key(bench: HitBench) -> Probe:
    """get_item(1)'s key, its node and the bounds of a fresh transaction's pin set."""
    cache = bench.cache
    assert cache.ring is not None
    with cache.read_only(staleness=STALENESS) as tx:
        key = get_item.key(1)
        bounds = tx.pin_set.bounds()
    assert bounds is not None, "no pin: is the agent running?"
    node = cache.ring.node_for(key)
    found = node.lookup(key, bounds[0], bounds[1], with_tags=False)
    assert hasattr(found, "value"), f"get_item(1) is not cached: {found}"
    return Probe(key, node, bounds[0], bounds[1], found.value, parse_address(node.address))


def round_trip_round(probe: Probe, results: Results, count: int) -> None:
    """redis-py GET and TXGET, and the library's lean connection's TXGET, to one node: the
    client libraries side by side (redis-py on purpose, as the usual Python client)."""
    client = redis.Redis(*probe.address, protocol=2)
    plain = b"bench:plain-copy-of-item-1"
    client.set(plain, probe.value)
    assert client.get(plain) == probe.value
    txget = ("TXGET", probe.key, probe.lo, probe.hi)
    get_samples, txget_samples, lean_samples = [], [], []
    with closing(RespConnection(probe.address)) as lean:
        reply = lean.call(*txget)
        assert isinstance(reply, list), reply
        assert reply[0] == probe.value, reply
        for _ in range(count):
            t0 = perf_ns()
            client.get(plain)
            t1 = perf_ns()
            client.execute_command(*txget)
            t2 = perf_ns()
            lean.call(*txget)
            t3 = perf_ns()
            get_samples.append(t1 - t0)
            txget_samples.append(t2 - t1)
            lean_samples.append(t3 - t2)
    client.close()
    results.add("redis_get", "redis-py `GET` (plain key, same bytes, same node)", get_samples)
    results.add("redis_txget", "redis-py `TXGET` (same key and bounds)", txget_samples)
    label = "`TXGET` on the library's `RespConnection` (hiredis, no pool)"
    results.add("lean_txget", label, lean_samples)


def database_round(bench: HitBench, per: int, items: int, results: Results, count: int) -> None:
    """The same rows by primary key with psycopg: autocommit, and ``per`` per read-only
    transaction (BEGIN/COMMIT not timed)."""
    autocommit, in_tx = [], []
    with psycopg.connect(bench.dsn, autocommit=True) as db:
        set_affinity(db.info.backend_pid, bench.server_cpus)
        for item_id in item_ids(count, items, 3 * count):
            t0 = perf_ns()
            row = db.execute(ITEM_QUERY, (item_id,)).fetchone()
            autocommit.append(perf_ns() - t0)
            check_row(row, item_id)
        ids = item_ids(count, items, 5 * count)
        for start in range(0, count, per):
            db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            for item_id in ids[start : start + per]:
                t0 = perf_ns()
                row = db.execute(ITEM_QUERY, (item_id,)).fetchone()
                in_tx.append(perf_ns() - t0)
                check_row(row, item_id)
            db.execute("COMMIT")
    results.add("db_autocommit", "psycopg `SELECT … WHERE id = %s`, autocommit", autocommit)
    results.add("db_in_tx", "psycopg, same query, inside a read-only transaction", in_tx)


def profile_hits(bench: HitBench, per: int, items: int, results: Results) -> None:
    """cProfile of 50 transactions x ``per`` hits (the profiler's own overhead inflates
    every Python call: read the shares, not the absolute times)."""
    ids = item_ids(50 * per, items, 11)
    profiler = cProfile.Profile()
    profiler.enable()
    for t in range(50):
        with bench.cache.read_only(staleness=STALENESS):
            for item_id in ids[t * per : (t + 1) * per]:
                get_item(item_id)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(22)
    text = out.getvalue()
    results.profile = text[text.find("   ncalls") :].rstrip()


COMMIT_SCRIPT = "UPDATE ticks SET n = n + 1 WHERE id = 1;\n"


def commit_phase(bench: HitBench, args: Any, results: Results) -> None:
    """Hits and transactions while pgbench commits ``--commit-rate`` one-row UPDATEs per
    second to another table (cached items stay valid): the agent takes a pin every 50 ms,
    so after ``--commit-warmup`` seconds a transaction starts with ~20 pins per second of
    its staleness limit."""
    script = Path(tempfile.mkdtemp(prefix="txcache-bench-")) / "tick.sql"
    script.write_text(COMMIT_SCRIPT)
    seconds = int(args.commit_warmup) + 60
    command = ["-n", "-f", str(script), "-c", "1", "-R", str(args.commit_rate)]
    load = Pgbench(bench.server, bench.dsn, [*command, "-T", str(seconds)])
    where = "same" if len(bench.cpus) >= 2 else "free"
    try:
        log(f"commit phase: pgbench {args.commit_rate} commits/s; waiting {args.commit_warmup} s")
        time.sleep(args.commit_warmup)
        with bench.cache.read_only(staleness=3600.0) as tx:  # every pin the library lists
            listed = len(tx.pin_set)
        log(f"  the library lists {listed} pins; measuring")
        results.placement = "commits"
        place(bench, where)
        per_round = args.calls // args.rounds // 2  # half as many as each placement
        foreign = ForeignCpu()
        for r in range(args.rounds):
            transactions = max(1, per_round // args.per_transaction)
            hit_round(bench, args.per_transaction, args.items, results, transactions, r * 1000)
            transaction_round(bench, args.items, results, args.transactions // args.rounds // 2)
        results.foreign_cpu["commits"] = [foreign.seconds()]
        place(bench, "free")
        s = results.summary("commits", "hit")
        log(f"  commits: hit p50 {s['p50']:.1f} µs, p99 {s['p99']:.1f} µs")
    finally:
        load.stop()
        shutil.rmtree(script.parent, ignore_errors=True)
    shown = shlex.join(["pgbench", *command, "-T", str(seconds)]).replace(str(script), script.name)
    results.commits = {
        "command": shown,
        "script": COMMIT_SCRIPT.strip(),
        "pins_listed": listed,
        "placement": where,
    }

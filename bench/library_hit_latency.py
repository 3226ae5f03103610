"""Cacheable-call hit latency in the Python library, over loopback (issue 4).

The stack is the library tests' (tests/library_fixtures.py): PostgreSQL set up for txcache,
two ``txcached`` nodes, ``txcache-agent --pin-interval 50ms`` and ``txcache.connect(...)``.
A table ``items(id, name, price)`` holds 1,000 rows; ``get_item(item_id)`` is a cacheable
function returning one row (a tuple) through ``txcache.query_one``. One read-only
transaction (``staleness=30``) warms the cache with ids 1..1000, then:

- **hit**: inside ``with cache.read_only(staleness=30):`` blocks of 100 calls each, every
  ``get_item(i)`` call is timed with ``perf_counter_ns`` (20,000 calls; the script asserts
  that they were all hits and that no miss happened);
- **transactions**: beginning + ending an empty read-only transaction, and the first call
  of a fresh transaction (begin, first hit and end timed apart);
- **bare round trips** to the same node: redis-py ``GET`` of a plain key holding the same
  bytes, redis-py ``TXGET``, and ``TXGET`` on the library's own lean connection
  (``txcache._resp.RespConnection``, no :class:`Endpoint` bookkeeping);
- **the database**: the same row by primary key with psycopg over TCP, autocommit and
  inside a read-only transaction (100 queries each);
- **where a hit's time goes**: the hit path replayed step by step with the library's own
  internal functions (key, ring lookup, pin-set bounds, the ``TXGET`` round trip,
  deserialization, pin-set narrowing, counters), each step timed; the same steps in tight
  loops (mean per call, no timer in the way); and a cProfile of the hit loop.

Every series is measured in ``--rounds`` interleaved rounds so that a burst of other work
on the machine hits them all alike. The issue's goal: hit p50 <= 50 µs (the paper's lookup
took 0.7 ms over its network).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import hashlib
import io
import math
import os
import pstats
import shlex
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hiredis
import psycopg
from _common import (
    STORAGE_HELP,
    ForeignCpu,
    Pgbench,
    _git,
    call,
    create_database,
    execute,
    fmt,
    log,
    machine_note,
    postgres,
    resp_client,
    result_name,
    summarize,
    wait_caught_up,
    write_report,
)

import txcache
from txcache._nodes import Hit
from txcache._pinset import Pin, PinSet
from txcache._resp import RespConnection
from txcache._stats import FunctionStats

STALENESS = 30.0
GOAL_P50_US = 50.0
ITEM_QUERY = "SELECT id, name, price FROM items WHERE id = %s"
LIBRARY_DIR = Path(txcache.__file__).resolve().parent

perf_ns = time.perf_counter_ns


@txcache.cacheable
def get_item(item_id: int) -> tuple[Any, ...] | None:
    """One row of ``items``, as a tuple."""
    return txcache.query_one(ITEM_QUERY, (item_id,))


# -- the stack -------------------------------------------------------------------------------


@dataclass
class Stack:
    """What the measurements use."""

    server: Any
    dsn: str
    cache: txcache.Cache
    nodes: list[txcache.NodeProcess]
    note: dict[str, Any]
    cpus: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    """The CPUs this script may use (the placements pin to the first two)."""
    server_cpus: set[int] = field(default_factory=set)
    """Where the nodes run now; database backends opened for a series are put there too."""


@contextmanager
def library_stack(args: argparse.Namespace) -> Iterator[Stack]:
    """PostgreSQL with ``items``, two nodes, the agent and a connected cache, as
    tests/library_fixtures.py starts them."""
    with postgres(args.storage) as server:
        dsn = create_database(server, "bench")
        execute(
            dsn,
            "CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, "
            "price integer NOT NULL)",
            "CREATE TABLE ticks (id integer PRIMARY KEY, n bigint NOT NULL)",
            "INSERT INTO ticks VALUES (1, 0)",
            f"INSERT INTO items SELECT i, 'item ' || i, 10 * i "
            f"FROM generate_series(1, {args.items}) i",
            "VACUUM ANALYZE items",
        )
        txcache.setup_database(dsn)
        note = machine_note(dsn, args.storage)
        with (
            txcache.NodeProcess("--max-memory", "64mb") as first,
            txcache.NodeProcess("--max-memory", "64mb") as second,
            txcache.AgentProcess(
                dsn,
                [first.address, second.address],
                "--pin-interval",
                "50ms",
                "--heartbeat-interval",
                "50ms",
            ) as agent,
        ):
            nodes = [first, second]
            for node in nodes:
                client = resp_client(node.host, node.port)
                wait_caught_up(client, dsn)
                client.close()
            cache = txcache.connect(
                dsn,
                nodes=[node.address for node in nodes],
                agent=f"{agent.host}:{agent.port}",
                refresh_interval=args.refresh_interval,
            )
            try:
                yield Stack(server, dsn, cache, nodes, note)
            finally:
                cache.close()


PLACEMENTS = {
    "same": "this process, both nodes and the psycopg backend pinned to one CPU",
    "split": "this process pinned to one CPU, both nodes and the psycopg backend to another",
    "free": "nothing pinned: the kernel places every thread (what an application gets)",
}


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Pin every thread of process ``pid`` to ``cpus``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(ProcessLookupError, FileNotFoundError):  # a thread that ended
            os.sched_setaffinity(int(task.name), cpus)


def place(stack: Stack, placement: str) -> None:
    """Pin this process (every thread: the agent refresher too) and the nodes' threads."""
    everywhere = set(stack.cpus)
    if placement == "free":
        mine = theirs = everywhere
    elif placement == "same":
        mine = theirs = {stack.cpus[0]}
    else:
        mine, theirs = {stack.cpus[0]}, {stack.cpus[1]}
    set_affinity(os.getpid(), mine)
    for node in stack.nodes:
        set_affinity(node.process.pid, theirs)
    stack.server_cpus = theirs


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
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", str(LIBRARY_DIR))
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
    """The commit phase: pgbench's result, pins listed."""
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


def warm(stack: Stack, args: argparse.Namespace, results: Results) -> None:
    """One read-only transaction calls get_item for every id (all misses: stored)."""
    before = get_item.stats.as_dict()
    with stack.cache.read_only(staleness=STALENESS):
        for item_id in range(1, args.items + 1):
            t0 = perf_ns()
            row = get_item(item_id)
            results.warm_ms.append((perf_ns() - t0) / 1e6)
            assert row is not None, item_id
            assert row[0] == item_id, row
    after = get_item.stats.as_dict()
    results.warm_stats = {"before": before, "after": after}
    assert after["hits"] == 0, after
    assert sum(after["inserts"].values()) == args.items, after
    assert after["inserts"].get("inserted", 0) == args.items, f"not all stored: {after}"


def hit_round(
    stack: Stack, args: argparse.Namespace, results: Results, transactions: int, offset: int
) -> None:
    """``transactions`` read-only transactions of ``--per-transaction`` timed calls each."""
    cache, per = stack.cache, args.per_transaction
    hits, misses = get_item.stats.hits, get_item.stats.miss_count
    samples: list[int] = []
    firsts: list[int] = []
    for t in range(transactions):
        ids = item_ids(per, args.items, offset + t * per)
        with cache.read_only(staleness=STALENESS) as tx:
            results.pins_at_begin.setdefault(results.placement, []).append(len(tx.pin_set))
            for n, item_id in enumerate(ids):
                t0 = perf_ns()
                row = get_item(item_id)
                elapsed = perf_ns() - t0
                samples.append(elapsed)
                if n == 0:
                    firsts.append(elapsed)
                assert row is not None, item_id
                assert row[0] == item_id, row
            assert tx.snapshot is None, "a hit loop touched the database"
    assert get_item.stats.hits == hits + transactions * per, get_item.stats
    assert get_item.stats.miss_count == misses, f"misses during the hit loop: {get_item.stats}"
    results.add("hit", "**library hit** (every call)", samples)
    results.add(
        "hit_later",
        "library hit, calls 2..N of a transaction",
        [s for n, s in enumerate(samples) if n % per],
    )
    results.add("hit_first_in_loop", "library hit, call 1 of a transaction (hit loop)", firsts)


def transaction_round(stack: Stack, args: argparse.Namespace, results: Results, count: int) -> None:
    """Empty read-only transactions, and transactions of one hit with its parts timed."""
    cache = stack.cache
    empty: list[int] = []
    for _ in range(count):
        t0 = perf_ns()
        with cache.read_only(staleness=STALENESS):
            pass
        empty.append(perf_ns() - t0)
    begin, first, end, whole = [], [], [], []
    hits = get_item.stats.hits
    for item_id in item_ids(count, args.items, 7 * count):
        t0 = perf_ns()
        with cache.read_only(staleness=STALENESS):
            t1 = perf_ns()
            row = get_item(item_id)
            t2 = perf_ns()
        t3 = perf_ns()
        assert row is not None, item_id
        assert row[0] == item_id, row
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
    lo: int
    hi: int
    value: bytes
    address: tuple[str, int]


def probe_key(stack: Stack) -> Probe:
    """get_item(1)'s key, its node and the bounds of a fresh transaction's pin set."""
    cache = stack.cache
    assert cache.ring is not None
    key = get_item.key(1)
    node = cache.ring.node_for(key)
    with cache.read_only(staleness=STALENESS) as tx:
        bounds = tx._lookup_bounds()
        assert bounds is not None
        found = node.lookup(key, bounds[0], bounds[1], with_tags=False)
    assert isinstance(found, Hit), found
    host, port = node.address.rsplit(":", 1)
    return Probe(key, node, bounds[0], bounds[1], found.value, (host, int(port)))


def round_trip_round(
    stack: Stack, probe: Probe, args: argparse.Namespace, results: Results, count: int
) -> None:
    """redis-py GET and TXGET, and the library's lean connection's TXGET, to one node."""
    client = resp_client(*probe.address)
    plain = b"bench:plain-copy-of-item-1"
    call(client, "SET", plain, probe.value)
    assert client.get(plain) == probe.value
    lean = RespConnection(probe.address)
    txget = ("TXGET", probe.key, probe.lo, probe.hi)
    reply = lean.call(*txget)
    assert isinstance(reply, list), reply
    assert reply[0] == probe.value, reply
    get_samples, txget_samples, lean_samples = [], [], []
    for _ in range(count):
        t0 = perf_ns()
        client.get(plain)
        t1 = perf_ns()
        client.execute_command(*txget)  # type: ignore[no-untyped-call]
        t2 = perf_ns()
        lean.call(*txget)
        t3 = perf_ns()
        get_samples.append(t1 - t0)
        txget_samples.append(t2 - t1)
        lean_samples.append(t3 - t2)
    client.close()
    lean.close()
    results.add("redis_get", "redis-py `GET` (plain key, same bytes, same node)", get_samples)
    results.add("redis_txget", "redis-py `TXGET` (same key and bounds)", txget_samples)
    results.add(
        "lean_txget", "`TXGET` on the library's `RespConnection` (hiredis, no pool)", lean_samples
    )


def database_round(stack: Stack, args: argparse.Namespace, results: Results, count: int) -> None:
    """The same rows by primary key with psycopg: autocommit, and 100 per read-only
    transaction (BEGIN/COMMIT not timed)."""
    autocommit, in_tx = [], []
    with psycopg.connect(stack.dsn, autocommit=True) as db:
        set_affinity(db.info.backend_pid, stack.server_cpus)
        for item_id in item_ids(count, args.items, 3 * count):
            t0 = perf_ns()
            row = db.execute(ITEM_QUERY, (item_id,)).fetchone()
            autocommit.append(perf_ns() - t0)
            assert row is not None, item_id
            assert row[0] == item_id, row
        ids = item_ids(count, args.items, 5 * count)
        for start in range(0, count, args.per_transaction):
            db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            for item_id in ids[start : start + args.per_transaction]:
                t0 = perf_ns()
                row = db.execute(ITEM_QUERY, (item_id,)).fetchone()
                in_tx.append(perf_ns() - t0)
                assert row is not None, item_id
                assert row[0] == item_id, row
            db.execute("COMMIT")
    results.add("db_autocommit", "psycopg `SELECT … WHERE id = %s`, autocommit", autocommit)
    results.add("db_in_tx", "psycopg, same query, inside a read-only transaction", in_tx)


# -- where a hit's time goes -----------------------------------------------------------------

STEPS_CPU = ("current", "key", "ring", "bounds", "loads", "accept", "stats")
ROUND_TRIPS = frozenset({"socket", "lean_call", "endpoint_call", "txget", "hit"})
STEPS = (
    ("current", "`current_transaction()` (contextvar)"),
    ("key", "key: `CallKeys.key` (BLAKE2b of prefix + encoded args)"),
    ("ring", "ring: `NodeRing.node_for` (BLAKE2b + bisect)"),
    ("bounds", "pin-set bounds: `ReadOnlyTransaction._lookup_bounds`"),
    ("txget", "`TXGET` round trip: `CacheNode.lookup` (Endpoint + RespConnection + Hit)"),
    ("loads", "deserialization: `SafeSerializer.loads` (BLAKE2b tag + msgpack)"),
    ("accept", "pin-set narrowing: `ReadOnlyTransaction._accept` → `PinSet.narrow`"),
    ("stats", "counters: `FunctionStats.record_hit` (lock)"),
)


def breakdown_round(
    stack: Stack, args: argparse.Namespace, results: Results, transactions: int, offset: int
) -> None:
    """The hit path replayed step by step with the functions ``_call_in`` calls, each timed;
    one real get_item call first in every transaction so the pin set is in the same state
    as in the hit loop."""
    from txcache._transaction import current_transaction

    cache, per = stack.cache, args.per_transaction
    assert cache.ring is not None
    keys, ring, serializer = get_item.keys, cache.ring, cache.serializer
    scratch = FunctionStats("scratch")  # get_item's own counters stay exact
    samples: dict[str, list[int]] = {name: [] for name, _ in STEPS}
    totals: list[int] = []
    for t in range(transactions):
        ids = item_ids(per, args.items, offset + t * per)
        with cache.read_only(staleness=STALENESS):
            get_item(ids[0])
            for item_id in ids[1:]:
                t0 = perf_ns()
                tx = current_transaction()
                t1 = perf_ns()
                key = keys.key((item_id,), {})
                t2 = perf_ns()
                node = ring.node_for(key)
                t3 = perf_ns()
                bounds = tx._lookup_bounds()  # type: ignore[union-attr]
                t4 = perf_ns()
                found = node.lookup(key, bounds[0], bounds[1], with_tags=False)
                t5 = perf_ns()
                value = serializer.loads(found.value)
                t6 = perf_ns()
                accepted = tx._accept(found.interval)  # type: ignore[union-attr]
                t7 = perf_ns()
                scratch.record_hit(0.0)
                t8 = perf_ns()
                assert accepted, found.interval
                assert value[0] == item_id, value
                stamps = (t0, t1, t2, t3, t4, t5, t6, t7, t8)
                for (name, _), start, stop in zip(STEPS, stamps, stamps[1:], strict=False):
                    samples[name].append(stop - start)
                totals.append(t8 - t0)
    for name, label in STEPS:
        results.add(f"step_{name}", label, samples[name])
    results.add("step_total", "sum of the steps (timed back to back)", totals)


def tight_loops(stack: Stack, probe: Probe, args: argparse.Namespace, results: Results) -> None:
    """Each CPU-only step run ``--tight`` times in a loop: the mean ns per call (no timer
    blurs sub-microsecond steps); the round-trip pieces ``--tight``/10 times, each timed:
    the median (timer cost subtracted)."""
    from txcache._transaction import current_transaction

    cache, n = stack.cache, args.tight
    assert cache.ring is not None
    keys, ring, serializer = get_item.keys, cache.ring, cache.serializer
    scratch = FunctionStats("scratch")
    found = probe.node.lookup(probe.key, probe.lo, probe.hi, with_tags=False)
    assert isinstance(found, Hit)
    command = ("TXGET", probe.key, probe.lo, probe.hi)
    packed = hiredis.pack_command(command)  # type: ignore[arg-type]
    lean = RespConnection(probe.address)
    sock = lean._socket
    reader = hiredis.Reader()

    def raw_socket() -> None:
        sock.sendall(packed)
        reader.feed(sock.recv(65536))
        assert reader.gets() is not False

    def timer_pair() -> None:
        perf_ns()
        perf_ns()

    with cache.read_only(staleness=STALENESS) as tx:
        get_item(1)
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("current", current_transaction),
            ("key", lambda: keys.key((417,), {})),
            ("ring", lambda: ring.node_for(probe.key)),
            ("bounds", tx._lookup_bounds),
            ("loads", lambda: serializer.loads(found.value)),
            ("accept", lambda: tx._accept(found.interval)),
            ("stats", lambda: scratch.record_hit(0.0)),
            ("pack", lambda: hiredis.pack_command(command)),  # type: ignore[arg-type]
            ("socket", raw_socket),
            ("lean_call", lambda: lean.call(*command)),
            ("endpoint_call", lambda: probe.node.call(*command)),
            ("txget", lambda: probe.node.lookup(probe.key, probe.lo, probe.hi, with_tags=False)),
            ("hit", lambda: get_item(417)),
        ]
        cases.insert(0, ("timer_pair", timer_pair))
        here = results.tight.setdefault(results.placement, {})
        for name, function in cases:
            for _ in range(1000):  # warm up
                function()
            if name in ROUND_TRIPS:  # each timed: the median is robust to a stray wake-up
                samples = []
                for _ in range(n // 10):
                    start = perf_ns()
                    function()
                    samples.append(perf_ns() - start)
                here[name] = statistics.median(samples) - here["timer_pair"] / 2
                continue
            start = perf_ns()
            for _ in range(n):
                function()
            here[name] = (perf_ns() - start) / n
    lean.close()


PIN_COUNTS = (1, 60, 600, 2400)
"""Live pins a transaction may start with: none committed (this benchmark), 3 s of commits
at ``--pin-interval 50ms``, 30 s (``staleness=30``), 120 s (the agent's default
``--max-staleness``)."""


class CannedEndpoint:
    """Answers ``PINS`` with a canned list and anything else as the real agent did once:
    lets :meth:`AgentClient._fetch` run on many pins without a busy database."""

    def __init__(self, real: Any, pins: tuple[Pin, ...]) -> None:
        """``real``: the agent's endpoint; ``pins``: what ``PINS`` lists."""
        self.real = real
        self.replies: dict[str, Any] = {
            "PINS": [[p.ts, p.snapshot_id.encode(), int(p.current_as_of * 1e6)] for p in pins]
        }

    def call(self, *command: Any) -> Any:
        """The canned reply of ``command``."""
        name = str(command[0]).upper()
        if name not in self.replies:
            self.replies[name] = self.real.call(*command)
        return self.replies[name]

    def is_up(self) -> bool:
        """Always."""
        return True


def refresh_parse_ns(agent: Any, pins: tuple[Pin, ...]) -> float:
    """ns the refresher thread spends (holding the GIL) turning a ``PINS`` reply of
    ``pins`` into the pin list: ``AgentClient._fetch`` with the replies already read."""
    agent.endpoint = CannedEndpoint(agent.endpoint, pins)
    fetched = agent._fetch()
    assert fetched is not None
    assert len(fetched[0]) == len(pins)
    loops = max(20, 20_000 // len(pins))
    start = perf_ns()
    for _ in range(loops):
        agent._fetch()
    return (perf_ns() - start) / loops


def pin_set_scaling(stack: Stack, args: argparse.Namespace, results: Results) -> None:
    """What beginning a transaction and its first hit cost in the pin set as the number of
    live pins grows (tight loops over the library's own functions: ``AgentClient.pins``
    on a copy of the cache's agent client holding synthetic pins, ``PinSet(...)``,
    ``PinSet.bounds`` and ``PinSet.narrow``; no I/O)."""
    now = time.time()
    here = results.pin_scaling
    for count in PIN_COUNTS:
        pins = tuple(
            Pin(1_000_000 + 1000 * n, f"00000003-{n:08X}-1", now - 0.05 * (count - n))
            for n in range(count)
        )
        agent = copy.copy(stack.cache.agent)  # shares nothing it would change: no refresh
        assert agent is not None
        agent._pins = pins
        if hasattr(agent, "_refreshed_at"):
            agent._refreshed_at = math.inf  # the copy's list never expires
        live = sum(p.current_as_of >= now - STALENESS for p in pins)
        lo = pins[count // 2].ts  # a cached value valid over the newer half

        def begin(agent: Any = agent) -> PinSet:
            listed = agent.pins(staleness=STALENESS, not_before=None, now=now)
            return PinSet(listed, star=True)

        def first_hit(pin_set: PinSet, lo: int = lo) -> None:
            pin_set.bounds()
            assert pin_set.narrow(lo, 2**62)

        assert len(begin()) == live, (len(begin()), live)
        fetch_ns = refresh_parse_ns(agent, pins)
        loops = max(200, args.tight // (10 * count))
        start = perf_ns()
        for _ in range(loops):
            begin()
        begin_ns = (perf_ns() - start) / loops
        sets = [begin() for _ in range(loops)]
        start = perf_ns()
        for pin_set in sets:
            first_hit(pin_set)
        first_hit_ns = (perf_ns() - start) / loops
        kept = begin()
        oldest = kept.bounds()
        assert oldest is not None
        start = perf_ns()
        for _ in range(loops):  # a hit valid at every pin: the narrowing changes nothing
            kept.bounds()
            kept.narrow(oldest[0], 2**62)
        here[count] = {
            "live": live,
            "begin_ns": begin_ns,
            "first_hit_ns": first_hit_ns,
            "later_hit_ns": (perf_ns() - start) / loops,
            "refresh_parse_ns": fetch_ns,
        }


def profile_hits(stack: Stack, args: argparse.Namespace, results: Results) -> None:
    """cProfile of 50 transactions x ``--per-transaction`` hits (the profiler's own overhead
    inflates every Python call: read the shares, not the absolute times)."""
    cache, per = stack.cache, args.per_transaction
    ids = item_ids(50 * per, args.items, 11)
    profiler = cProfile.Profile()
    profiler.enable()
    for t in range(50):
        with cache.read_only(staleness=STALENESS):
            for item_id in ids[t * per : (t + 1) * per]:
                get_item(item_id)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(22)
    text = out.getvalue()
    results.profile = text[text.find("   ncalls") :].rstrip()


COMMIT_SCRIPT = "UPDATE ticks SET n = n + 1 WHERE id = 1;\n"


def commit_phase(stack: Stack, args: argparse.Namespace, results: Results) -> None:
    """Hits and transactions while pgbench commits ``--commit-rate`` one-row UPDATEs per
    second to another table (cached items stay valid): the agent takes a pin every 50 ms,
    so after ``--commit-warmup`` seconds a transaction starts with ~20 pins per second of
    its staleness limit."""
    script = Path(tempfile.mkdtemp(prefix="txcache-bench-")) / "tick.sql"
    script.write_text(COMMIT_SCRIPT)
    seconds = int(args.commit_warmup) + 60
    command = ["-n", "-f", str(script), "-c", "1", "-R", str(args.commit_rate)]
    load = Pgbench(stack.server, stack.dsn, [*command, "-T", str(seconds)], {})
    try:
        log(f"commit phase: pgbench {args.commit_rate} commits/s; waiting {args.commit_warmup} s")
        time.sleep(args.commit_warmup)
        assert stack.cache.agent is not None
        listed = len(stack.cache.agent._pins)
        log(f"  the library lists {listed} pins; measuring")
        results.placement = "commits"
        place(stack, "same" if len(stack.cpus) >= 2 else "free")
        per_round = args.calls // args.rounds // 2  # half as many as each placement
        foreign = ForeignCpu()
        for r in range(args.rounds):
            hit_round(stack, args, results, max(1, per_round // args.per_transaction), r * 1000)
            transaction_round(stack, args, results, args.transactions // args.rounds // 2)
        results.foreign_cpu["commits"] = [foreign.seconds()]
        place(stack, "free")
        s = results.summary("commits", "hit")
        log(f"  commits: hit p50 {s['p50']:.1f} µs, p99 {s['p99']:.1f} µs")
    finally:
        load.process.terminate()
        load.process.wait()
        shutil.rmtree(script.parent, ignore_errors=True)
    results.commits = {
        "command": shlex.join(["pgbench", *command, "-T", str(seconds)]).replace(
            str(script), script.name
        ),
        "script": COMMIT_SCRIPT.strip(),
        "pins_listed": listed,
        "placement": "same" if len(stack.cpus) >= 2 else "free",
    }


# -- report ----------------------------------------------------------------------------------

MAIN_ROWS = (
    "hit",
    "hit_later",
    "hit_first_in_loop",
    "fresh_hit",
    "empty_tx",
    "fresh_begin",
    "fresh_end",
    "fresh_whole",
    "lean_txget",
    "redis_txget",
    "redis_get",
    "db_in_tx",
    "db_autocommit",
)
SUMMARY_ROWS = ("hit", "fresh_hit", "empty_tx", "lean_txget", "redis_get", "db_autocommit")


def series_row(series: Series) -> str:
    """A markdown row: label, count, p50, p90, p99, max, mean (µs)."""
    s = series.summary_us()
    cells = [fmt(s[key], 1) for key in ("p50", "p90", "p99", "max", "mean")]
    return f"| {series.label} | {int(s['count'])} | {' | '.join(cells)} |"


def verdict(results: Results, placement: str) -> str:
    """Whether the hit p50 meets the goal in ``placement``."""
    hit = results.summary(placement, "hit")
    met = "met" if hit["p50"] <= GOAL_P50_US else "NOT met"
    return f"**{met}** (p50 {hit['p50']:.1f} µs, p99 {hit['p99']:.1f} µs)"


def summary_table(results: Results, placements: list[str]) -> list[str]:
    """p50 / p99 of the main series side by side for every placement."""
    head = " | ".join(f"{p}: p50 | {p}: p99" for p in placements)
    rows = [f"| what | {head} |", "|---|" + "---|---|" * len(placements)]
    for name in SUMMARY_ROWS:
        label = results.series[placements[0]][name].label
        cells = []
        for placement in placements:
            s = results.summary(placement, name)
            cells += [fmt(s["p50"], 1), fmt(s["p99"], 1)]
        rows.append(f"| {label} | {' | '.join(cells)} |")
    return rows


def breakdown_table(results: Results, placements: list[str], detail: str) -> list[str]:
    """The step-by-step hit path: p50 per placement, the tight loops and shares in
    ``detail``."""
    head = " | ".join(f"{p}: p50 µs" for p in placements)
    rows = [
        f"| step | {head} | {detail}: p99 µs | {detail}: tight loop µs "
        f"| {detail}: share of the hit p50 |",
        "|---|" + "---|" * len(placements) + "---|---|---|",
    ]
    hit = results.summary(detail, "hit")
    tight = results.tight.get(detail, {})
    for name, label in (*STEPS, ("total", "sum of the steps (timed back to back)")):
        cells = [fmt(results.summary(p, f"step_{name}")["p50"]) for p in placements]
        s = results.summary(detail, f"step_{name}")
        value = tight.get(name)
        rows.append(
            f"| {label} | {' | '.join(cells)} | {fmt(s['p99'])} | "
            f"{'-' if value is None else fmt(value / 1000)} | "
            f"{100 * s['p50'] / hit['p50']:.0f} % |"
        )
    return rows


def tight_text(results: Results, placement: str) -> list[str]:
    """The TXGET step split and the hit's total from the tight loops of ``placement``."""
    t = {key: value / 1000 for key, value in results.tight[placement].items()}
    cpu_only = sum(t[name] for name in STEPS_CPU)
    wrapper = t["hit"] - cpu_only - t["txget"]
    return [
        f"`TXGET` split ({placement}; medians of single timed calls, µs): bare socket "
        f"`sendall` + `recv` + hiredis parse of a pre-packed command {t['socket']:.1f}; with "
        f"`hiredis.pack_command` ({t['pack']:.2f}, tight loop) that is "
        f"`RespConnection.call` {t['lean_call']:.1f}; `Endpoint.call` (idle-list pop/append, "
        f"`is_up()` → `time.monotonic()`) {t['endpoint_call']:.1f}; `CacheNode.lookup` (reply "
        f"checks, `Interval` and `Hit` objects) {t['txget']:.1f}.",
        "",
        f"A hit (`get_item(417)` again and again in one transaction; {placement}) takes "
        f"{t['hit']:.1f} µs (median): `CacheNode.lookup` {t['txget']:.1f} + the CPU-only "
        f"steps {cpu_only:.1f} (tight loops) + the rest {wrapper:.1f} (`__call__`, "
        "`isinstance` checks, the frames loop, two `time.perf_counter()`, "
        "`ReadOnlyTransaction.lookup`'s own frame).",
    ]


COMMIT_ROWS = ("hit", "hit_first_in_loop", "fresh_hit", "empty_tx", "fresh_begin", "fresh_end")


def commit_section(results: Results, args: argparse.Namespace) -> list[str]:
    """The commit phase's table, if it ran."""
    if "commits" not in results.series:
        return []
    pins = summarize([float(n) for n in results.pins_at_begin["commits"]])
    return [
        f"## While the database commits ({results.commits['placement']} placement)",
        "",
        f"`{results.commits['command']}` (`{results.commits['script']}`) commits a "
        "one-row `UPDATE` of another table "
        f"{args.commit_rate} times a second (the cached items stay valid); measured after "
        f"{args.commit_warmup:g} s of it, when the library listed "
        f"{results.commits['pins_listed']} pins and a transaction began with a median "
        f"{pins['p50']:.0f} of them (those current within `staleness=30`). PostgreSQL, "
        "pgbench and the agent are not pinned: they share both CPUs with this process "
        f"(other work on the machine meanwhile: {results.foreign_cpu['commits'][0]:.1f} CPU "
        f"s). {args.rounds} rounds of hits and one-hit transactions, interleaved.",
        "",
        "| what | samples | p50 | p90 | p99 | max | mean |",
        "|---|---|---|---|---|---|---|",
        *(series_row(results.series["commits"][name]) for name in COMMIT_ROWS),
        "",
    ]


def reading(results: Results, placements: list[str]) -> list[str]:
    """What the placements say: the bare round trip against the library's share."""

    def p50(placement: str, name: str) -> float:
        return results.summary(placement, name)["p50"]

    pinned = [p for p in placements if p != "free"] or placements
    added = ", ".join(f"{p} {p50(p, 'hit') - p50(p, 'lean_txget'):.1f} µs" for p in pinned)
    bare = ", ".join(f"{p} {p50(p, 'lean_txget'):.1f} µs" for p in placements)
    return [
        f"A bare `TXGET` round trip (the library's own connection) takes p50 {bare}; the "
        f"library adds (hit p50 minus that) {added} (*free* mixes both over time). Where "
        "the node's thread waits on another vCPU than the caller's, every round trip pays a "
        "wake-up of that vCPU by the "
        "hypervisor (this guest polls for no time before halting, see *CPU idle*): that "
        "wake-up, not the library, is what misses the goal in *split*; *free* gets *same* or "
        "*split* depending on where the scheduler put the threads at the time.",
        "",
    ]


def report_body(results: Results, args: argparse.Namespace, library: str) -> list[str]:
    """The markdown report."""
    placements = [p for p in PLACEMENTS if p in results.series]
    detail = "same" if "same" in placements else placements[0]
    warm = summarize(results.warm_ms)
    pins = summarize([float(n) for n in results.pins_at_begin[placements[0]]])
    timer = results.tight[detail]["timer_pair"] / 2
    foreign = "; ".join(
        f"{p}: {', '.join(f'{v:.1f}' for v in results.foreign_cpu[p])}" for p in placements
    )
    body = [
        f"- library: {library}",
        f"- settings: {args.items} items, {args.per_transaction} calls per transaction, "
        f"{args.rounds} interleaved rounds, `staleness={STALENESS:g}`, agent "
        "`--pin-interval 50ms --heartbeat-interval 50ms`, library "
        f"`refresh_interval={args.refresh_interval:g}` s, 2 nodes, everything on loopback "
        "(PostgreSQL over TCP too); the cached value is "
        f"{results.value_bytes} bytes (`(id, 'item N', price)`, SafeSerializer)",
        "- CPU placements, every series measured in each, interleaved round by round: "
        + "; ".join(f"*{p}*: {PLACEMENTS[p]}" for p in placements),
        f"- other work on the machine (CPU s, per round): {foreign}",
        f"- CPU idle: {idle_note()}",
        f"- pins in a transaction's set at begin: median {pins['p50']:.0f}, "
        f"max {pins['max']:.0f}; `perf_counter_ns()` costs {timer:.0f} ns (in every sample "
        "once)",
        "",
        f"Goal: hit p50 <= {GOAL_P50_US:g} µs — "
        + "; ".join(f"{p}: {verdict(results, p)}" for p in placements)
        + ".",
        "",
        *reading(results, placements),
        "## Summary (µs)",
        "",
        *summary_table(results, placements),
        "",
        f"Warm-up (one transaction, {args.items} misses: query + `TXSET`; the first one also "
        f"imports the pin's snapshot; free placement): p50 {warm['p50'] * 1000:.0f} µs, "
        f"p99 {warm['p99'] * 1000:.0f} µs, mean {warm['mean'] * 1000:.0f} µs.",
    ]
    for placement in placements:
        body += [
            "",
            f"## Latency, {placement} (µs)",
            "",
            "| what | samples | p50 | p90 | p99 | max | mean |",
            "|---|---|---|---|---|---|---|",
            *(series_row(results.series[placement][name]) for name in MAIN_ROWS),
        ]
    body += [
        "",
        *commit_section(results, args),
        "## Where a hit's time goes",
        "",
        "The hit path (`CacheableFunction._call_in`) replayed with the same internal "
        "functions, each step timed (one timer call per sample); the tight-loop column runs "
        "each CPU-only step alone in a loop (mean) and the round trip timed call by call "
        "(median).",
        "",
        *breakdown_table(results, placements, detail),
        "",
        *tight_text(results, detail),
        "",
        "## The pin set as pins pile up",
        "",
        "This benchmark commits nothing, so a transaction starts with one pin. With commits, "
        "the agent takes a pin every 50 ms and a transaction starts with every pin current "
        "within its staleness limit. The library's own functions in tight loops, no I/O "
        "(begin: `AgentClient.pins` + `PinSet(...)`; first hit: `PinSet.bounds` + "
        "`PinSet.narrow` to the newer half; the refresher: `AgentClient._fetch` on replies "
        "already read, pins 50 ms apart):",
        "",
        "| pins listed | within `staleness=30` | begin µs | first hit's pin-set work µs "
        "| every hit valid at all pins (narrowing keeps them all) µs "
        "| refresher's parse of `PINS` µs (GIL held, every `refresh_interval`) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {count} | {cost['live']:.0f} | {fmt(cost['begin_ns'] / 1000)} | "
            f"{fmt(cost['first_hit_ns'] / 1000)} | {fmt(cost['later_hit_ns'] / 1000)} | "
            f"{fmt(cost['refresh_parse_ns'] / 1000, 0)} |"
            for count, cost in results.pin_scaling.items()
        ),
        "",
        f"## cProfile of the hit loop ({detail}; 50 transactions x {args.per_transaction} "
        "hits; sorted by own time; the profiler inflates every Python call)",
        "",
        "```",
        results.profile,
        "```",
    ]
    return body


def raw_results(results: Results, args: argparse.Namespace, library: str) -> dict[str, Any]:
    """Everything as JSON, per placement: summaries, quantiles and per-round medians (µs)."""
    return {
        "args": vars(args),
        "library": library,
        "goal_p50_us": GOAL_P50_US,
        "value_bytes": results.value_bytes,
        "placements": {p: PLACEMENTS[p] for p in results.series if p in PLACEMENTS},
        "commit_phase": results.commits,
        "foreign_cpu_seconds_per_round": results.foreign_cpu,
        "summaries_us": {
            placement: {name: {"label": s.label, **s.summary_us()} for name, s in named.items()}
            for placement, named in results.series.items()
        },
        "tight_loop_ns": results.tight,
        "warm_up_ms": results.warm_ms,
        "warm_up_stats": results.warm_stats,
        "stats_after": results.hit_stats,
        "pins_at_begin": results.pins_at_begin,
        "pin_set_scaling_ns": results.pin_scaling,
        "cpu_idle": idle_note(),
        "profile": results.profile,
        "quantiles_us": {
            placement: {name: quantiles(s.samples) for name, s in named.items()}
            for placement, named in results.series.items()
        },
        "p50_per_round_us": {
            placement: {name: per_round_p50(s.samples, args.rounds) for name, s in named.items()}
            for placement, named in results.series.items()
        },
    }


def quantiles(samples: list[int]) -> list[float]:
    """The distribution in µs at every 0.5 % (0 %, 0.5 %, …, 100 %): what a CDF plot
    needs, without the 1.5 million raw samples."""
    ordered = sorted(samples)
    last = len(ordered) - 1
    return [round(ordered[round(last * step / 200)] / 1000, 2) for step in range(201)]


def per_round_p50(samples: list[int], rounds: int) -> list[float]:
    """The median (µs) of each round's share of ``samples`` (they were appended round by
    round): shows whether a series drifted during the run."""
    size = max(1, len(samples) // rounds)
    chunks = [samples[start : start + size] for start in range(0, size * rounds, size)]
    return [round(statistics.median(chunk) / 1000, 2) for chunk in chunks if chunk]


# -- main ------------------------------------------------------------------------------------


def measure_round(
    stack: Stack, probe: Probe, args: argparse.Namespace, results: Results, r: int
) -> None:
    """One round of every series in the current placement."""
    per_round = args.calls // args.rounds
    transactions = max(1, per_round // args.per_transaction)
    where = f"round {r + 1}/{args.rounds}, {results.placement}"
    foreign = ForeignCpu()
    log(f"{where}: {transactions} x {args.per_transaction} hits")
    hit_round(stack, args, results, transactions, r * per_round)
    log(f"{where}: {args.transactions // args.rounds} empty and one-hit transactions")
    transaction_round(stack, args, results, args.transactions // args.rounds)
    log(f"{where}: bare round trips and the database, {per_round} each")
    round_trip_round(stack, probe, args, results, per_round)
    database_round(stack, args, results, per_round)
    log(f"{where}: the hit path step by step")
    breakdown_round(stack, args, results, transactions, r * per_round + 37)
    results.foreign_cpu.setdefault(results.placement, []).append(foreign.seconds())
    s = results.summary(results.placement, "hit")
    log(f"  {results.placement} so far: hit p50 {s['p50']:.1f} µs, p99 {s['p99']:.1f} µs")


def run(args: argparse.Namespace) -> None:
    """Start the stack, measure every series in interleaved rounds, write the report."""
    library = library_note()
    log(f"library: {library}")
    results = Results()
    with library_stack(args) as stack:
        placements = args.placements if len(stack.cpus) >= 2 else ["free"]
        log(f"stack up: nodes {[n.address for n in stack.nodes]}; CPUs {stack.cpus}")
        log(f"warm-up: one transaction, get_item(1..{args.items})")
        warm(stack, args, results)
        probe = probe_key(stack)
        results.value_bytes = len(probe.value)
        try:
            for r in range(args.rounds):
                for placement in placements:
                    place(stack, placement)
                    results.placement = placement
                    measure_round(stack, probe, args, results, r)
            for placement in placements:
                log(f"tight loops, {placement} (x{args.tight})")
                place(stack, placement)
                results.placement = placement
                tight_loops(stack, probe, args, results)
            detail = "same" if "same" in placements else placements[0]
            log(f"cProfile of the hit loop, {detail}")
            place(stack, detail)
            profile_hits(stack, args, results)
            log(f"pin-set cost for {', '.join(map(str, PIN_COUNTS))} live pins")
            pin_set_scaling(stack, args, results)
            if args.commit_warmup > 0:
                commit_phase(stack, args, results)
        finally:
            place(stack, "free")
        results.hit_stats = get_item.stats.as_dict()
    body = report_body(results, args, library)
    name = result_name("library_hit_latency", args.quick, args.storage)
    title = "Library: cacheable-call hit latency (Python, loopback)"
    path = write_report(name, title, stack.note, body, raw_results(results, args, library))
    print("\n".join(body))
    log(f"report: {path}")


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--items", type=int, default=1000, help="rows, all warmed")
    parser.add_argument(
        "--calls", type=int, default=20_000, help="timed hits in all, per placement"
    )
    parser.add_argument("--per-transaction", type=int, default=100)
    parser.add_argument(
        "--transactions",
        type=int,
        default=4000,
        help="empty and one-hit transactions, each, per placement",
    )
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--tight", type=int, default=100_000, help="tight-loop iterations")
    parser.add_argument(
        "--placements",
        nargs="+",
        choices=list(PLACEMENTS),
        default=list(PLACEMENTS),
        help="CPU placements to measure (same/split need two CPUs)",
    )
    parser.add_argument(
        "--refresh-interval",
        type=float,
        default=0.25,
        help="the library's pin-list refresh (s); 0.25 is its default, the tests use 0.05",
    )
    parser.add_argument(
        "--commit-warmup",
        type=float,
        default=35.0,
        help="seconds of commits before the commit phase measures (0: no commit phase)",
    )
    parser.add_argument("--commit-rate", type=int, default=100, help="commits/s (pgbench -R)")
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    args = parser.parse_args()
    if args.quick:
        args.calls, args.transactions, args.rounds, args.tight = 2000, 400, 2, 10_000
        args.commit_warmup = min(args.commit_warmup, 5.0)
    return args


if __name__ == "__main__":
    run(parse_args())

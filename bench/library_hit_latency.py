"""Cacheable-call hit latency in the Python library, over loopback.

The stack is the library tests' (tests/library_fixtures.py), started by
:class:`txcache.stack.Stack`: PostgreSQL set up for txcache, two ``txcached`` nodes,
``txcache-agent --pin-interval 50ms`` and ``stack.connect(...)``.
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
  (``txcache.protocol.RespConnection``, no :class:`Endpoint` bookkeeping);
- **the database**: the same row by primary key with psycopg over TCP, autocommit and
  inside a read-only transaction (100 queries each);
- **where a hit's time goes** (:mod:`_hit_layers`, which measures the library's layers on
  purpose): the hit path replayed step by step with the objects a call uses (key, ring
  lookup, pin-set bounds, the ``TXGET`` round trip, deserialization, pin-set narrowing,
  counters), each step timed; the same steps in tight loops (mean per call, no timer in the
  way); a cProfile of the hit loop; and the pin set's cost as pins pile up.

Every series is measured in ``--rounds`` interleaved rounds so that a burst of other work
on the machine hits them all alike. The goal: hit p50 <= 50 µs (the paper's lookup
took 0.7 ms over its network).

This file starts the stack and runs the rounds; the series are measured in
:mod:`_hit_measure` (through the public API), :mod:`_hit_layers` (layer by layer) and
reported by :mod:`_hit_report`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from _common import (
    STORAGE_HELP,
    bench_stack,
    create_database,
    database_note,
    execute,
    postgres,
)
from _cpu import ForeignCpu
from _hit_layers import PIN_COUNTS, breakdown_round, pin_set_scaling, tight_loops
from _hit_measure import (
    PLACEMENTS,
    HitBench,
    Probe,
    Results,
    commit_phase,
    database_round,
    get_item,
    hit_round,
    library_note,
    place,
    probe_key,
    profile_hits,
    round_trip_round,
    transaction_round,
    warm,
)
from _hit_report import raw_results, report_body
from _report import log, machine_note, result_name, write_report

SCHEMA = (
    "CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, price integer NOT NULL)",
    "CREATE TABLE ticks (id integer PRIMARY KEY, n bigint NOT NULL)",
    "INSERT INTO ticks VALUES (1, 0)",
    "INSERT INTO items SELECT i, 'item ' || i, 10 * i FROM generate_series(1, {items}) i",
    "VACUUM ANALYZE items",
)
"""The tables (``ticks``: the commit phase's), before the stack sets the database up."""

AGENT_FLAGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")


@contextmanager
def library_stack(args: argparse.Namespace) -> Iterator[HitBench]:
    """PostgreSQL with ``items``, two nodes, the agent and a connected cache, as
    tests/library_fixtures.py starts them."""
    with postgres(args.storage) as server:
        dsn = create_database(server, "bench")
        execute(dsn, *(statement.format(items=args.items) for statement in SCHEMA))
        options = {"nodes": 2, "max_memory": "64mb", "agent_args": AGENT_FLAGS}
        with bench_stack(dsn, **options) as stack:
            note = machine_note(database_note(dsn, args.storage))
            stack.caught_up()
            cache = stack.connect(refresh_interval=args.refresh_interval)
            try:
                yield HitBench(server, stack, cache, note)
            finally:
                cache.close()


def measure_round(
    bench: HitBench, probe: Probe, args: argparse.Namespace, results: Results, r: int
) -> None:
    """One round of every series in the current placement."""
    per, items = args.per_transaction, args.items
    per_round = args.calls // args.rounds
    transactions = max(1, per_round // per)
    where = f"round {r + 1}/{args.rounds}, {results.placement}"
    foreign = ForeignCpu()
    log(f"{where}: {transactions} x {per} hits")
    hit_round(bench, per, items, results, transactions, r * per_round)
    log(f"{where}: {args.transactions // args.rounds} empty and one-hit transactions")
    transaction_round(bench, items, results, args.transactions // args.rounds)
    log(f"{where}: bare round trips and the database, {per_round} each")
    round_trip_round(probe, results, per_round)
    database_round(bench, per, items, results, per_round)
    log(f"{where}: the hit path step by step")
    breakdown_round(bench, per, items, results, transactions, r * per_round + 37)
    results.foreign_cpu.setdefault(results.placement, []).append(foreign.seconds())
    s = results.summary(results.placement, "hit")
    log(f"  {results.placement} so far: hit p50 {s['p50']:.1f} µs, p99 {s['p99']:.1f} µs")


def measure(bench: HitBench, args: argparse.Namespace, results: Results) -> None:
    """Warm the cache, then every series in interleaved rounds and placements, the tight
    loops, the profile, the pin set's scaling and the commit phase."""
    placements = args.placements if len(bench.cpus) >= 2 else ["free"]
    log(f"stack up: nodes {bench.stack.node_addresses}; CPUs {bench.cpus}")
    log(f"warm-up: one transaction, get_item(1..{args.items})")
    warm(bench, args.items, results)
    probe = probe_key(bench)
    results.value_bytes = len(probe.value)
    try:
        for r in range(args.rounds):
            for placement in placements:
                place(bench, placement)
                results.placement = placement
                measure_round(bench, probe, args, results, r)
        for placement in placements:
            log(f"tight loops, {placement} (x{args.tight})")
            place(bench, placement)
            results.placement = placement
            tight_loops(bench, probe, args.tight, results)
        detail = "same" if "same" in placements else placements[0]
        log(f"cProfile of the hit loop, {detail}")
        place(bench, detail)
        profile_hits(bench, args.per_transaction, args.items, results)
        log(f"pin-set cost for {', '.join(map(str, PIN_COUNTS))} live pins")
        pin_set_scaling(bench, args.tight, results)
        if args.commit_warmup > 0:
            commit_phase(bench, args, results)
    finally:
        place(bench, "free")
    results.hit_stats = get_item.stats.as_dict()


def run(args: argparse.Namespace) -> None:
    """Start the stack, measure, write the report."""
    library = library_note()
    log(f"library: {library}")
    results = Results()
    with library_stack(args) as bench:
        measure(bench, args, results)
    body = report_body(results, args, library)
    name = result_name("library_hit_latency", args.quick, args.storage)
    title = "Library: cacheable-call hit latency (Python, loopback)"
    path = write_report(name, title, bench.note, body, raw_results(results, args, library))
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

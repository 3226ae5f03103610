"""What the sampled audit costs (``audit_rate``, docs/library.md "Audit"): the application's
throughput and latency, and the database's extra work, at ``audit_rate`` 0, 0.001 and 0.01
side by side in one run.

``--threads`` threads run read-only transactions, each calling a ``@cacheable`` function
over a hot set of ``--hot`` keys cached beforehand, so every call is a hit — the audit's
reruns are then the only database work the application causes. Three caches of one stack
differ only in ``audit_rate``; each round runs every rate for ``--phase`` seconds, in an
order that rotates by round, ``--rounds`` rounds. Reported per rate: reads per second and
latency p50/p99 (each against rate 0), the database server's CPU (every process under the
postmaster) per second and its excess over rate 0 per audit check, what the audit did
(checks, mismatches, skipped), and the CPU other work on the machine used meanwhile.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from _common import STORAGE_HELP, bench_stack, create_database, database_note, execute, postgres
from _cpu import PhaseCpu, in_threads
from _hot_reads import hot_items, item_name, items_schema
from _report import fmt, log, machine_note, num, ratio, result_name, summarize, table, write_report

import txcache
from txcache.stack import EmbeddedPostgres

RATES = (0.0, 0.001, 0.01)


@dataclass
class RateTotals:
    """One rate's measurements, summed over its phases."""

    rate: float
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    database_s: float = 0.0
    foreign_s: float = 0.0
    hits: int = 0
    misses: int = 0
    audit: dict[str, int] = field(
        default_factory=lambda: {"checks": 0, "mismatches": 0, "skipped": 0}
    )

    @property
    def reads_per_second(self) -> float:
        """Reads completed per second of its phases."""
        return len(self.latencies) / self.seconds if self.seconds else float("nan")

    @property
    def database_share(self) -> float:
        """Database CPU seconds per second of its phases."""
        return self.database_s / self.seconds if self.seconds else float("nan")


def read_for(cache: txcache.Cache, index: int, hot: int, deadline: float) -> list[float]:
    """Read-only transactions of one thread until ``deadline``; each one's seconds."""
    latencies = []
    items = hot_items(index, hot)
    while time.monotonic() < deadline:
        item = next(items)
        started = time.perf_counter()
        with cache.read_only(staleness=30):
            item_name(item)
        latencies.append(time.perf_counter() - started)
    return latencies


def audit_counts() -> dict[str, int]:
    """What the audit of :func:`item_name` did so far in this process."""
    audit = item_name.audit
    return {"checks": audit.checks, "mismatches": audit.mismatches, "skipped": audit.skipped}


def phase(
    cache: txcache.Cache, server: EmbeddedPostgres, args: argparse.Namespace, totals: RateTotals
) -> None:
    """``args.threads`` threads reading through ``cache`` for ``args.phase`` seconds,
    added to ``totals`` (``server``: the database's, whose CPU is counted)."""
    deadline = time.monotonic() + args.phase
    audit, hits, misses = audit_counts(), item_name.stats.hits, item_name.stats.miss_count
    with PhaseCpu(server) as cpu:
        found = in_threads(args.threads, lambda index: read_for(cache, index, args.hot, deadline))
    totals.seconds += cpu.seconds
    totals.database_s += cpu.database_s
    totals.foreign_s += cpu.foreign_s
    totals.latencies += [took for each in found for took in each]
    totals.hits += item_name.stats.hits - hits
    totals.misses += item_name.stats.miss_count - misses
    for name, count in audit_counts().items():
        totals.audit[name] += count - audit[name]


def warm(cache: txcache.Cache, hot: int) -> None:
    """Every hot key cached (read twice: the second read of each is a hit)."""
    for _ in range(2):
        for item in range(1, hot + 1):
            with cache.read_only(staleness=30):
                item_name(item)


def run(args: argparse.Namespace) -> None:
    with postgres(args.storage) as server:
        dsn = create_database(server, "audit")
        execute(dsn, *items_schema(10_000))
        with bench_stack(dsn, nodes=1, max_memory="64mb") as stack:
            note = machine_note(database_note(dsn, args.storage))
            stack.caught_up()
            caches = {rate: stack.connect(audit_rate=rate) for rate in RATES}
            try:
                warm(caches[0.0], args.hot)
                totals = {rate: RateTotals(rate) for rate in RATES}
                for round_ in range(args.rounds):
                    order = RATES[round_ % len(RATES) :] + RATES[: round_ % len(RATES)]
                    for rate in order:
                        log(f"round {round_ + 1}/{args.rounds}: audit_rate {rate}")
                        phase(caches[rate], server, args, totals[rate])
            finally:
                for cache in caches.values():
                    cache.close()
    report(args, note, totals)


def report(
    args: argparse.Namespace, note: dict[str, object], totals: dict[float, RateTotals]
) -> None:
    base = totals[0.0]
    base_latency = summarize(base.latencies)
    rows, raw = [], {}
    for rate, each in totals.items():
        latency = summarize(each.latencies)
        checks = each.audit["checks"]
        excess = (each.database_share - base.database_share) * each.seconds
        rows.append(
            [
                f"{rate:g}",
                num(each.reads_per_second),
                ratio(each.reads_per_second, base.reads_per_second),
                fmt(latency["p50"] * 1e3, 3),
                ratio(latency["p50"], base_latency["p50"]),
                fmt(latency["p99"] * 1e3, 3),
                ratio(latency["p99"], base_latency["p99"]),
                fmt(each.database_share * 100, 1),
                fmt(excess / checks * 1e3, 2) if checks else "-",
                num(checks),
                num(each.audit["mismatches"]),
                num(each.audit["skipped"]),
                fmt(100 * each.hits / max(1, each.hits + each.misses), 1),
                fmt(each.foreign_s, 1),
            ]
        )
        raw[f"{rate:g}"] = {
            "seconds": each.seconds,
            "reads": len(each.latencies),
            "latency": latency,
            "database_s": each.database_s,
            "foreign_s": each.foreign_s,
            "hits": each.hits,
            "misses": each.misses,
            "audit": each.audit,
        }
    header = [
        "audit_rate",
        "reads/s",
        "vs 0",
        "p50 ms",
        "vs 0",
        "p99 ms",
        "vs 0",
        "database CPU %",
        "extra database CPU ms per check",
        "checks",
        "mismatches",
        "skipped",
        "hits %",
        "other work CPU s",
    ]
    body = [
        f"{args.threads} threads of read-only transactions, each one `@cacheable` call over "
        f"{args.hot} hot keys cached beforehand; {args.rounds} round(s) of {args.phase:g} s "
        "per rate, the order rotating by round.",
        "",
        *table(header, rows, "l" + "r" * (len(header) - 1)),
        "",
        "*database CPU %*: CPU seconds of every PostgreSQL process per second of the rate's "
        "phases (100 % = one CPU). *extra database CPU per check*: that, less rate 0's, over "
        "the checks made — what one audited call costs the database (a rerun at its pin: the "
        "snapshot import or a parked transaction, the query, its checks). Checks still queued "
        "when a phase ends run in the next one. *other work*: CPU used meanwhile by processes "
        "that are not this benchmark's; if it is large, run again.",
    ]
    name = result_name("audit", args.quick, args.storage)
    title = "The sampled audit: throughput, latency and database load by audit_rate"
    path = write_report(name, title, note, body, raw)
    log(f"report: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--hot", type=int, default=1000, help="keys read, all cached")
    parser.add_argument("--phase", type=float, default=20.0, help="seconds per rate per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="tmpfs", help=STORAGE_HELP)
    args = parser.parse_args()
    if args.quick:
        args.phase, args.rounds, args.hot = 3.0, 1, 200
    run(args)


if __name__ == "__main__":
    main()

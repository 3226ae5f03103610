"""One recompute per hot key: how many times one popular value is computed after each
invalidation, with leases (the library's default) and without (``lease=0``), side by side
in one run (docs/library.md, "Hot keys: one recompute").

``--threads`` reader threads read one key — a category's item count and total price, an
aggregate over a tenth of ``--rows`` rows, some 20 ms of database work at the default — in
read-only
transactions that must see the latest write (``not_before`` the writer's newest token), while
a writer thread updates an item of that category every ``--every`` ms: each write
invalidates the key, and every reader then misses it at once. Two caches of one stack differ
only in ``lease``; each round runs both for ``--phase`` seconds, in an order that alternates
by round, ``--rounds`` rounds. Reported per mode: computations of the function (each one
database query) per invalidation, the misses that waited for another caller's lease, reads
per second and read latency, and the database server's CPU per invalidation.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field

from _common import STORAGE_HELP, bench_stack, create_database, database_note, execute, postgres
from _cpu import PhaseCpu, in_threads
from _report import fmt, log, machine_note, num, ratio, result_name, summarize, table, write_report

import txcache
from txcache.stack import EmbeddedPostgres

MODES = {"lease": 1.0, "no lease": 0.0}
"""Each mode's ``lease`` setting: the default, and none."""

computations = 0
"""How many times :func:`category_total` ran (each run one query), in this process."""
_counting = threading.Lock()


@txcache.cacheable
def category_total(category: int) -> tuple[int, int]:
    """The number and total price of a category's items: the hot key."""
    global computations
    with _counting:
        computations += 1
    row = txcache.query_one(
        "SELECT count(*), sum(price) FROM items WHERE category = %s", (category,)
    )
    assert row is not None
    return int(row[0]), int(row[1])


@dataclass
class ModeTotals:
    """One mode's measurements, summed over its phases."""

    mode: str
    seconds: float = 0.0
    invalidations: int = 0
    computations: int = 0
    lease_waits: int = 0
    latencies: list[float] = field(default_factory=list)
    database_s: float = 0.0
    foreign_s: float = 0.0
    per_round: list[float] = field(default_factory=list)
    """Computations per invalidation in each round."""


class Writer:
    """Updates an item of the hot category every ``every`` seconds until ``deadline`` (a
    ``time.monotonic`` value); readers read :attr:`token`, the newest write's commit
    position."""

    def __init__(self, cache: txcache.Cache, every: float, deadline: float) -> None:
        self.cache = cache
        self.every = every
        self.deadline = deadline
        self.token: int | None = None
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writer")

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        item = 0
        while not self._stop.wait(self.every) and time.monotonic() < self.deadline:
            item += 1
            with self.cache.read_write() as tx:
                tx.execute("UPDATE items SET price = price + 1 WHERE id = %s", (item * 10,))
            self.token = tx.commit_timestamp
            self.writes += 1


def read_for(cache: txcache.Cache, writer: Writer, deadline: float) -> list[float]:
    """One reader thread's read-only transactions until ``deadline``; each one's seconds."""
    latencies = []
    while time.monotonic() < deadline:
        started = time.perf_counter()
        with cache.read_only(staleness=30, not_before=writer.token):
            category_total(0)
        latencies.append(time.perf_counter() - started)
    return latencies


def phase(
    cache: txcache.Cache, server: EmbeddedPostgres, args: argparse.Namespace, totals: ModeTotals
) -> None:
    """``args.threads`` readers and the writer through ``cache`` for ``args.phase`` seconds,
    added to ``totals``."""
    with cache.read_only(staleness=30):
        category_total(0)  # cached: the phase's misses are its writes'
    deadline = time.monotonic() + args.phase
    writer = Writer(cache, args.every / 1e3, deadline)
    computed, waits = computations, category_total.stats.lease_waits
    with PhaseCpu(server) as cpu, writer:
        found = in_threads(args.threads, lambda _: read_for(cache, writer, deadline))
    totals.seconds += cpu.seconds
    totals.database_s += cpu.database_s
    totals.foreign_s += cpu.foreign_s
    totals.latencies += [took for each in found for took in each]
    totals.invalidations += writer.writes
    totals.computations += computations - computed
    totals.lease_waits += category_total.stats.lease_waits - waits
    totals.per_round.append((computations - computed) / max(1, writer.writes))


def schema(rows: int) -> tuple[str, ...]:
    """``items``: ``rows`` items, a tenth of them in category 0 (the hot key's)."""
    return (
        "CREATE TABLE items (id integer PRIMARY KEY, category integer NOT NULL, "
        "price integer NOT NULL)",
        f"INSERT INTO items SELECT i, i % 10, 100 FROM generate_series(1, {rows}) i",
        "CREATE INDEX ON items (category)",
        "ANALYZE items",
    )


def run(args: argparse.Namespace) -> None:
    with postgres(args.storage) as server:
        dsn = create_database(server, "hot_key")
        execute(dsn, *schema(args.rows))
        with bench_stack(dsn, nodes=1, max_memory="64mb") as stack:
            note = machine_note(database_note(dsn, args.storage))
            stack.caught_up()
            caches = {mode: stack.connect(lease=lease) for mode, lease in MODES.items()}
            try:
                totals = {mode: ModeTotals(mode) for mode in MODES}
                for round_ in range(args.rounds):
                    order = list(MODES) if round_ % 2 == 0 else list(reversed(MODES))
                    for mode in order:
                        log(f"round {round_ + 1}/{args.rounds}: {mode}")
                        phase(caches[mode], server, args, totals[mode])
                        log(f"  {totals[mode].per_round[-1]:.2f} computations per invalidation")
            finally:
                for cache in caches.values():
                    cache.close()
    report(args, note, totals)


def report(
    args: argparse.Namespace, note: dict[str, object], totals: dict[str, ModeTotals]
) -> None:
    base = totals["no lease"]
    base_latency = summarize(base.latencies)
    rows, raw = [], {}
    for mode, each in totals.items():
        latency = summarize(each.latencies)
        reads_per_second = len(each.latencies) / each.seconds
        rows.append(
            [
                mode,
                num(each.invalidations),
                fmt(each.computations / max(1, each.invalidations), 2),
                " / ".join(fmt(value, 1) for value in each.per_round),
                num(each.lease_waits),
                num(reads_per_second),
                ratio(reads_per_second, len(base.latencies) / base.seconds),
                fmt(latency["p50"] * 1e3, 2),
                ratio(latency["p50"], base_latency["p50"]),
                fmt(latency["p99"] * 1e3, 2),
                fmt(each.database_s / max(1, each.invalidations) * 1e3, 1),
                fmt(each.foreign_s, 1),
            ]
        )
        raw[mode] = {
            "lease": MODES[mode],
            "seconds": each.seconds,
            "invalidations": each.invalidations,
            "computations": each.computations,
            "per_round": each.per_round,
            "lease_waits": each.lease_waits,
            "reads": len(each.latencies),
            "latency": latency,
            "database_s": each.database_s,
            "foreign_s": each.foreign_s,
        }
    header = [
        "mode",
        "invalidations",
        "computations per invalidation",
        "… by round",
        "misses that waited",
        "reads/s",
        "vs no lease",
        "p50 ms",
        "vs no lease",
        "p99 ms",
        "database CPU ms per invalidation",
        "other work CPU s",
    ]
    body = [
        f"{args.threads} reader threads of read-only transactions reading one key (a "
        f"category's count and total over {args.rows // 10:,} of {args.rows:,} rows), each "
        f"with `not_before` the newest write's token; a writer updating one of the category's "
        f"items every {args.every:g} ms; {args.rounds} round(s) of {args.phase:g} s per mode, "
        "the order alternating by round. `lease`: the default, 1 s; `no lease`: `lease=0`.",
        "",
        *table(header, rows, "l" + "r" * (len(header) - 1)),
        "",
        "*computations*: runs of the cacheable function, each one query of the database; "
        "without leases every reader that misses the invalidated key runs it, with them one "
        "does and the others wait for its store (*misses that waited*). *database CPU*: every "
        "PostgreSQL process's CPU over the mode's phases, per write (the write itself, the "
        "pins the readers' tokens ask for, and the recomputations). *other work*: CPU used "
        "meanwhile by processes that are not this benchmark's; if it is large, run again.",
    ]
    name = result_name("hot_key", args.quick, args.storage)
    title = "One recompute per hot key: computations per invalidation with and without leases"
    path = write_report(name, title, note, body, raw)
    print("\n".join(body))
    log(f"report: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rows", type=int, default=1_000_000, help="items, a tenth in the key")
    parser.add_argument("--every", type=float, default=500.0, help="ms between writes")
    parser.add_argument("--phase", type=float, default=10.0, help="seconds per mode per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="tmpfs", help=STORAGE_HELP)
    args = parser.parse_args()
    if args.quick:
        args.phase, args.rounds, args.rows = 3.0, 2, 20_000
    run(args)


if __name__ == "__main__":
    main()

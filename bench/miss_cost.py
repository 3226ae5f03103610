"""What a miss costs the database, against the plain read-only transaction it replaces.

One table ``rows(id, name, price)`` of ``--rows`` rows; each transaction reads one row by
primary key. Four modes, measured in ``--rounds`` interleaved rounds of ``--per-round``
transactions each (the order rotates every round, so a burst of other work on the machine
hits them all alike):

- **plain**: psycopg, ``BEGIN READ ONLY; SELECT …; COMMIT`` — what the application would
  send without txcache;
- **bare**: ``with cache.read_only(): txcache.query_one(…)`` — a query txcache does not cache;
- **miss**: ``with cache.read_only(): get_row(id)``, a ``@cacheable`` function, with an id
  never asked before (a miss: the query, its checks and the ``TXSET``);
- **hit**: the same with an id already cached.

For each: the client's latency (p50, p99) and the database's CPU per transaction — the run
time (``/proc/<pid>/schedstat``, nanoseconds) of every process under the postmaster, less
the background measured with the stack idle beforehand (the agent's pins, the walsender) —
each as a ratio to *plain*.

Then **where a miss's database time goes**: ``pg_stat_statements`` (planning tracked)
reset, ``--split`` misses (and as many plain transactions), and each statement the
database ran at least once per two transactions: calls and execution + planning time per
transaction. This is the database's own accounting of every statement the library sends.

With ``--standby`` the server has a streaming standby the agent pins too, and a fifth mode,
**standby miss**, runs the misses through a cache with ``replicas`` naming it: the
primary's CPU per transaction (the quantity that decides throughput when the primary is
the bottleneck) and the standby's are both reported.

The goals: a miss's database CPU <= 1.0x plain (stretch 0.5x), a bare query's
<= 1.0x; a miss's latency p50 <= 1.5x plain, a bare query's <= 1.2x.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _cpu import ForeignCpu
from _one_row import (
    HOT,
    Bench,
    Series,
    bare_transaction,
    cached_transaction,
    database_run_seconds,
    get_row,
    idle_background,
    one_row_bench,
    one_row_parser,
    plain_transaction,
    standby_transaction,
)
from _report import RESULTS_DIR, log, percentile, ratio, result_name, save_plot, table, write_report

MODES = ("plain", "bare", "miss", "hit")
STANDBY_MISS = "standby miss"
MISSES = ("miss", STANDBY_MISS)


def modes(bench: Bench) -> tuple[str, ...]:
    """The modes measured: with a standby, its misses too."""
    return (*MODES, STANDBY_MISS) if bench.standby is not None else MODES


def run_mode(bench: Bench, mode: str, count: int, series: Series) -> None:
    """``count`` transactions of ``mode``, timed one by one, and the database's run time
    (the standby's too) beyond its idle background."""
    transaction: Callable[[Bench, int], None] = {
        "plain": plain_transaction,
        "bare": bare_transaction,
        "miss": cached_transaction,
        "hit": cached_transaction,
        STANDBY_MISS: standby_transaction,
    }[mode]
    ids = [next(bench.fresh_ids) if mode in MISSES else i % HOT + 1 for i in range(count)]
    standby = database_run_seconds(bench.standby) if bench.standby is not None else 0.0
    started, database = time.perf_counter(), database_run_seconds(bench.server)
    for row_id in ids:
        t0 = time.perf_counter()
        transaction(bench, row_id)
        series.latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    used = database_run_seconds(bench.server) - database - bench.background * elapsed
    series.database_seconds += max(0.0, used)
    if bench.standby is not None:
        used = database_run_seconds(bench.standby) - standby
        series.standby_seconds += max(0.0, used - bench.standby_background * elapsed)
    series.transactions += count


def statement_split(bench: Bench, mode: str, count: int) -> list[dict[str, Any]]:
    """The statements the database ran for ``count`` transactions of ``mode``, by
    ``pg_stat_statements``: those run at least once per two transactions."""
    bench.plain.execute("SELECT pg_stat_statements_reset()")
    bench.plain.commit()
    run_mode(bench, mode, count, Series())
    rows = bench.plain.execute(
        "SELECT query, calls, total_exec_time + total_plan_time FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND calls * 2 >= %s ORDER BY 3 DESC",
        (count,),
    ).fetchall()
    bench.plain.commit()
    return [
        {"statement": " ".join(query.split()), "calls": calls / count, "us": ms * 1000 / count}
        for query, calls, ms in rows
    ]


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """The warm-up, the idle background, the interleaved rounds and the statement split."""
    measured = modes(bench)
    for mode in measured:  # warm every path (connections, plans, the hot ids)
        run_mode(bench, mode, HOT, Series())
    bench.background = idle_background(bench, args.idle)
    log(f"idle background: {bench.background * 1e3:.2f} ms of database time per second")
    series = {mode: Series() for mode in measured}
    foreign = ForeignCpu()
    for r in range(args.rounds):
        order = measured[r % len(measured) :] + measured[: r % len(measured)]
        for mode in order:
            run_mode(bench, mode, args.per_round, series[mode])
        plain = series["plain"].cpu_per_transaction()
        log(f"round {r + 1}/{args.rounds}: plain {plain * 1e6:.0f} µs database per transaction")
    split = {mode: statement_split(bench, mode, args.split) for mode in ("plain", "bare", "miss")}
    stats = get_row.stats.as_dict()
    on_standby = (sum(bench.on_standby), len(bench.on_standby))
    return {
        "series": series,
        "split": split,
        "foreign": foreign.seconds(),
        "stats": stats,
        "on_standby": on_standby,
    }


def summary_rows(series: dict[str, Series], standby: bool) -> list[list[str]]:
    """The mode table: latency and database CPU, each against *plain* (with a standby, the
    standby's CPU too)."""
    base_p50 = statistics.median(series["plain"].latencies)
    base_cpu = series["plain"].cpu_per_transaction()
    rows = []
    for mode, s in series.items():
        p50 = statistics.median(s.latencies)
        cpu = s.cpu_per_transaction()
        row = [
            mode,
            f"{p50 * 1e6:.0f} µs",
            ratio(p50, base_p50),
            f"{percentile(s.latencies, 0.99) * 1e6:.0f} µs",
            f"{cpu * 1e6:.1f} µs",
            ratio(cpu, base_cpu),
        ]
        if standby:
            row.append(f"{s.standby_cpu_per_transaction() * 1e6:.1f} µs")
        rows.append(row)
    return rows


def split_lines(split: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per mode, the statements and their time per transaction."""
    lines = []
    for mode, statements in split.items():
        total = sum(s["us"] for s in statements)
        lines += ["", f"**{mode}**: {total:.0f} µs of statement time per transaction", ""]
        rows = [
            [f"`{s['statement'][:90]}`", f"{s['calls']:.2f}", f"{s['us']:.1f}"] for s in statements
        ]
        lines += table(["statement", "calls per transaction", "µs per transaction"], rows, "lrr")
    return lines


def report_body(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The report's Markdown under its title."""
    header = ["mode", "latency p50", "x plain", "p99", "database CPU per transaction", "x plain"]
    standby = args.standby
    if standby:
        header[4] = "primary CPU per transaction"
        header.append("standby CPU per transaction")
    return [
        f"{args.rounds} interleaved rounds x {args.per_round} transactions per mode; "
        f"one-row primary-key read of a {args.rows:,}-row table; database CPU: run time of "
        f"every process under the postmaster less the idle background "
        f"({results['background'] * 1e3:.2f} ms/s); other processes used "
        f"{results['foreign']:.1f} CPU-seconds meanwhile (read the ratios).",
        "",
        *table(header, summary_rows(results["series"], standby), "lrrrrr" + "r" * standby),
        "",
        "## Where the database time goes (pg_stat_statements, execution + planning)",
        *split_lines(results["split"]),
        "",
        f"The cacheable function's counters: {results['stats']}.",
        *(
            [
                f"Standby misses that ran on the standby: {results['on_standby'][0]} of "
                f"{results['on_standby'][1]} (the others met a pin whose snapshot had just "
                "gone, and ran at the primary's pin of its commit point)."
            ]
            if standby
            else []
        ),
    ]


def plot(results: dict[str, Any], path: Path) -> bool:
    """Database CPU per transaction by mode, and a miss's statements."""

    def draw(axes: list[Any]) -> None:
        series = results["series"]
        cpu = [series[m].cpu_per_transaction() * 1e6 for m in series]
        axes[0].bar(list(series), cpu, color=["#888", "#c84", "#c44", "#4a4", "#48c"][: len(cpu)])
        axes[0].set_ylabel("database CPU per transaction (µs)")
        axes[0].set_title("per mode")
        miss = results["split"]["miss"][:8]
        labels = [s["statement"][:40] for s in miss]
        axes[1].barh(labels[::-1], [s["us"] for s in miss][::-1], color="#c44")
        axes[1].set_xlabel("µs per transaction (pg_stat_statements)")
        axes[1].set_title("a miss's statements")

    return save_plot(path, draw, panels=2)


def run(args: argparse.Namespace) -> None:
    """Start the stack, measure, write the report and the plot."""
    with one_row_bench(args) as bench:
        results = measure(bench, args)
        results["background"] = bench.background
    name = result_name(
        "miss_cost", args.quick, args.storage, *(["standby"] if args.standby else [])
    )
    body = report_body(results, args)
    if plot(results, RESULTS_DIR / f"{name}.png"):
        body += ["", f"![database CPU per mode and a miss's statements]({name}.png)"]
    raw = {
        "modes": {
            mode: {
                "latency_p50_us": statistics.median(s.latencies) * 1e6,
                "latency_p99_us": percentile(s.latencies, 0.99) * 1e6,
                "database_cpu_us": s.cpu_per_transaction() * 1e6,
                "transactions": s.transactions,
            }
            for mode, s in results["series"].items()
        },
        "split": results["split"],
        "background_per_second": results["background"],
        "standby_cpu_us": {
            mode: s.standby_cpu_per_transaction() * 1e6 for mode, s in results["series"].items()
        }
        if args.standby
        else None,
        "foreign_cpu_seconds": results["foreign"],
        "function_stats": results["stats"],
        "standby_misses_on_standby": results["on_standby"],
    }
    path = write_report(name, "What a miss costs the database", bench.note, body, raw)
    print("\n".join(body))
    log(f"report: {path}")


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = one_row_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    parser.add_argument("--per-round", type=int, default=400, help="transactions per mode")
    parser.add_argument("--split", type=int, default=1000, help="transactions per statement split")
    parser.add_argument(
        "--standby",
        action="store_true",
        help="beside a streaming standby the agent pins too: also the misses of a cache with "
        "replicas (the primary's and the standby's CPU)",
    )
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds, args.per_round, args.split, args.idle = 20_000, 2, 100, 200, 1.0
    if args.rounds * args.per_round + args.split + 2 * HOT > args.rows:
        parser.error("--rows must exceed the misses asked for: every miss reads a new row")
    return args


if __name__ == "__main__":
    run(parse_args())

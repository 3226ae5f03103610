"""The break-even hit rate: below which share of hits does txcache add database work?

The one-row read of ``miss_cost.py`` (a primary-key read of a ``--rows``-row table), as a
request stream with a given share of hits: each request is one read-only transaction that
calls the ``@cacheable`` function ``get_row`` — with an id cached beforehand (a hit) or an
id never asked before (a compulsory miss: the query, its checks and the ``TXSET``). The
same ids are also read the way the application would without txcache (psycopg,
``BEGIN READ ONLY; SELECT …; COMMIT``). The hit rate is swept over ``--hit-rates``; at each
point both streams run ``--per-point`` requests, side by side (which goes first alternates by
round), in ``--rounds`` rounds whose order rotates, over a table prewarmed into shared
buffers, and the database CPU per request of each is measured (the run time of every
process under the postmaster, less the idle background measured beforehand).

The break-even hit rate is where txcache's database CPU per request meets the plain one's
(interpolated between the sweep's points; 0 % when even a stream of misses costs the
database no more than the plain reads). The goal: <= 10 %.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _cpu import ForeignCpu
from _one_row import (
    HOT,
    Bench,
    cached_transaction,
    database_run_seconds,
    idle_background,
    one_row_bench,
    one_row_parser,
    plain_transaction,
)
from _report import RESULTS_DIR, log, ratio, result_name, save_plot, table, write_report

HIT_RATES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)


@dataclass
class Point:
    """One hit rate's measurements over every round."""

    hit_rate: float
    database_s: dict[str, float] = field(default_factory=lambda: {"plain": 0.0, "txcache": 0.0})
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"plain": [], "txcache": []})
    requests: int = 0
    hits: int = 0

    def cpu_per_request(self, stream: str) -> float:
        """Database seconds per request of ``stream``."""
        return self.database_s[stream] / max(1, self.requests)


def request_ids(bench: Bench, hit_rate: float, count: int, rng: random.Random) -> list[int]:
    """``count`` ids: ``hit_rate`` of them cached ones, the rest never asked before."""
    hits = round(hit_rate * count)
    ids = [rng.randrange(HOT) + 1 for _ in range(hits)]
    ids += [next(bench.fresh_ids) for _ in range(count - hits)]
    rng.shuffle(ids)
    return ids


def timed_stream(
    bench: Bench, transaction: Callable[[Bench, int], None], ids: list[int]
) -> tuple[float, list[float]]:
    """Run ``transaction`` for every id; the database's run time beyond its background and
    each request's latency."""
    latencies = []
    started, database = time.perf_counter(), database_run_seconds(bench.server)
    for row_id in ids:
        t0 = time.perf_counter()
        transaction(bench, row_id)
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    used = database_run_seconds(bench.server) - database - bench.background * elapsed
    return max(0.0, used), latencies


STREAMS = (("txcache", cached_transaction), ("plain", plain_transaction))


def measure_point(
    bench: Bench, point: Point, count: int, rng: random.Random, *, plain_first: bool
) -> None:
    """``count`` requests at ``point``'s hit rate through txcache and the same ids plain,
    in the order given (alternated by round, so that neither always runs second)."""
    ids = request_ids(bench, point.hit_rate, count, rng)
    for stream, transaction in STREAMS[::-1] if plain_first else STREAMS:
        used, latencies = timed_stream(bench, transaction, ids)
        point.database_s[stream] += used
        point.latencies[stream] += latencies
    point.requests += count
    point.hits += sum(1 for i in ids if i <= HOT)


def break_even(points: list[Point]) -> float | None:
    """The lowest hit rate from which txcache costs the database no more than plain
    (interpolated); ``None`` when it costs more even at the highest rate measured."""
    excess = [
        (p.hit_rate, p.cpu_per_request("txcache") - p.cpu_per_request("plain")) for p in points
    ]
    if excess[0][1] <= 0:
        return excess[0][0]
    for (rate_a, a), (rate_b, b) in itertools.pairwise(excess):
        if b <= 0:
            return rate_a + (rate_b - rate_a) * a / (a - b)
    return None


def measure(bench: Bench, args: argparse.Namespace) -> list[Point]:
    """Warm up, measure the idle background, then the rounds over every hit rate."""
    rng = random.Random(args.seed)
    for row_id in range(1, HOT + 1):  # the cached ids, and every path's connections
        cached_transaction(bench, row_id)
        plain_transaction(bench, row_id)
    bench.background = idle_background(bench, args.idle)
    points = [Point(rate) for rate in args.hit_rates]
    for r in range(args.rounds):
        shift = r % len(points)
        for point in points[shift:] + points[:shift]:
            measure_point(bench, point, args.per_point, rng, plain_first=r % 2 == 1)
        log(f"round {r + 1}/{args.rounds} done")
    return points


def summary_rows(points: list[Point]) -> list[list[str]]:
    """Per hit rate: each stream's database CPU per request, their ratio, the latencies."""
    rows = []
    for p in points:
        plain, cached = p.cpu_per_request("plain"), p.cpu_per_request("txcache")
        rows.append(
            [
                f"{p.hits / max(1, p.requests):.0%}",
                f"{plain * 1e6:.1f} µs",
                f"{cached * 1e6:.1f} µs",
                ratio(cached, plain),
                f"{statistics.median(p.latencies['plain']) * 1e6:.0f} µs",
                f"{statistics.median(p.latencies['txcache']) * 1e6:.0f} µs",
            ]
        )
    return rows


def verdict(points: list[Point]) -> str:
    """The break-even hit rate in words."""
    rate = break_even(points)
    if rate is None:
        return "**txcache costs the database more than plain reads at every hit rate measured.**"
    if rate <= points[0].hit_rate:
        return (
            f"**Break-even hit rate: {rate:.0%}** — even at {points[0].hit_rate:.0%} hits "
            "txcache costs the database no more than the plain reads it replaces."
        )
    return f"**Break-even hit rate: {rate:.1%}** (interpolated between the points measured)."


def plot(points: list[Point], path: Path) -> bool:
    """Database CPU per request against the hit rate, with and without txcache."""

    def draw(axes: list[Any]) -> None:
        rates = [p.hit_rate * 100 for p in points]
        for stream, color in (("plain", "#888"), ("txcache", "#c44")):
            cpu = [p.cpu_per_request(stream) * 1e6 for p in points]
            axes[0].plot(rates, cpu, marker="o", color=color, label=stream)
        rate = break_even(points)
        if rate is not None:
            axes[0].axvline(rate * 100, color="#4a4", linestyle="--", label="break-even")
        axes[0].set_xlabel("hit rate (%)")
        axes[0].set_ylabel("database CPU per request (µs)")
        axes[0].set_ylim(bottom=0)
        axes[0].legend()

    return save_plot(path, draw, panels=1)


def run(args: argparse.Namespace) -> None:
    """Start the stack, sweep, write the report and the plot."""
    with one_row_bench(args) as bench:
        foreign = ForeignCpu()
        points = measure(bench, args)
        note, background, other = bench.note, bench.background, foreign.seconds()
    name = result_name("break_even", args.quick, args.storage)
    header = ["hit rate", "plain", "txcache", "x plain", "plain p50", "txcache p50"]
    body = [
        f"{args.rounds} rounds x {args.per_point} requests per hit rate and stream; one-row "
        f"primary-key read of a {args.rows:,}-row table; database CPU per request: run time "
        "of every process under the postmaster less the idle background "
        f"({background * 1e3:.2f} ms/s); other processes used {other:.1f} CPU-seconds "
        "meanwhile (read the ratios).",
        "",
        verdict(points),
        "",
        *table(header, summary_rows(points), "rrrrrr"),
    ]
    if plot(points, RESULTS_DIR / f"{name}.png"):
        body += ["", f"![database CPU per request by hit rate]({name}.png)"]
    raw = {
        "break_even": break_even(points),
        "points": [
            {
                "hit_rate": p.hits / max(1, p.requests),
                "requests": p.requests,
                "plain_cpu_us": p.cpu_per_request("plain") * 1e6,
                "txcache_cpu_us": p.cpu_per_request("txcache") * 1e6,
            }
            for p in points
        ],
        "background_per_second": background,
        "foreign_cpu_seconds": other,
    }
    path = write_report(name, "The break-even hit rate", note, body, raw)
    print("\n".join(body))
    log(f"report: {path}")


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = one_row_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds over every hit rate")
    parser.add_argument("--per-point", type=int, default=300, help="requests per hit rate")
    parser.add_argument(
        "--hit-rates",
        type=lambda text: [float(v) for v in text.split(",")],
        default=list(HIT_RATES),
        help="comma-separated shares of hits, ascending",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds, args.per_point, args.idle = 20_000, 1, 60, 1.0
    misses = sum(1 - rate for rate in args.hit_rates) * args.rounds * args.per_point
    if misses + 2 * HOT > args.rows:
        parser.error("--rows must exceed the misses asked for: every miss reads a new row")
    return args


if __name__ == "__main__":
    run(parse_args())

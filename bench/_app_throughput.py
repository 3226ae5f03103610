"""What the example apps' throughput benchmarks share (``fastapi_throughput.py``,
``django_throughput.py``): an app served twice side by side on one stack, once as it ships
(``TXCACHE_MODE=consistent``) and once with ``TXCACHE_MODE=bypass``, the library's mode in
which every call runs against PostgreSQL (no cache at all) — the same code, the same
requests.

Both apps are shops of one shape — items in categories, orders of them by customers — so
the catalogue is here too (:class:`Catalogue`: its sizes, its rows, the keys' popularity),
as are the options both take, the servers of both modes, one closed-loop run against
either with the CPU time of every component (:class:`Bench`), the warm-up and the
interleaved rounds (:func:`measure`), and the report's results — totals, ratios round by
round and over all rounds, tables, the plot (:func:`results`). Each script keeps its
tables, its pages and their mix, how its app is started, and the report's description of
all three.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from _common import STORAGE_HELP, agent_pid, node_counts, node_pid
from _cpu import ForeignCpu, cpu_seconds, database_cpu_seconds
from _http_load import RequestMix, drive, zipf_keys
from _report import (
    RESULTS_DIR,
    fmt,
    log,
    machine_lines,
    num,
    save_plot,
    table,
    write_markdown,
    write_report,
)

from txcache.stack import Stack

__all__ = [
    "COMPONENTS",
    "FULL",
    "MODES",
    "QUICK",
    "App",
    "Bench",
    "Catalogue",
    "application",
    "backend_cpu",
    "measure",
    "method_lines",
    "options",
    "per_round_ratios",
    "plot",
    "render",
    "results",
    "servers",
    "spread",
    "totals",
    "write",
]

Markdown = Callable[[Mapping[str, Any], str, bool], list[str]]
"""A script's report body, ``markdown(raw, name, plotted)``: from its raw results, the
report's name and whether the plot was drawn."""


# -- the catalogue ---------------------------------------------------------------------------

ItemRow = tuple[str, str, int, int]
"""An item: name, category, price in cents, stock."""

OrderRow = tuple[str, int, int, int]
"""An order: customer, item id, quantity, total in cents."""

KeyDraw = Callable[[random.Random], str]
"""A key of a page's path, drawn with the client's RNG."""


@dataclass(frozen=True)
class Catalogue:
    """How much a shop's database holds: items (the FastAPI example's products) spread
    evenly over categories, orders of them over customers."""

    items: int
    categories: int
    customers: int
    orders: int

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Catalogue:
        """The catalogue of a run's raw results."""
        sizes = dict(raw["catalogue"])
        if "products" in sizes:  # fastapi_throughput.py's, from before this class was shared
            sizes["items"] = sizes.pop("products")
        return cls(**sizes)

    @staticmethod
    def category(index: int) -> str:
        """The name of category ``index`` (from 0)."""
        return f"category{index:03d}"

    @staticmethod
    def customer(index: int) -> str:
        """The name of customer ``index`` (from 0)."""
        return f"customer{index:04d}"

    def rows(self, seed: int, name: str) -> tuple[list[ItemRow], list[OrderRow]]:
        """The items, named ``f"{name} {id}"`` and taking the categories in turn, with
        random prices and stock; and the orders, each of a random item by a random
        customer. Ids count from 1 in order."""
        rng = random.Random(seed)
        prices = [rng.randrange(500, 100_000) for _ in range(self.items)]
        items = [
            (
                f"{name} {index + 1}",
                self.category(index % self.categories),
                price,
                rng.randrange(1, 1000),
            )
            for index, price in enumerate(prices)
        ]
        orders = []
        for _ in range(self.orders):
            item, quantity = rng.randrange(self.items), rng.randrange(1, 4)
            customer = self.customer(rng.randrange(self.customers))
            orders.append((customer, item + 1, quantity, quantity * prices[item]))
        return items, orders

    def popularity(self, exponent: float, seed: int) -> tuple[KeyDraw, KeyDraw, KeyDraw]:
        """Draws of an item's id, a category's name and a customer's name, each by
        Zipf(``exponent``) popularity over a fixed random order (the popular items are
        spread over categories)."""
        shuffle = random.Random(seed)
        item = zipf_keys(self.items, exponent, shuffle)
        category = zipf_keys(self.categories, exponent, shuffle)
        customer = zipf_keys(self.customers, exponent, shuffle)
        return (
            lambda rng: str(item(rng) + 1),
            lambda rng: self.category(category(rng)),
            lambda rng: self.customer(customer(rng)),
        )


FULL = Catalogue(items=10_000, categories=200, customers=2_000, orders=20_000)
QUICK = Catalogue(items=2_000, categories=40, customers=400, orders=4_000)

# -- the modes and their servers -------------------------------------------------------------

MODES = ("consistent", "bypass")
"""The library's modes the app runs in: the shipped one, and no cache at all."""

COMPONENTS = ("database", "app backends", "app", "node", "agent", "load generator")
"""CPU columns: the whole database server (postmaster and every child, live or exited: the
app's backends, the agent's pin sessions, the walsender, the checkpointer...), the app's own
backends alone (of which the first is a superset), the app's server processes, the node,
the agent, and this process (the load generator)."""


def options(description: str, quick: str) -> argparse.ArgumentParser:
    """The options both benchmarks take (``quick``: what ``--quick`` cuts, for its help);
    a script adds its own."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=16, help="clients (default 16)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per mode (default 6)")
    parser.add_argument("--seconds", type=float, default=20.0, help="per round (default 20)")
    parser.add_argument("--warmup", type=float, default=15.0, help="per mode (default 15)")
    parser.add_argument("--zipf", type=float, default=1.0, help="key skew (default 1.0)")
    parser.add_argument("--staleness", type=float, default=5.0, help="SHOP_STALENESS (5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    parser.add_argument("--quick", action="store_true", help=f"a smoke run (~35 s): {quick}")
    parser.add_argument(
        "--render", type=Path, help="rewrite the report of results/X.json, measuring nothing"
    )
    return parser


def application(mode: str) -> str:
    """The ``application_name`` of the ``mode`` server's database connections, by which its
    backends are told apart."""
    return f"shop {mode}"


Server = TypeVar("Server")


@contextmanager
def servers(
    start: Callable[[str, Path], AbstractContextManager[Server]],
) -> Iterator[dict[str, Server]]:
    """One server per mode, ``start(mode, log)`` one after the other, stopped on exit;
    their logs are kept only while they run."""
    with (
        tempfile.TemporaryDirectory(prefix="txcache-bench-app-") as scratch,
        ExitStack() as on_exit,
    ):
        yield {
            mode: on_exit.enter_context(start(mode, Path(scratch) / f"{mode}.log"))
            for mode in MODES
        }


@dataclass(frozen=True)
class App:
    """One mode's server, as a run sees it: where it answers, and the processes that run
    the app (whose CPU is the *app* column; its database connections are told by
    :func:`application`)."""

    url: str
    pids: tuple[int, ...]


def backend_cpu(admin: psycopg.Connection[Any], name: str) -> dict[int, float]:
    """CPU seconds so far of each live backend whose ``application_name`` is ``name`` (an
    app's pooled connections: they live through the run, so the difference of two readings
    is what they did in between)."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
    ).fetchall()
    seconds = {}
    for (pid,) in rows:
        with suppress(FileNotFoundError, ProcessLookupError):  # a backend that just exited
            seconds[pid] = cpu_seconds(pid)
    return seconds


@dataclass
class Bench:
    """What every run uses: the database server, the stack, an admin connection to the
    database, each mode's app, the request mix and the clients."""

    server: Any
    stack: Stack
    admin: psycopg.Connection[Any]
    apps: Mapping[str, App]
    mix: RequestMix
    concurrency: int

    def cpu(self, mode: str) -> dict[str, Any]:
        """CPU seconds so far of each component (the app backends' per backend)."""
        return {
            "database": database_cpu_seconds(self.server),
            "app backends": backend_cpu(self.admin, application(mode)),
            "app": sum(cpu_seconds(pid) for pid in self.apps[mode].pids),
            "node": cpu_seconds(node_pid(self.stack)),
            "agent": cpu_seconds(agent_pid(self.stack)),
            "load generator": cpu_seconds(os.getpid()),
        }

    def run(self, mode: str, seconds: float, seed: str) -> dict[str, Any]:
        """One closed-loop run against ``mode``'s server; its row of raw results."""
        url, node = self.apps[mode].url, self.stack.node_addresses[0]
        counts, before, foreign = node_counts(node), self.cpu(mode), ForeignCpu()
        load = asyncio.run(drive(url, self.mix, seconds, self.concurrency, seed))
        other, after, counts_after = foreign.seconds(), self.cpu(mode), node_counts(node)
        cpu = {name: after[name] - before[name] for name in COMPONENTS if name != "app backends"}
        backends_before = before["app backends"]
        cpu["app backends"] = sum(
            spent - backends_before.get(pid, 0.0) for pid, spent in after["app backends"].items()
        )
        lookups = {key: counts_after[key] - counts[key] for key in counts}
        looked_up = sum(lookups.values())
        return {
            "mode": mode,
            **load.summary(),
            "node": lookups,
            "hit_rate": lookups["hits"] / looked_up if looked_up else float("nan"),
            "cpu_s": {name: round(cpu[name], 3) for name in COMPONENTS},
            "other_work_cpu_s": round(other, 2),
        }


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Warm each server up, then the interleaved rounds (:func:`options`' settings); the raw
    results."""
    for mode in MODES:
        log(f"{mode}: warming up {args.warmup:g} s")
        bench.run(mode, args.warmup, f"warm-up {args.seed}")
    rounds = []
    for number in range(args.rounds):
        # Flipped every round: a drift of the machine (other work, a checkpoint) then
        # lands on both modes alike instead of always on the second one.
        order = MODES if number % 2 == 0 else MODES[::-1]
        rows = {}
        for mode in order:
            rows[mode] = bench.run(mode, args.seconds, f"{args.seed}/{number}")
            row = rows[mode]
            log(
                f"round {number + 1}/{args.rounds} {mode}: {num(row['throughput'])} req/s, "
                f"p50 {fmt(row['p50_ms'])} ms, database {fmt(row['cpu_s']['database'], 1)} s, "
                f"other work {fmt(row['other_work_cpu_s'], 1)} s"
            )
        rounds.append({"order": list(order), **rows})
    return {"rounds": rounds}


# -- the report ----------------------------------------------------------------------------


def totals(rounds: Sequence[Mapping[str, Any]], mode: str) -> dict[str, Any]:
    """``mode``'s rows summed over the rounds: requests/s over the whole measured time,
    CPU per request over all requests, the hit rate over all lookups."""
    rows = [entry[mode] for entry in rounds]
    requests = sum(row["requests"] for row in rows)
    seconds = sum(row["seconds"] for row in rows)
    cpu = {name: sum(row["cpu_s"][name] for row in rows) for name in COMPONENTS}
    hits = sum(row["node"]["hits"] for row in rows)
    lookups = sum(sum(row["node"].values()) for row in rows)
    errors = sum(n for row in rows for code, n in row["statuses"].items() if code != "200")
    return {
        "requests": requests,
        "throughput": requests / seconds,
        "cpu_ms_per_request": {name: cpu[name] / requests * 1e3 for name in COMPONENTS},
        "cpu_s": cpu,
        "other_work_cpu_s": sum(row["other_work_cpu_s"] for row in rows),
        "seconds": seconds,
        "hit_rate": hits / lookups if lookups else float("nan"),
        "p50_ms": statistics.median(row["p50_ms"] for row in rows),
        "p99_ms": statistics.median(row["p99_ms"] for row in rows),
        "errors": errors,
    }


def per_round_ratios(rounds: Sequence[Mapping[str, Any]], value: str) -> list[float]:
    """consistent / bypass of ``value`` (``throughput``, or a CPU column per request),
    round by round."""

    def of(row: Mapping[str, Any]) -> float:
        if value == "throughput":
            return float(row["throughput"])
        return float(row["cpu_s"][value]) / float(row["requests"])

    return [of(entry["consistent"]) / of(entry["bypass"]) for entry in rounds]


def spread(values: Sequence[float]) -> str:
    """Median and range of per-round ratios."""
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}x)"


def plot(rounds: Sequence[Mapping[str, Any]], path: Path) -> bool:
    """Requests/s and database CPU per request of each mode, round by round."""

    def draw(axes: list[Any]) -> None:
        numbers = range(1, len(rounds) + 1)
        for mode in MODES:
            rows = [entry[mode] for entry in rounds]
            axes[0].plot(numbers, [row["throughput"] for row in rows], "o-", label=mode)
            per_request = [row["cpu_s"]["database"] / row["requests"] * 1e3 for row in rows]
            axes[1].plot(numbers, per_request, "o-", label=mode)
        axes[0].set(title="GET throughput", ylabel="requests/s")
        axes[1].set(title="database CPU per request", ylabel="ms")
        for axis in axes:
            axis.set(xlabel="round", xticks=list(numbers), ylim=(0, None))
            axis.legend()
            axis.grid(alpha=0.3)

    return save_plot(path, draw, panels=2)


def method_lines(settings: Mapping[str, Any], mix: str) -> list[str]:
    """The report's bullets on how both modes were driven and measured, for ``settings``
    (:func:`options`' values) and the request mix described by ``mix``."""
    cpus = os.cpu_count() or 1
    return [
        f"- load: a closed loop of {settings['concurrency']} clients (keep-alive connections "
        "of a minimal HTTP/1.1 client on asyncio streams: httpx costs more CPU per request "
        f"than the app), GETs only: {mix}",
        f"- {settings['warmup']:g} s unmeasured warm-up per mode, then {settings['rounds']} "
        f"rounds of {settings['seconds']:g} s per mode, the order flipped every round",
        f"- the load generator runs in the benchmark's process and shares the machine's "
        f"{cpus} CPUs with PostgreSQL, both apps, the node and the agent (nothing pinned, as "
        "in `rubis_throughput.py`): its CPU is a column below. So is *other work* (the "
        "machine's processes that are not this benchmark's); ratios come from runs seconds "
        "apart, so noise that lasts falls on both modes",
        "- *database*: CPU of every PostgreSQL process (the app's backends, the agent's pin "
        "sessions, the walsender, the checkpointer); *app backends*: the app's own "
        "connections alone (`application_name`)",
    ]


Rounds = Sequence[Mapping[str, Any]]
"""A run's rounds: each mode's row of raw results (:meth:`Bench.run`) and their ``order``."""

Totals = Mapping[str, Mapping[str, Any]]
"""Each mode's :func:`totals`."""


def results(rounds: Rounds, name: str, plotted: bool, app: str) -> list[str]:
    """The report's results, from ``## Results`` on: both modes' totals and their ratios,
    CPU seconds by component, latency by endpoint, every round; ``app`` says what the app's
    server processes are (e.g. ``one worker, one event loop: at most one CPU``)."""
    total = {mode: totals(rounds, mode) for mode in MODES}
    plot_lines = [f"![throughput and database CPU per round]({name}.png)", ""] if plotted else []
    return [
        "## Results",
        "",
        *_totals_table(total),
        "",
        *_ratios_text(rounds, total),
        *_machine_text(total, app),
        *plot_lines,
        *_cpu_table(total),
        "",
        *_endpoint_table(rounds),
        "",
        *_rounds_table(rounds),
        "",
        "GETs only: nothing invalidates, so every miss is a first read of its key (compulsory); "
        "the hit rate rises round by round as the Zipf tail gets cached.",
    ]


def _hit_rate(mode: str, row: Mapping[str, Any]) -> str:
    """A row's hit rate as the tables show it (``-`` without the cache)."""
    return "-" if mode == "bypass" else f"{fmt(row['hit_rate'] * 100, 1)} %"


def _totals_table(total: Totals) -> list[str]:
    """Both modes over all rounds: throughput, latency, hit rate, CPU per request, errors."""
    header = ["", "req/s", "p50 ms", "p99 ms", "hit rate", "database ms/req"]
    header += ["app backends ms/req", "app ms/req", "non-200"]
    rows = []
    for mode in MODES:
        row, per = total[mode], total[mode]["cpu_ms_per_request"]
        rows.append(
            [
                f"{'with' if mode == 'consistent' else 'without'} txcache (`{mode}`)",
                *(num(row["throughput"]), fmt(row["p50_ms"]), fmt(row["p99_ms"])),
                _hit_rate(mode, row),
                *(fmt(per[column], 3) for column in ("database", "app backends", "app")),
                row["errors"],
            ]
        )
    return table(header, rows, "lrrrrrrrr")


def _ratios_text(rounds: Rounds, total: Totals) -> list[str]:
    """What the totals mean, and the ratios with txcache / without, over all rounds and
    round by round."""
    cached, bare = total["consistent"], total["bypass"]
    keys = ("throughput", "database", "app backends", "app")
    ratios = {key: per_round_ratios(rounds, key) for key in keys}
    db_cached, db_bare = (row["cpu_ms_per_request"]["database"] for row in (cached, bare))
    return [
        "Requests/s over all measured rounds; p50 and p99 the median of the rounds'; CPU per "
        "request over all rounds' requests; hit rate: the node's hits over its lookups (the "
        "cached reads' calls).",
        "",
        "Ratios, with txcache / without (over all rounds; per round: median and range):",
        "",
        f"- **throughput: {cached['throughput'] / bare['throughput']:.2f}x** "
        f"(per round {spread(ratios['throughput'])})",
        f"- **database CPU per request: {db_cached / db_bare:.2f}x** (per round "
        f"{spread(ratios['database'])}): {fmt(db_bare / db_cached, 1)} times less",
        f"- the app's backends' CPU per request: "
        f"{spread(ratios['app backends'])}; the app's own CPU per request: "
        f"{spread(ratios['app'])}",
        f"- latency p50: {cached['p50_ms'] / bare['p50_ms']:.2f}x, p99: "
        f"{cached['p99_ms'] / bare['p99_ms']:.2f}x",
        "",
    ]


def _machine_text(total: Totals, app: str) -> list[str]:
    """How busy the app's server was in each mode, and how much else the machine ran."""
    cpus = os.cpu_count() or 1
    busy = " and ".join(
        f"{_share(total, mode, total[mode]['cpu_s']['app'])} % of a CPU ({mode})" for mode in MODES
    )
    other = " and ".join(
        f"{_share(total, mode, total[mode]['other_work_cpu_s'], cpus)} % ({mode})" for mode in MODES
    )
    return [
        f"The app's server ({app}) was busy {busy}; what it did not get went to the other "
        "processes on the machine. It is the bottleneck in both modes, so the throughput "
        "ratio follows the inverse of its CPU per request.",
        "",
        f"Other work (processes that are not this benchmark's) used {other} of the machine's "
        "CPU time: the absolute numbers are those of a machine shared with it; the ratios, "
        "from runs seconds apart, are what this measures.",
        "",
    ]


def _share(total: Totals, mode: str, cpu_s: float, cpus: int = 1) -> str:
    """``cpu_s`` as a percentage of ``cpus`` CPUs over ``mode``'s measured time."""
    return fmt(cpu_s / (total[mode]["seconds"] * cpus) * 100, 0)


def _cpu_table(total: Totals) -> list[str]:
    """CPU seconds of every component per mode, over all rounds."""
    cpus, seconds = os.cpu_count() or 1, total["consistent"]["seconds"]
    rows = [
        [
            mode,
            *(fmt(total[mode]["cpu_s"][component], 1) for component in COMPONENTS),
            fmt(total[mode]["other_work_cpu_s"], 1),
        ]
        for mode in MODES
    ]
    return [
        "### CPU seconds per mode, all rounds",
        "",
        f"{fmt(seconds, 0)} s measured per mode: "
        f"{fmt(seconds * cpus, 0)} CPU-seconds of the machine's {cpus} CPUs.",
        "",
        *table(["", *COMPONENTS, "other work"], rows, "l" + "r" * (len(COMPONENTS) + 1)),
    ]


def _endpoint_table(rounds: Rounds) -> list[str]:
    """Each endpoint's latency per mode: the median of the rounds' p50 and p99."""
    rows = []
    for kind in rounds[0][MODES[0]]["latency_by_endpoint"]:
        cells = []
        for mode in MODES:
            per_round = [entry[mode]["latency_by_endpoint"][kind] for entry in rounds]
            cells += [
                fmt(statistics.median(row["p50_ms"] for row in per_round)),
                fmt(statistics.median(row["p99_ms"] for row in per_round)),
            ]
        rows.append([kind, *cells])
    header = ["endpoint", "consistent p50", "consistent p99", "bypass p50", "bypass p99"]
    return [
        "### Latency by endpoint (median of the rounds' p50 and p99, ms)",
        "",
        *table(header, rows, "lrrrr"),
    ]


def _rounds_table(rounds: Rounds) -> list[str]:
    """Every round's row of each mode, in the order they ran."""
    rows = [
        _round_row(number, mode, entry[mode])
        for number, entry in enumerate(rounds, 1)
        for mode in entry["order"]
    ]
    header = ["round", "mode", "req/s", "p50 ms", "p99 ms", "hit rate", "database ms/req"]
    header += ["app ms/req", "load generator s", "other work s"]
    return ["### Every round", "", *table(header, rows, "rlrrrrrrrr")]


def _round_row(number: int, mode: str, row: Mapping[str, Any]) -> list[Any]:
    """One mode's row of one round."""
    per = {key: row["cpu_s"][key] / row["requests"] * 1e3 for key in COMPONENTS}
    return [
        number,
        mode,
        num(row["throughput"]),
        fmt(row["p50_ms"]),
        fmt(row["p99_ms"]),
        _hit_rate(mode, row),
        fmt(per["database"], 3),
        fmt(per["app"], 3),
        fmt(row["cpu_s"]["load generator"], 1),
        fmt(row["other_work_cpu_s"], 1),
    ]


def write(
    raw: Mapping[str, Any], name: str, title: str, note: Mapping[str, Any], markdown: Markdown
) -> Path:
    """Write the plot, ``results/<name>.md`` (``title``, the machine ``note``, the body) and
    ``results/<name>.json`` (``raw``); the report's path."""
    plotted = plot(raw["rounds"], RESULTS_DIR / f"{name}.png")
    return write_report(name, title, note, markdown(raw, name, plotted), raw)


def render(raw_path: Path, title: str, markdown: Markdown) -> None:
    """Rewrite a run's report (``title``, the body ``markdown(raw, name, plotted)``) and
    plot from its raw results (``results/<name>.json``), for a report whose text changed
    after the run."""
    raw = json.loads(raw_path.read_text())
    name = raw_path.stem
    plotted = plot(raw["rounds"], raw_path.with_suffix(".png"))
    top = [f"# {title}", "", f"- command: `{raw['command']}`", *machine_lines(raw["machine"])]
    path = write_markdown(name, [*top, "", *markdown(raw, name, plotted)])
    log(f"wrote {path}")

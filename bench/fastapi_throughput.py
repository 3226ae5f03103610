"""The FastAPI example's GET throughput with txcache and without, and the database CPU per
request of each (issue 21).

One stack (embedded PostgreSQL, one node, the agent) on a seeded catalogue, and the example
app (``examples/fastapi_shop``) under uvicorn twice, side by side: once as it ships
(``TXCACHE_MODE=consistent``) and once with ``TXCACHE_MODE=bypass``, the library's mode in
which every call runs against PostgreSQL (no cache at all) — the same code, the same
sessions, the same read-only transaction per GET. Each server is one uvicorn worker (one
process, one event loop), as the example's README starts it.

A closed loop of ``--concurrency`` clients (keep-alive connections of a minimal HTTP/1.1
client, :class:`Connection`, in this process) sends a fixed mix of the example's read
endpoints with Zipf-distributed keys (:data:`MIX`). After an unmeasured
warm-up of each server, rounds alternate between them (the order flips every round, so
drift falls on both alike); each round gives requests/s, latency, and the CPU time of the
database server (all its processes, and the app's own backends alone), the app's process,
the node, the agent, the load generator and the machine's other work. Ratios are taken
round by round (the two runs seconds apart) and over all rounds.

    .venv/bin/python bench/fastapi_throughput.py [--quick] [--storage disk|tmpfs]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy
from _common import (
    STORAGE_HELP,
    agent_pid,
    bench_stack,
    create_database,
    database_note,
    execute,
    node_counts,
    node_pid,
    postgres,
)
from _cpu import ForeignCpu, cpu_seconds, database_cpu_seconds
from _report import (
    REPO,
    RESULTS_DIR,
    fmt,
    log,
    machine_lines,
    machine_note,
    num,
    percentile,
    quantiles,
    result_name,
    save_plot,
    table,
    write_markdown,
    write_report,
)
from psycopg.conninfo import make_conninfo

from txcache.stack import Stack

EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))  # the example's package: its server and its models
from fastapi_shop.server import ShopServer  # noqa: E402

MODES = ("consistent", "bypass")
"""The library's modes the app runs in: the shipped one, and no cache at all."""

MIX = {"product": 60, "category": 15, "customer orders": 15, "order": 10}
"""Percent of requests per read endpoint: ``GET /products/{id}``,
``/categories/{c}/products``, ``/customers/{c}/orders`` (the three cached functions) and
``/orders/{id}`` (a query of the request's session, never cached: the app's one uncached
read, so even a perfect cache leaves a tenth of the GETs to PostgreSQL)."""

COMPONENTS = ("database", "app backends", "app", "node", "agent", "load generator")
"""CPU columns: the whole database server (postmaster and every child, live or exited: the
app's backends, the agent's pin sessions, the walsender, the checkpointer...), the app's own
backends alone (of which the first is a superset), the app's uvicorn process, the node, the
agent, and this process (the load generator)."""


@dataclass(frozen=True)
class Catalogue:
    """How much the database holds: products spread evenly over categories, orders over
    customers."""

    products: int
    categories: int
    customers: int
    orders: int


FULL = Catalogue(products=10_000, categories=200, customers=2_000, orders=20_000)
QUICK = Catalogue(products=2_000, categories=40, customers=400, orders=4_000)


# -- the database --------------------------------------------------------------------------


def category_name(index: int) -> str:
    """The name of category ``index`` (from 0)."""
    return f"category{index:03d}"


def customer_name(index: int) -> str:
    """The name of customer ``index`` (from 0)."""
    return f"customer{index:04d}"


def seed_catalogue(dsn: str, catalogue: Catalogue, seed: int) -> None:
    """Create the example's tables from its own models and fill them (ids from 1, in
    insertion order), on a running stack as the example's README has it (``txcache up``,
    then the app creates its tables): the app then finds a catalogue and does not seed its
    five products."""
    from fastapi_shop.models import Base

    engine = sqlalchemy.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    Base.metadata.create_all(engine)
    engine.dispose()
    rng = random.Random(seed)
    prices = [rng.randrange(500, 100_000) for _ in range(catalogue.products)]
    with psycopg.connect(dsn) as db, db.cursor() as cursor:
        columns = "products (name, category, price_cents, stock)"
        with cursor.copy(f"COPY {columns} FROM STDIN") as copy:
            for index, price in enumerate(prices):
                category = category_name(index % catalogue.categories)
                copy.write_row((f"product {index + 1}", category, price, rng.randrange(1, 1000)))
        columns = "orders (customer, product_id, quantity, total_cents)"
        with cursor.copy(f"COPY {columns} FROM STDIN") as copy:
            for _ in range(catalogue.orders):
                product, quantity = rng.randrange(catalogue.products), rng.randrange(1, 4)
                customer = customer_name(rng.randrange(catalogue.customers))
                copy.write_row((customer, product + 1, quantity, quantity * prices[product]))
    execute(dsn, "ANALYZE")


def backend_cpu(admin: psycopg.Connection[Any], application: str) -> dict[int, float]:
    """CPU seconds so far of each live backend whose ``application_name`` is
    ``application`` (the app's pooled connections: they live through the run, so the
    difference of two readings is what they did in between)."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application,)
    ).fetchall()
    seconds = {}
    for (pid,) in rows:
        with suppress(FileNotFoundError, ProcessLookupError):  # a backend that just exited
            seconds[pid] = cpu_seconds(pid)
    return seconds


# -- the app -------------------------------------------------------------------------------


@contextmanager
def shop_servers(stack: Stack, staleness: float) -> Iterator[dict[str, ShopServer]]:
    """One server per mode, started one after the other (each runs the app's ``prepare``
    at start), stopped on exit; their logs are kept only while they run. Each one's
    database connections are named ``shop <mode>`` (``application_name``), so that their
    backends can be told apart."""
    with tempfile.TemporaryDirectory(prefix="txcache-bench-shop-") as scratch:
        servers: dict[str, ShopServer] = {}
        try:
            for mode in MODES:
                dsn = make_conninfo(stack.dsn, application_name=application(mode))
                environment = {"TXCACHE_DSN": dsn, "TXCACHE_MODE": mode}
                log = Path(scratch) / f"uvicorn-{mode}.log"
                servers[mode] = ShopServer(stack, log, staleness=staleness, environment=environment)
            yield servers
        finally:
            for server in servers.values():
                server.stop()


def application(mode: str) -> str:
    """The ``application_name`` of the ``mode`` server's database connections."""
    return f"shop {mode}"


# -- the load ------------------------------------------------------------------------------


def zipf_weights(count: int, exponent: float) -> list[float]:
    """Cumulative weights of ranks 1..``count`` under Zipf(``exponent``), for
    ``random.choices``."""
    return list(itertools.accumulate(1 / rank**exponent for rank in range(1, count + 1)))


class RequestMix:
    """Which GET to send next: an endpoint by :data:`MIX`, then its key — products,
    categories and customers by Zipf popularity over a fixed random order (the popular
    products are spread over categories), orders uniformly (a customer opening one of
    theirs)."""

    def __init__(self, catalogue: Catalogue, exponent: float, seed: int) -> None:
        shuffle = random.Random(seed)

        def ranked(count: int) -> tuple[list[int], list[float]]:
            order = list(range(count))
            shuffle.shuffle(order)
            return order, zipf_weights(count, exponent)

        self.kinds, self.kind_weights = list(MIX), list(itertools.accumulate(MIX.values()))
        self.products = ranked(catalogue.products)
        self.categories = ranked(catalogue.categories)
        self.customers = ranked(catalogue.customers)
        self.orders = catalogue.orders

    def next(self, rng: random.Random) -> tuple[str, str]:
        """An endpoint's name and the path to GET."""
        kind = rng.choices(self.kinds, cum_weights=self.kind_weights)[0]
        if kind == "product":
            return kind, f"/products/{self._pick(rng, self.products) + 1}"
        if kind == "category":
            return kind, f"/categories/{category_name(self._pick(rng, self.categories))}/products"
        if kind == "customer orders":
            return kind, f"/customers/{customer_name(self._pick(rng, self.customers))}/orders"
        return kind, f"/orders/{rng.randrange(self.orders) + 1}"

    @staticmethod
    def _pick(rng: random.Random, ranked: tuple[list[int], list[float]]) -> int:
        return rng.choices(ranked[0], cum_weights=ranked[1])[0]


@dataclass
class Load:
    """What one closed-loop run got back: latencies (ms) by endpoint, status codes, time."""

    latency_ms: dict[str, list[float]]
    statuses: Counter[int]
    seconds: float

    @property
    def requests(self) -> int:
        """Requests answered."""
        return sum(self.statuses.values())


class Connection:
    """One keep-alive HTTP/1.1 connection that sends GETs and reads their responses, no
    more: the load generator shares the machine's CPUs with the servers, and httpx spends
    more CPU per request than the app itself (about 2 ms, against under 0.1 ms here), which
    would cap both modes at the client's speed. Speaks exactly what the app answers: a status
    line, headers with ``Content-Length`` (FastAPI's JSON responses), the body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str) -> Connection:
        """A connection to ``http://host:port``."""
        host, port = url.removeprefix("http://").rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def get(self, path: str) -> int:
        """GET ``path``; the response's status code (its body is read and dropped)."""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: shop\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        marker = head.lower().find(b"\r\ncontent-length:")
        if marker < 0:
            raise RuntimeError(f"a response without Content-Length: {head!r}")
        length = int(head[marker + 17 : head.index(b"\r\n", marker + 2)])
        await self.reader.readexactly(length)
        return int(head[9:12])

    async def close(self) -> None:
        """Close the connection."""
        self.writer.close()
        with suppress(ConnectionError):
            await self.writer.wait_closed()


async def drive(url: str, mix: RequestMix, seconds: float, concurrency: int, seed: str) -> Load:
    """``concurrency`` clients, each on its own connection, sending its next GET as soon as
    the last one is answered, for ``seconds`` (requests under way then are finished and
    counted). Client ``i`` draws from the RNG seeded ``seed/i`` so that both modes' round
    ``n`` send the same requests in each client's order."""
    latency: dict[str, list[float]] = {kind: [] for kind in MIX}
    statuses: Counter[int] = Counter()
    connections = [await Connection.open(url) for _ in range(concurrency)]
    started = time.perf_counter()
    deadline = started + seconds

    async def client_loop(index: int) -> None:
        rng, connection = random.Random(f"{seed}/{index}"), connections[index]
        while time.perf_counter() < deadline:
            kind, path = mix.next(rng)
            sent = time.perf_counter()
            status = await connection.get(path)
            latency[kind].append((time.perf_counter() - sent) * 1e3)
            statuses[status] += 1

    try:
        await asyncio.gather(*(client_loop(index) for index in range(concurrency)))
        elapsed = time.perf_counter() - started
    finally:
        for connection in connections:
            await connection.close()
    return Load(latency, statuses, elapsed)


# -- one run -------------------------------------------------------------------------------


@dataclass
class Bench:
    """What every run uses: the servers, the stack, the database and its admin
    connection, the request mix and the settings."""

    server: Any
    stack: Stack
    admin: psycopg.Connection[Any]
    shops: dict[str, ShopServer]
    mix: RequestMix
    args: argparse.Namespace

    def cpu(self, mode: str) -> dict[str, Any]:
        """CPU seconds so far of each component (the app backends' per backend)."""
        shop = self.shops[mode]
        return {
            "database": database_cpu_seconds(self.server),
            "app backends": backend_cpu(self.admin, application(mode)),
            "app": cpu_seconds(shop.pid),
            "node": cpu_seconds(node_pid(self.stack)),
            "agent": cpu_seconds(agent_pid(self.stack)),
            "load generator": cpu_seconds(os.getpid()),
        }

    def run(self, mode: str, seconds: float, seed: str) -> dict[str, Any]:
        """One closed-loop run against ``mode``'s server; its row of raw results."""
        shop, node = self.shops[mode], self.stack.node_addresses[0]
        counts, before, foreign = node_counts(node), self.cpu(mode), ForeignCpu()
        load = asyncio.run(drive(shop.url, self.mix, seconds, self.args.concurrency, seed))
        other, after, counts_after = foreign.seconds(), self.cpu(mode), node_counts(node)
        cpu = {name: after[name] - before[name] for name in COMPONENTS if name != "app backends"}
        backends_before = before["app backends"]
        cpu["app backends"] = sum(
            spent - backends_before.get(pid, 0.0) for pid, spent in after["app backends"].items()
        )
        lookups = {key: counts_after[key] - counts[key] for key in counts}
        looked_up = sum(lookups.values())
        every = [value for values in load.latency_ms.values() for value in values]
        return {
            "mode": mode,
            "seconds": round(load.seconds, 3),
            "requests": load.requests,
            "throughput": load.requests / load.seconds,
            "statuses": {str(code): count for code, count in sorted(load.statuses.items())},
            "p50_ms": percentile(every, 0.5),
            "p99_ms": percentile(every, 0.99),
            "latency_by_endpoint": {
                kind: {
                    "count": len(values),
                    "p50_ms": percentile(values, 0.5),
                    "p99_ms": percentile(values, 0.99),
                }
                for kind, values in load.latency_ms.items()
            },
            "latency_quantiles_ms": quantiles(every),
            "node": lookups,
            "hit_rate": lookups["hits"] / looked_up if looked_up else float("nan"),
            "cpu_s": {name: round(cpu[name], 3) for name in COMPONENTS},
            "other_work_cpu_s": round(other, 2),
        }


def measure(bench: Bench) -> dict[str, Any]:
    """Warm each server up, then the interleaved rounds; the raw results."""
    args = bench.args
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


def totals(rounds: list[dict[str, Any]], mode: str) -> dict[str, Any]:
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


def per_round_ratios(rounds: list[dict[str, Any]], value: str) -> list[float]:
    """consistent / bypass of ``value`` (``throughput``, or a CPU column per request),
    round by round."""

    def of(row: dict[str, Any]) -> float:
        if value == "throughput":
            return float(row["throughput"])
        return float(row["cpu_s"][value]) / row["requests"]

    return [of(entry["consistent"]) / of(entry["bypass"]) for entry in rounds]


def spread(values: list[float]) -> str:
    """Median and range of per-round ratios."""
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}x)"


def plot(rounds: list[dict[str, Any]], path: Path) -> bool:
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


def server_note() -> str:
    """What uvicorn serves with: its event loop and HTTP parser are the fastest installed
    (``--loop auto --http auto``)."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    parser = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"uvicorn, 1 worker ({loop} event loop, {parser} HTTP parser)"


def markdown(raw: dict[str, Any], name: str, plotted: bool) -> list[str]:
    """The report's body."""
    args, catalogue, rounds = raw["settings"], raw["catalogue"], raw["rounds"]
    total = {mode: totals(rounds, mode) for mode in MODES}
    cached, bare = total["consistent"], total["bypass"]
    mix = ", ".join(f"{share} % {kind}" for kind, share in MIX.items())
    cpus = os.cpu_count() or 1
    lines = [
        f"The example app (`examples/fastapi_shop`) under {server_note()}, twice side by side "
        "on one stack (one node, the agent with its default settings): `TXCACHE_MODE="
        "consistent` (as it ships) and `TXCACHE_MODE=bypass` (the same app, no cache: every "
        f"GET reads PostgreSQL). `SHOP_STALENESS={args['staleness']:g}`, the library's "
        "default pool (10 connections).",
        "",
        f"- catalogue: {num(catalogue['products'])} products in {catalogue['categories']} "
        f"categories ({catalogue['products'] // catalogue['categories']} each), "
        f"{num(catalogue['orders'])} orders of {num(catalogue['customers'])} customers",
        f"- load: a closed loop of {args['concurrency']} clients (keep-alive connections of "
        "a minimal HTTP/1.1 client on asyncio streams: httpx costs more CPU per request than "
        f"the app), GETs only: {mix} (`/orders/{{id}}` is the app's one uncached read); "
        f"products, categories and customers by Zipf({args['zipf']:g}) popularity, orders "
        "uniformly",
        f"- {args['warmup']:g} s unmeasured warm-up per mode, then {args['rounds']} rounds of "
        f"{args['seconds']:g} s per mode, the order flipped every round",
        f"- the load generator runs in the benchmark's process and shares the machine's "
        f"{cpus} CPUs with PostgreSQL, both apps, the node and the agent (nothing pinned, as "
        "in `rubis_throughput.py`): its CPU is a column below. So is *other work* (the "
        "machine's processes that are not this benchmark's); ratios come from runs seconds "
        "apart, so noise that lasts falls on both modes",
        "- *database*: CPU of every PostgreSQL process (the app's backends, the agent's pin "
        "sessions, the walsender, the checkpointer); *app backends*: the app's own "
        "connections alone (`application_name`)",
        "",
        "## Results",
        "",
    ]
    header = ["", "req/s", "p50 ms", "p99 ms", "hit rate", "database ms/req"]
    header += ["app backends ms/req", "app ms/req", "non-200"]
    rows = []
    for mode in MODES:
        row, per = total[mode], total[mode]["cpu_ms_per_request"]
        hit = "-" if mode == "bypass" else f"{fmt(row['hit_rate'] * 100, 1)} %"
        rows.append(
            [
                f"{'with' if mode == 'consistent' else 'without'} txcache (`{mode}`)",
                num(row["throughput"]),
                fmt(row["p50_ms"]),
                fmt(row["p99_ms"]),
                hit,
                fmt(per["database"], 3),
                fmt(per["app backends"], 3),
                fmt(per["app"], 3),
                row["errors"],
            ]
        )
    lines += table(header, rows, "lrrrrrrrr")
    throughput = per_round_ratios(rounds, "throughput")
    database = per_round_ratios(rounds, "database")
    backends = per_round_ratios(rounds, "app backends")
    app = per_round_ratios(rounds, "app")
    db_cached, db_bare = (row["cpu_ms_per_request"]["database"] for row in (cached, bare))
    lines += [
        "",
        "Requests/s over all measured rounds; p50 and p99 the median of the rounds'; CPU per "
        "request over all rounds' requests; hit rate: the node's hits over its lookups (the "
        "cached endpoints' calls).",
        "",
        "Ratios, with txcache / without (over all rounds; per round: median and range):",
        "",
        f"- **throughput: {cached['throughput'] / bare['throughput']:.2f}x** "
        f"(per round {spread(throughput)})",
        f"- **database CPU per request: {db_cached / db_bare:.2f}x** (per round "
        f"{spread(database)}): {fmt(db_bare / db_cached, 1)} times less",
        f"- the app's backends' CPU per request: "
        f"{spread(backends)}; the app's own CPU per request: {spread(app)}",
        f"- latency p50: {cached['p50_ms'] / bare['p50_ms']:.2f}x, p99: "
        f"{cached['p99_ms'] / bare['p99_ms']:.2f}x",
        "",
        "The app's process (one worker, one event loop: at most one CPU) was busy "
        + " and ".join(
            f"{fmt(total[mode]['cpu_s']['app'] / total[mode]['seconds'] * 100, 0)} % of a CPU "
            f"({mode})"
            for mode in MODES
        )
        + "; what it did not get went to the other processes on the machine. It is the "
        "bottleneck in both modes, so the throughput ratio follows the inverse of its CPU "
        "per request.",
        "",
    ]
    if plotted:
        lines += [f"![throughput and database CPU per round]({name}.png)", ""]
    lines += [
        "### CPU seconds per mode, all rounds",
        "",
        f"{fmt(cached['seconds'], 0)} s measured per mode: "
        f"{fmt(cached['seconds'] * cpus, 0)} CPU-seconds of the machine's {cpus} CPUs.",
        "",
    ]
    rows = [
        [
            mode,
            *(fmt(total[mode]["cpu_s"][name], 1) for name in COMPONENTS),
            fmt(total[mode]["other_work_cpu_s"], 1),
        ]
        for mode in MODES
    ]
    lines += table(["", *COMPONENTS, "other work"], rows, "l" + "r" * (len(COMPONENTS) + 1))
    lines += ["", "### Latency by endpoint (median of the rounds' p50 and p99, ms)", ""]
    rows = []
    for kind in MIX:
        cells = []
        for mode in MODES:
            per_round = [entry[mode]["latency_by_endpoint"][kind] for entry in rounds]
            cells += [
                fmt(statistics.median(row["p50_ms"] for row in per_round)),
                fmt(statistics.median(row["p99_ms"] for row in per_round)),
            ]
        rows.append([kind, *cells])
    header = ["endpoint", "consistent p50", "consistent p99", "bypass p50", "bypass p99"]
    lines += table(header, rows, "lrrrr")
    lines += ["", "### Every round", ""]
    rows = []
    for number, entry in enumerate(rounds, 1):
        for mode in entry["order"]:
            row = entry[mode]
            hit = "-" if mode == "bypass" else f"{fmt(row['hit_rate'] * 100, 1)} %"
            per = {name: row["cpu_s"][name] / row["requests"] * 1e3 for name in COMPONENTS}
            rows.append(
                [
                    number,
                    mode,
                    num(row["throughput"]),
                    fmt(row["p50_ms"]),
                    fmt(row["p99_ms"]),
                    hit,
                    fmt(per["database"], 3),
                    fmt(per["app"], 3),
                    fmt(row["cpu_s"]["load generator"], 1),
                    fmt(row["other_work_cpu_s"], 1),
                ]
            )
    header = ["round", "mode", "req/s", "p50 ms", "p99 ms", "hit rate", "database ms/req"]
    header += ["app ms/req", "load generator s", "other work s"]
    lines += table(header, rows, "rlrrrrrrrr")
    lines += [
        "",
        "GETs only: nothing invalidates, so every miss is a first read of its key (compulsory); "
        "the hit rate rises round by round as the Zipf tail gets cached.",
    ]
    return lines


# -- main ----------------------------------------------------------------------------------


TITLE = "FastAPI example: GET throughput with and without txcache"


def render(raw_path: Path) -> None:
    """Rewrite a run's report and plot from its raw results (``results/<name>.json``),
    for a report whose text changed after the run."""
    raw = json.loads(raw_path.read_text())
    name = raw_path.stem
    plotted = plot(raw["rounds"], raw_path.with_suffix(".png"))
    top = [f"# {TITLE}", "", f"- command: `{raw['command']}`", *machine_lines(raw["machine"])]
    path = write_markdown(name, [*top, "", *markdown(raw, name, plotted)])
    log(f"wrote {path}")


def main() -> None:
    """Seed, start the stack and both servers, measure, write the report."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=16, help="clients (default 16)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per mode (default 6)")
    parser.add_argument("--seconds", type=float, default=20.0, help="per round (default 20)")
    parser.add_argument("--warmup", type=float, default=15.0, help="per mode (default 15)")
    parser.add_argument("--zipf", type=float, default=1.0, help="key skew (default 1.0)")
    parser.add_argument("--staleness", type=float, default=5.0, help="SHOP_STALENESS (5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run (~35 s): a smaller catalogue, 3 s warm-up, 2 rounds of 5 s",
    )
    parser.add_argument(
        "--render", type=Path, help="rewrite the report of results/X.json, measuring nothing"
    )
    args = parser.parse_args()
    if args.render:
        render(args.render)
        return
    catalogue = FULL
    if args.quick:
        catalogue, args.warmup, args.rounds, args.seconds = QUICK, 3.0, 2, 5.0
    with postgres(args.storage) as server:
        dsn = create_database(server, "shop")
        note = machine_note(database_note(dsn, args.storage))
        with bench_stack(dsn) as stack:
            seed_catalogue(dsn, catalogue, args.seed)
            stack.caught_up(timeout=120)  # the seed's commits decoded before any request
            log(f"seeded {num(catalogue.products)} products, {num(catalogue.orders)} orders")
            with (
                shop_servers(stack, args.staleness) as shops,
                psycopg.connect(dsn, autocommit=True) as admin,
            ):
                mix = RequestMix(catalogue, args.zipf, args.seed)
                raw = measure(Bench(server, stack, admin, shops, mix, args))
    raw = {"settings": vars(args), "catalogue": asdict(catalogue), "mix": MIX, **raw}
    extra = [f"c{args.concurrency}"] if args.concurrency != 16 else []
    name = result_name("fastapi_throughput", args.quick, args.storage, *extra)
    plotted = plot(raw["rounds"], RESULTS_DIR / f"{name}.png")
    path = write_report(name, TITLE, note, markdown(raw, name, plotted), raw)
    log(f"report: {path}")


if __name__ == "__main__":
    main()

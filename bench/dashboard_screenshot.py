"""The Grafana dashboard (dashboards/txcache.json) rendered from a real run, for
docs/dashboard.md — without Grafana, which Debian does not package: a real Prometheus
(Debian's ``prometheus``) scrapes a real stack, runs every query of the dashboard, and the
panels are drawn with matplotlib where the dashboard places them.

The run: PostgreSQL, two nodes with a small ``--max-memory`` (so that they evict) and the
agent (:class:`txcache.stack.Stack`, metrics endpoints on), and in this process a shop's
workload on the library: reader threads run read-only transactions of three cacheable
functions with Zipf-popular keys (now and then an item that does not exist: the function
raises), a writer commits price and rating updates. Midway node 2 is stopped for a few
seconds and started again; later one bulk update rewrites a quarter of the items. This
process serves ``txcache.metrics`` at ``/metrics``; Prometheus scrapes it, both nodes and the
agent every 2 s.

At the end each panel's queries run on that Prometheus over the whole run (``query_range``,
a step of one scrape interval; a bar gauge's at the end), with the dashboard's variables
set to All and ``$__rate_interval`` as Grafana computes it. Writes docs/images/dashboard.png,
results/dashboard_screenshot.md (what ran, the events, every panel's last values) and
results/dashboard_screenshot.json (every query as run, every series).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from _common import STORAGE_HELP, bench_stack, database_note, postgres
from _dashboard_render import Event, Series, last, render, unit_text
from _http_load import zipf_keys
from _report import REPO, RESULTS_DIR, log, machine_note, result_name, table, write_report

import txcache
from txcache import metrics
from txcache.stack import ServerProcess, Stack, answers_http, free_port, free_ports

sys.path.insert(0, str(REPO / "dashboards"))
import promql  # dashboards/ is no package: its reader is loaded from there (mypy: mypy_path)

IMAGE = REPO / "docs" / "images" / "dashboard.png"
SCRAPE = 2
"""Seconds between scrapes, and the step of every query (Grafana's "scrape interval")."""
RATE_INTERVAL = max(SCRAPE + SCRAPE, 4 * SCRAPE)
"""Grafana's ``$__rate_interval``: max(step + scrape interval, 4 x scrape interval)."""
ITEMS, CATEGORIES, USERS = 20_000, 80, 2_000

SCHEMA = f"""
CREATE TABLE items (id integer PRIMARY KEY, category integer NOT NULL, name text NOT NULL,
                    price integer NOT NULL, description text NOT NULL);
CREATE INDEX ON items (category);
CREATE TABLE users (id integer PRIMARY KEY, name text NOT NULL, rating integer NOT NULL);
INSERT INTO items SELECT i, i % {CATEGORIES}, 'item ' || i, 100 + i % 900,
                         repeat(md5(i::text), 16) FROM generate_series(1, {ITEMS}) i;
INSERT INTO users SELECT i, 'user ' || i, 0 FROM generate_series(1, {USERS}) i;
"""


# -- the application -----------------------------------------------------------------------------


@txcache.cacheable
def item(item_id: int) -> tuple[Any, ...]:
    """An item's page data (about 600 bytes)."""
    row = txcache.query_one("SELECT name, price, description FROM items WHERE id = %s", (item_id,))
    if row is None:
        raise LookupError(f"no item {item_id}")
    return tuple(row)


@txcache.cacheable
def category_page(category: int) -> list[tuple[Any, ...]]:
    """A category's cheapest 20 items."""
    rows = txcache.query(
        "SELECT id, name, price FROM items WHERE category = %s ORDER BY price, id LIMIT 20",
        (category,),
    )
    return [tuple(row) for row in rows]


@txcache.cacheable
def seller(user_id: int) -> tuple[Any, ...]:
    """A user's name and rating."""
    row = txcache.query_one("SELECT name, rating FROM users WHERE id = %s", (user_id,))
    return tuple(row or ())


Draw = Callable[[random.Random], int]
"""A key drawn by popularity (:func:`_http_load.zipf_keys`)."""


@dataclass
class Workload:
    """Readers and a writer on the stack, until :meth:`stop`."""

    cache: txcache.Cache
    dsn: str
    readers: int
    reads_per_second: float
    writes_per_second: float
    stopping: threading.Event = field(default_factory=threading.Event)
    counts: Counter[str] = field(default_factory=Counter)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        """Start the readers and the writer."""
        shuffle = random.Random(7)
        items = zipf_keys(ITEMS, 0.9, shuffle)
        categories = zipf_keys(CATEGORIES, 0.9, shuffle)
        users = zipf_keys(USERS, 0.9, shuffle)
        for number in range(self.readers):
            body = partial(self._read, random.Random(number), items, categories, users)
            self._spawn(body, f"reader {number}")
        self._spawn(partial(self._write, items), "writer")

    def _spawn(self, body: Callable[[], None], name: str) -> None:
        """Run ``body`` in a daemon thread (one stuck in a call cannot hold the exit)."""
        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _paced(self, per_second: float) -> Iterator[None]:
        """Yield ``per_second`` times a second (on a schedule: a slow turn does not shift
        the next ones) until :meth:`stop`."""
        due = time.monotonic()
        while not self.stopping.is_set():
            yield
            due += 1 / per_second
            self.stopping.wait(max(0.0, due - time.monotonic()))

    def _read(self, rng: random.Random, items: Draw, categories: Draw, users: Draw) -> None:
        for _ in self._paced(self.reads_per_second):
            missing = rng.random() < 0.005  # a page for an item that does not exist
            try:
                with self.cache.read_only():
                    item(ITEMS + 1 + items(rng) if missing else 1 + items(rng))
                    category_page(categories(rng))
                    seller(1 + users(rng))
                self.counts["read-only transactions"] += 1
            except LookupError:
                self.counts["missing items (the function raised)"] += 1
            except Exception as error:  # counted and reported: the run goes on
                self.counts[f"reader error: {type(error).__name__}"] += 1

    def _write(self, items: Draw) -> None:
        rng = random.Random(99)
        with psycopg.connect(self.dsn, autocommit=True) as db:
            for _ in self._paced(self.writes_per_second):
                if rng.random() < 0.2:
                    db.execute(
                        "UPDATE users SET rating = rating + 1 WHERE id = %s",
                        (1 + rng.randrange(USERS),),
                    )
                else:
                    db.execute(
                        "UPDATE items SET price = price + 1 WHERE id = %s", (1 + items(rng),)
                    )
                self.counts["write transactions"] += 1

    def stop(self) -> None:
        """Stop every thread and wait for them."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=30)


# -- Prometheus ----------------------------------------------------------------------------------


def find_prometheus() -> str:
    """The ``prometheus`` binary on ``PATH``; without one, exit with one line saying how to
    install it (checked before anything starts, not after minutes of setup)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit(
            "dashboard_screenshot.py: prometheus is not installed (Debian: apt-get install "
            "prometheus; or put a prometheus binary on PATH)"
        )
    return binary


class Prometheus(ServerProcess):
    """A Prometheus of its own (a temporary directory) scraping ``jobs`` (name → targets)."""

    what = "Prometheus"

    def __init__(self, binary: str, directory: Path, jobs: dict[str, list[str]]) -> None:
        """Write its configuration and start ``binary`` on it; ready once ``/-/ready``
        answers."""
        self.url = f"http://127.0.0.1:{free_port()}"
        scrapes = [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in jobs.items()
        ]
        config = {
            "global": {"scrape_interval": f"{SCRAPE}s", "scrape_timeout": f"{SCRAPE}s"},
            "scrape_configs": scrapes,
        }
        path = directory / "prometheus.yml"  # JSON is YAML
        path.write_text(json.dumps(config, indent=2))
        command = [
            binary,
            f"--config.file={path}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={self.url.removeprefix('http://')}",
            "--log.level=warn",
        ]
        super().__init__(command, env=os.environ, log=directory / "prometheus.log")
        self.version = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=False
        ).stdout.split(" (")[0]

    def ready(self) -> bool:
        """Whether it answers ``/-/ready``."""
        return answers_http(f"{self.url}/-/ready")

    def query(self, expr: str, start: float, end: float, instant: bool) -> list[dict[str, Any]]:
        """The series of ``expr`` over [start, end] (at ``end`` alone if ``instant``); a
        query Prometheus refuses raises with its error."""
        if instant:
            path, params = "query", {"query": expr, "time": f"{end}"}
        else:
            path = "query_range"
            params = {"query": expr, "start": f"{start}", "end": f"{end}", "step": f"{SCRAPE}"}
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:
            raise SystemExit(f"Prometheus refused {expr!r}: {error.read().decode()}") from None
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result


# -- the run -------------------------------------------------------------------------------------


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend: ``{{label}}`` replaced by the series' value of it."""
    text = template
    for name, value in labels.items():
        text = text.replace(f"{{{{{name}}}}}", value)
    return text or "value"


def series_of(query: promql.Query, answer: list[dict[str, Any]]) -> list[Series]:
    """The series of Prometheus's ``answer`` to ``query`` (a matrix, or a vector for an
    instant query), named by the query's legend, in the legend's order."""
    found = []
    for one in answer:
        points = one["values"] if "values" in one else [one["value"]]
        found.append(
            Series(
                query.ref,
                legend(query.legend, one["metric"]),
                [float(t) for t, _ in points],
                [float(v) for _, v in points],
            )
        )
    return sorted(found, key=lambda s: s.legend)


def run_queries(
    prometheus: Prometheus, dashboard: dict[str, Any], span: tuple[float, float]
) -> tuple[dict[int, list[Series]], list[dict[str, Any]]]:
    """Every panel's series (panel id → series) and the raw record of every query."""
    values = {v["name"]: ".*" for v in dashboard["templating"]["list"] if v["type"] == "query"}
    values["__rate_interval"] = f"{RATE_INTERVAL}s"
    panels = {p["title"]: p["id"] for p in dashboard["panels"]}
    results: dict[int, list[Series]] = {}
    record = []
    for query in promql.queries(dashboard):
        expr = promql.substitute(query.expr, values)
        found = series_of(query, prometheus.query(expr, *span, query.instant))
        results.setdefault(panels[query.panel], []).extend(found)
        record.append(
            {
                "panel": query.panel,
                "ref": query.ref,
                "expr": expr,
                "series": [s.__dict__ for s in found],
            }
        )
    return results, record


def events_of(stack: Stack, duration: float, outage: float) -> tuple[list[Event], threading.Thread]:
    """The run's events, and a thread that causes them as their times come."""
    started = time.time()
    events: list[Event] = []

    def cause() -> None:
        time.sleep(duration * 0.4)
        stack.nodes[1].stop()
        events.append(Event(time.time(), "node 2 stopped"))
        time.sleep(outage)
        stack.restart_node(1)
        events.append(Event(time.time(), "node 2 started again"))
        time.sleep(max(0.0, started + duration * 0.7 - time.time()))
        with psycopg.connect(stack.dsn, autocommit=True) as db:
            db.execute(f"UPDATE items SET price = price + 1 WHERE category < {CATEGORIES // 4}")
        events.append(Event(time.time(), f"bulk update of {ITEMS // 4:,} items"))

    return events, threading.Thread(target=cause, name="events", daemon=True)


def measure(args: argparse.Namespace, binary: str, directory: Path) -> dict[str, Any]:
    """One run: the stack, the workload, Prometheus; every panel's series."""
    dashboard = promql.load()
    with postgres(args.storage) as server:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE shop")
        note = machine_note(database_note(server.dsn_for("shop"), args.storage))
        base = free_ports(3)
        stack = bench_stack(
            server.dsn_for("shop"),
            nodes=2,
            max_memory=args.max_memory,
            schema_sql=SCHEMA,
            metrics_port_base=base,
        )
        with stack, stack.connect() as cache, closing(metrics.serve(0)) as exporter:
            app = f"127.0.0.1:{exporter.server_port}"
            jobs = {
                "shop": [app],
                "txcached": [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"],
                "txcache-agent": [f"127.0.0.1:{base + 2}"],
            }
            with Prometheus(binary, directory, jobs) as prometheus:
                workload = Workload(cache, stack.dsn, args.readers, args.reads, args.writes)
                start = time.time()
                events, causing = events_of(stack, args.duration, args.outage)
                workload.start()
                causing.start()
                log(f"running {args.duration:.0f} s; Prometheus at {prometheus.url}")
                time.sleep(args.duration)
                workload.stop()
                causing.join()
                end = time.time()
                time.sleep(SCRAPE * 1.5)  # the last scrape
                results, record = run_queries(prometheus, dashboard, (start, end))
                version = prometheus.version
    return {
        "dashboard": dashboard,
        "results": results,
        "record": record,
        "span": (start, end),
        "events": events,
        "counts": dict(workload.counts),
        "prometheus": version,
        "note": note,
    }


# -- the report ----------------------------------------------------------------------------------


def at(moment: float, start: float) -> str:
    """``moment`` as seconds into the run."""
    return f"{moment - start:.0f} s"


def last_values(series: list[Series], panel: dict[str, Any]) -> str:
    """The last value of a panel's first four series, each in its unit."""
    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    units = {
        o["matcher"]["options"]: p["value"]
        for o in panel["fieldConfig"].get("overrides", [])
        for p in o["properties"]
        if o["matcher"]["id"] == "byFrameRefID" and p["id"] == "unit"
    }
    shown = [f"{s.legend}: {unit_text(units.get(s.ref, unit), last(s.values))}" for s in series[:4]]
    return "; ".join(shown) + (f"; … ({len(series)} series)" if len(series) > 4 else "")


def clock(moment: float) -> str:
    """``moment`` as UTC wall time."""
    return time.strftime("%H:%M:%S", time.gmtime(moment))


def header(args: argparse.Namespace, run: dict[str, Any]) -> list[str]:
    """The image's title and notes: what ran, how it was scraped and queried."""
    start, end = run["span"]
    events = ", ".join(f"{e.label} ({at(e.time, start)})" for e in run["events"])
    return [
        f"{run['dashboard']['title']} — dashboards/txcache.json, drawn from a real run by "
        "bench/dashboard_screenshot.py (Grafana is not installed here)",
        f"Data: {run['prometheus']} scraping the library (job shop), 2 nodes (job txcached) and "
        f"the agent every {SCRAPE} s · variables: All · {clock(start)} to {clock(end)} UTC, step "
        f"{SCRAPE} s, $__rate_interval = {RATE_INTERVAL} s",
        f"Workload: {args.readers} readers x {args.reads:g} read-only transactions/s (3 "
        f"cacheable calls each, Zipf keys), 1 writer x {args.writes:g} commits/s; nodes "
        f"--max-memory {args.max_memory} · dashed lines: {events}",
    ]


def body(args: argparse.Namespace, run: dict[str, Any], image: Path | None) -> list[str]:
    """The report under its header: the image, the run, every panel's last values."""
    start, _ = run["span"]
    shown = f"![The dashboard]({os.path.relpath(image, RESULTS_DIR)})" if image else "*No plot*"
    panels = {p["id"]: p for p in run["dashboard"]["panels"]}
    rows = [
        (
            panel["title"],
            len(run["results"].get(pid, [])),
            last_values(run["results"].get(pid, []), panel),
        )
        for pid, panel in panels.items()
        if panel["type"] != "row"
    ]
    return [
        "Every panel of dashboards/txcache.json, its queries run by a real Prometheus over a "
        "real run and drawn where the dashboard places them (docs/dashboard.md).",
        "",
        shown,
        "",
        *[f"- {line}" for line in header(args, run)[1:]],
        "",
        "## Events",
        "",
        *table(["after", "event"], [(at(e.time, start), e.label) for e in run["events"]]),
        "",
        "## Workload",
        "",
        *table(["what", "count"], sorted(run["counts"].items())),
        "",
        "## Panels: series and last values",
        "",
        *table(["panel", "series", "last values"], rows),
    ]


def main() -> None:
    """Parse the options, run, draw the image and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=120.0, help="seconds of workload (default 120)"
    )
    parser.add_argument("--readers", type=int, default=2, help="reader threads (default 2)")
    parser.add_argument(
        "--reads",
        type=float,
        default=40.0,
        help="read-only transactions per second per reader (default 40)",
    )
    parser.add_argument(
        "--writes", type=float, default=15.0, help="write transactions per second (default 15)"
    )
    parser.add_argument(
        "--max-memory",
        default="1.5mb",
        help="each node's --max-memory (default 1.5mb: small, so that the nodes evict)",
    )
    parser.add_argument(
        "--outage", type=float, default=8.0, help="seconds node 2 stays stopped (default 8)"
    )
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a 40 s smoke run; its image goes to results/, not docs/",
    )
    args = parser.parse_args()
    if args.quick:
        args.duration, args.outage = min(args.duration, 40.0), min(args.outage, 4.0)
    binary = find_prometheus()
    with tempfile.TemporaryDirectory(prefix="txcache-dashboard-") as directory:
        run = measure(args, binary, Path(directory))
    name = result_name("dashboard_screenshot", args.quick, args.storage)
    image = RESULTS_DIR / f"{name}.png" if args.quick else IMAGE
    image.parent.mkdir(parents=True, exist_ok=True)
    events = run["events"]
    drawn = render(run["dashboard"], run["results"], image, run["span"], header(args, run), events)
    raw = {
        "options": vars(args),
        "span": run["span"],
        "events": [e.__dict__ for e in events],
        "counts": run["counts"],
        "prometheus": run["prometheus"],
        "queries": run["record"],
    }
    title = "The dashboard, rendered from a real run"
    path = write_report(name, title, run["note"], body(args, run, image if drawn else None), raw)
    log(f"wrote {path} and {image if drawn else '(no image: matplotlib missing)'}")


if __name__ == "__main__":
    main()

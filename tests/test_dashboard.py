"""dashboards/txcache.json, the Grafana dashboard (docs/dashboard.md): a well-formed
dashboard on a Prometheus data source variable, whose every query reads only metrics and
labels a real stack exports — scraped from the nodes', the agent's and the library's
``/metrics`` after a little load — and takes ``rate()`` of counters only."""

from __future__ import annotations

import re
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import txcache
from library_fixtures import LibraryStack
from postgres_fixtures import fresh_database
from txcache import metrics
from txcache.stack import EmbeddedPostgres, free_ports, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dashboards"))
import promql  # dashboards/ is no package: its reader is loaded from there (mypy: mypy_path)

DASHBOARD = promql.load()
QUERIES = promql.queries(DASHBOARD)
TARGET_LABELS = {"job", "instance"}
"""Labels Prometheus adds to every series it scrapes."""
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}


def panels() -> list[dict[str, Any]]:
    """Every panel, those folded into collapsed rows included."""
    return [p for panel in DASHBOARD["panels"] for p in [panel, *panel.get("panels", [])]]


# -- the dashboard itself ----------------------------------------------------------------------


def test_the_dashboard_reads_a_prometheus_chosen_by_a_variable() -> None:
    assert DASHBOARD["schemaVersion"] >= 39
    assert DASHBOARD["uid"] == "txcache"
    [source] = [v for v in DASHBOARD["templating"]["list"] if v["type"] == "datasource"]
    assert (source["name"], source["query"]) == ("datasource", "prometheus")
    wanted = {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels():
        if panel["type"] != "row":
            assert panel["datasource"] == wanted, panel["title"]
            assert all(t["datasource"] == wanted for t in panel["targets"]), panel["title"]
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == wanted, variable["name"]


def test_panels_tile_the_grid_under_their_rows_without_overlap() -> None:
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))
    taken: dict[tuple[int, int], str] = {}
    for panel in panels():
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]
    first = min(DASHBOARD["panels"], key=lambda panel: panel["gridPos"]["y"])
    assert first["type"] == "row"
    for panel in panels():
        if panel["type"] == "row":
            assert (panel["gridPos"]["w"], panel["gridPos"]["h"]) == (24, 1)
        else:
            assert panel["targets"], panel["title"]
            assert panel["description"], panel["title"]


def test_every_panel_is_a_core_type_whose_targets_and_overrides_agree() -> None:
    # Core panel types only: a plugin panel would be blank in a Grafana without it.
    core = {"row", "timeseries", "stat", "bargauge", "gauge", "table", "text"}
    for panel in panels():
        assert panel["type"] in core, panel["title"]
        assert panel["title"], panel["id"]
        if panel["type"] == "row":
            continue
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for override in panel["fieldConfig"].get("overrides", []):
            matcher = override["matcher"]
            if matcher["id"] == "byFrameRefID":  # an override of a query the panel lacks
                assert matcher["options"] in refs, panel["title"]  # would match nothing


def test_every_variable_a_query_uses_is_defined() -> None:
    defined = {variable["name"] for variable in DASHBOARD["templating"]["list"]}
    texts = [query.expr for query in QUERIES]
    texts += [selector for selector, _ in promql.variable_queries(DASHBOARD).values()]
    used = {
        name
        for text in texts
        for pair in re.findall(r"\$\{(\w+)\}|\$(\w+)", text)
        for name in pair
        if name
    }
    assert used - GRAFANA_VARIABLES <= defined
    assert {"datasource", "job", "instance", "function", "node", "agent"} <= defined


def test_every_query_is_promql_the_reader_knows() -> None:
    for query in QUERIES:
        assert promql.read_names(query.expr).metrics, f"{query.panel} {query.ref}"


def test_the_reader_finds_metric_label_and_counter_names() -> None:
    names = promql.read_names(
        'sum by (function) (rate(hits_total{job=~"$job"}[$__rate_interval])) / '
        "ignoring(node) group_left max(level) + sum(increase(events[1m])) by (kind) or vector(0)"
    )
    assert names.metrics == {"hits_total", "level", "events"}
    assert names.matchers == {"hits_total": {"job"}, "level": set(), "events": set()}
    assert names.grouping == {"function", "node", "kind"}
    assert names.counted == {"hits_total", "events"}


@pytest.mark.parametrize(
    "expr", ["sum(rate(x[1m])", "sum(x))", "nofunction(x)", 'x{a=~"b"', '{a="b"}', "x offset 5m"]
)
def test_the_reader_refuses_what_it_cannot_read(expr: str) -> None:
    with pytest.raises(promql.PromQLError):
        promql.read_names(expr)


# -- against a real stack ----------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One metric family of a scrape."""

    kind: str
    labels: frozenset[str]
    samples: int


Scrape = dict[str, Family]
"""Metric name → what a scrape says of it; histograms as ``_bucket``, ``_sum``, ``_count``."""

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? \S+$")
_LABEL = re.compile(r'(\w+)="(?:[^"\\]|\\.)*"')


def parse(text: str) -> Scrape:
    """The families of a Prometheus text exposition; ``# TYPE`` without samples count too."""
    kinds: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    samples: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            kinds[name] = kind
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match is not None, line
            name = match[1]
            labels.setdefault(name, set()).update(_LABEL.findall(match[2] or ""))
            samples[name] = samples.get(name, 0) + 1
    families = {}
    for name in kinds.keys() | samples.keys():
        family = name
        if name not in kinds:  # a histogram's or summary's _bucket, _sum, _count
            family = re.sub(r"_(bucket|sum|count)$", "", name)
        families[name] = Family(
            kinds.get(family, "untyped"), frozenset(labels.get(name, ())), samples.get(name, 0)
        )
    return families


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


@txcache.cacheable
def item_price(item_id: int) -> int:
    """A cacheable read, for the library's metrics."""
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    if row is None:
        raise LookupError(item_id)
    return int(row[0])


def exercise(lib: LibraryStack) -> None:
    """A miss that stores, a hit, a call that raises, and a write the nodes apply."""
    lib.caught_up()
    lib.fresh_pins()
    for _ in range(2):
        with lib.cache.read_only(staleness=60):
            item_price(3)
    with lib.cache.read_only(staleness=60), pytest.raises(LookupError):
        item_price(404)
    lib.commit("UPDATE items SET price = price + 1 WHERE id = 3")


@pytest.fixture(scope="module")
def scrapes(postgres: EmbeddedPostgres) -> Iterator[dict[str, Scrape]]:
    """One stack (two nodes, the agent, a library) under a little load, scraped once:
    ``library``, ``node`` (both nodes together) and ``agent``."""
    databases = fresh_database(postgres)
    lib = LibraryStack(next(databases))
    base = free_ports(3)
    lib.options = replace(lib.options, metrics_port_base=base)
    server = None
    try:
        with lib:
            exercise(lib)
            server = metrics.serve(0)  # on 127.0.0.1
            agent_url = f"http://127.0.0.1:{base + 2}/metrics"
            connected = [
                f'txcache_agent_node_connected{{node="{n}"}} 1' for n in lib.node_addresses
            ]

            def both_connected() -> str | None:
                text = scrape(agent_url)
                return text if all(line in text for line in connected) else None

            what = "the agent's metrics to show both nodes connected"
            agent_text = wait_until(both_connected, what, timeout=20)
            nodes = "".join(scrape(f"http://127.0.0.1:{base + i}/metrics") for i in range(2))
            yield {
                "library": parse(scrape(f"http://127.0.0.1:{server.server_port}/metrics")),
                "node": parse(nodes),
                "agent": parse(agent_text),
            }
    finally:
        if server is not None:
            server.close()
        next(databases, None)  # drops the database


def exported(scrapes: dict[str, Scrape]) -> Scrape:
    return {name: family for scrape in scrapes.values() for name, family in scrape.items()}


def test_every_metric_a_query_reads_is_in_a_real_scrape_with_samples(
    scrapes: dict[str, Scrape],
) -> None:
    everything = exported(scrapes)
    read = {name for query in QUERIES for name in promql.read_names(query.expr).metrics}
    read |= {
        name
        for selector, _ in promql.variable_queries(DASHBOARD).values()
        for name in promql.read_names(selector).metrics
    }
    assert len(read) >= 50
    assert sorted(name for name in read if name not in everything) == []
    assert sorted(name for name in read if everything[name].samples == 0) == []
    for part in ("library", "node", "agent"):  # every part has panels
        assert read & scrapes[part].keys(), part


def test_rate_and_increase_read_counters_only(scrapes: dict[str, Scrape]) -> None:
    everything = exported(scrapes)
    for query in QUERIES:
        for name in promql.read_names(query.expr).counted:
            assert everything[name].kind == "counter", f"{query.panel} {query.ref}: {name}"


def test_every_label_a_query_matches_or_groups_by_is_exported(scrapes: dict[str, Scrape]) -> None:
    everything = exported(scrapes)
    for query in QUERIES:
        names = promql.read_names(query.expr)
        where = f"{query.panel} {query.ref}"
        for metric, matched in names.matchers.items():
            assert matched <= everything[metric].labels | TARGET_LABELS, f"{where}: {metric}"
        carried = set().union(*(everything[metric].labels for metric in names.metrics))
        assert names.grouping <= carried | TARGET_LABELS, where
        legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", query.legend))
        assert legend <= carried | TARGET_LABELS, where


def test_every_variable_lists_a_label_of_an_exported_metric(scrapes: dict[str, Scrape]) -> None:
    everything = exported(scrapes)
    for name, (selector, label) in promql.variable_queries(DASHBOARD).items():
        [metric] = promql.read_names(selector).metrics
        assert label in everything[metric].labels | TARGET_LABELS, name

"""``txcache.metrics``: function statistics for Prometheus, rendered from one table, through
a prometheus_client registry, an HTTP endpoint, and ``txcache status --metrics``."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import urllib.error
import urllib.request

import prometheus_client
import pytest

import txcache
from library_fixtures import LibraryStack
from txcache import metrics
from txcache._stats import AuditStats, FunctionStats, OperationLatency, ViewStats, view_stats


@txcache.cacheable
def label(item_id: int) -> str:
    """A cacheable read."""
    row = txcache.query_one("SELECT name FROM items WHERE id = %s", (item_id,))
    if row is None:
        raise LookupError(item_id)
    return str(row[0])


def exercise(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    for _ in range(2):
        with lib.cache.read_only(staleness=60):
            label(5)
    with lib.cache.read_only(staleness=60), pytest.raises(LookupError):
        label(404)


def value(text: str, sample: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(sample + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_every_counter_of_the_statistics_is_exported() -> None:
    exported = {metric.name.removeprefix("txcache_function_") for metric in metrics.METRICS}
    counters = {field.name for field in dataclasses.fields(FunctionStats)} - {"name", "_lock"}
    assert counters <= exported
    audits = {field.name for field in dataclasses.fields(AuditStats)} - {"name", "_lock"}
    assert {f"txcache_audit_{name}" for name in audits} <= {m.name for m in metrics.METRICS}
    views = {field.name for field in dataclasses.fields(ViewStats)} - {"name", "_lock"}
    assert {f"txcache_view_{name}" for name in views} <= {m.name for m in metrics.METRICS}
    latency = {field.name for field in dataclasses.fields(OperationLatency)} - {"_lock"}
    assert {f"txcache_{name}" for name in latency} <= {metric.name for metric in metrics.METRICS}


def test_render_shows_each_function_with_help_and_type(lib: LibraryStack) -> None:
    exercise(lib)
    text = metrics.render()
    for metric in metrics.METRICS:
        assert f"# TYPE {metric.name}_total counter" in text
    name = label.stats.name
    assert value(text, f'txcache_function_hits_total{{function="{name}"}}') == label.stats.hits
    assert value(text, f'txcache_function_errors_total{{function="{name}"}}') == label.stats.errors
    assert label.stats.errors >= 1
    assert value(text, f'txcache_function_misses_total{{function="{name}",kind="compulsory"}}')


def test_every_miss_kind_and_insert_outcome_is_exported_before_it_happens(
    lib: LibraryStack,
) -> None:
    """Prometheus counts no increase into a series' first sample: a kind that appeared only
    at its first miss would lose that scrape interval (an outage's first misses, say)."""
    exercise(lib)
    text = metrics.render()
    name = label.stats.name
    for kind in metrics.MISS_KINDS_EXPORTED:
        sample = f'txcache_function_misses_total{{function="{name}",kind="{kind}"}}'
        assert value(text, sample) == label.stats.misses.get(kind, 0)
    for outcome in metrics.INSERT_OUTCOMES_EXPORTED:
        sample = f'txcache_function_inserts_total{{function="{name}",outcome="{outcome}"}}'
        assert value(text, sample) == label.stats.inserts.get(outcome, 0)


def test_the_prometheus_client_collector_reports_the_same(lib: LibraryStack) -> None:
    exercise(lib)
    registry = prometheus_client.CollectorRegistry()
    registry.register(metrics.Collector())
    text = prometheus_client.generate_latest(registry).decode()
    name = label.stats.name
    sample = f'txcache_function_hits_total{{function="{name}"}}'
    assert value(text, sample) == value(metrics.render(), sample)
    assert value(text, "txcache_lookups_total") >= 1


def test_serve_answers_get_metrics_only(lib: LibraryStack) -> None:
    exercise(lib)
    server = metrics.serve(0)
    host, port = server.server_address[:2]
    assert isinstance(host, str)
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert b"txcache_function_hits_total" in response.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://{host}:{port}/", timeout=10)
        assert missing.value.code == 404
        missing.value.close()
    finally:
        server.close()


def test_status_shows_the_functions_and_views_of_a_process_that_serves_them(
    lib: LibraryStack,
) -> None:
    exercise(lib)
    view = view_stats("shop:item")  # as txcache.django's middleware records a request
    view.record(hits=3, misses=1)
    server = metrics.serve(0)
    host, port = server.server_address[:2]
    assert isinstance(host, str)
    url = f"http://{host}:{port}/metrics"
    try:
        status = [sys.executable, "-m", "txcache", "status", "--metrics", url]
        text = subprocess.run(status, capture_output=True, text=True, timeout=60, check=False)
        report = subprocess.run(
            [*status, "--json"], capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        server.close()
    assert text.returncode == 0, text.stdout + text.stderr
    assert f"process {url}: up" in text.stdout
    assert f"  {label.stats.name}: hits {label.stats.hits}, " in text.stdout
    assert f"errors {label.stats.errors}, " in text.stdout
    counters = json.loads(report.stdout)["processes"][0]["functions"][label.stats.name]
    assert counters["errors"] == label.stats.errors
    assert 0 < counters["hit_rate"] < 1
    shown = f"  view shop:item: requests {view.requests}, hits {view.hits}, misses {view.misses}"
    assert shown in text.stdout
    views = json.loads(report.stdout)["processes"][0]["views"]
    assert views["shop:item"]["hit_rate"] == view.hit_rate


def test_status_reports_a_process_without_metrics_as_unreachable() -> None:
    url = "http://127.0.0.1:9/metrics"
    result = subprocess.run(
        [sys.executable, "-m", "txcache", "status", "--metrics", url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert f"process {url}: UNREACHABLE" in result.stdout

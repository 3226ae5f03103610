"""This process's cache statistics for Prometheus: every cacheable function's counters and
what the audit found for it, every view's (requests a framework integration served, with
their hits and misses), and the default cache's lookup and query latency.

Three ways out, all rendered from one table of metrics (:data:`METRICS`):

- :func:`render` — the text exposition format, to serve from the application's own
  ``/metrics`` route;
- :class:`Collector` — for ``prometheus_client`` (not a dependency of txcache):
  ``prometheus_client.REGISTRY.register(txcache.metrics.Collector())``;
- :func:`serve` — a small HTTP server of its own in a background thread, for a process
  without a web server (``txcache status --metrics URL`` reads it too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from txcache._cacheable_base import audit_stats, function_stats
from txcache._protocol import MISS_KINDS
from txcache._stats import AuditStats, FunctionStats, OperationLatency, ViewStats, all_view_stats

__all__ = ["METRICS", "Collector", "Metric", "MetricsServer", "Sources", "render", "serve"]

Sample = tuple[dict[str, str], float]


@dataclass(frozen=True)
class Sources:
    """The statistics the metrics are read from, taken once per scrape."""

    functions: list[FunctionStats]
    audits: list[AuditStats]
    views: list[ViewStats]
    latency: OperationLatency | None
    """The default cache's (``None`` without one)."""


@dataclass(frozen=True)
class Metric:
    """One metric: its name (without ``_total``), ``counter`` or ``gauge``, its help text,
    and how to read its samples (labels and value) from the statistics."""

    name: str
    kind: str
    help: str
    samples: Callable[[Sources], Iterable[Sample]]


def _per_function(value: Callable[[FunctionStats], float]) -> Callable[[Sources], list[Sample]]:
    def samples(sources: Sources) -> list[Sample]:
        return [({"function": s.name}, float(value(s))) for s in sources.functions]

    return samples


MISS_KINDS_EXPORTED = (*MISS_KINDS, "unavailable", "foreign", "error")
"""Every kind of miss a call records: the node's, and the library's own (no node up, a value
another secret signed, a node that refused the lookup)."""
INSERT_OUTCOMES_EXPORTED = (
    "inserted",
    "extended",
    "nondeterministic",
    "empty",
    "failed",
    "unverified",
)
"""Every outcome of storing a result: ``TXSET``'s, ``failed`` (no node took it) and
``unverified`` (without DDL triggers: its catalog could not be verified, so it was not
stored; :mod:`txcache._pending_stores`)."""


def _per_function_by(
    label: str, known: tuple[str, ...], counts: Callable[[FunctionStats], dict[str, int]]
) -> Callable[[Sources], list[Sample]]:
    """Per function and ``label``: every ``known`` value from the start (at 0 until it first
    happens: Prometheus counts no increase into a series' first sample) and any other seen."""

    def samples(sources: Sources) -> list[Sample]:
        found = []
        for s in sources.functions:
            seen = counts(s)
            for key in sorted({*known, *seen}):
                found.append(({"function": s.name, label: key}, float(seen.get(key, 0))))
        return found

    return samples


def _per_audit(value: Callable[[AuditStats], float]) -> Callable[[Sources], list[Sample]]:
    def samples(sources: Sources) -> list[Sample]:
        return [({"function": s.name}, float(value(s))) for s in sources.audits]

    return samples


def _per_view(value: Callable[[ViewStats], float]) -> Callable[[Sources], list[Sample]]:
    def samples(sources: Sources) -> list[Sample]:
        return [({"view": s.name}, float(value(s))) for s in sources.views]

    return samples


def _latency(field: str) -> Callable[[Sources], list[Sample]]:
    def samples(sources: Sources) -> list[Sample]:
        latency = sources.latency
        return [] if latency is None else [({}, float(getattr(latency, field)))]

    return samples


def _standby_queries(sources: Sources) -> list[Sample]:
    latency = sources.latency
    counts = {} if latency is None else latency.standby_counts()
    return [({"standby": name}, float(count)) for name, count in sorted(counts.items())]


METRICS: tuple[Metric, ...] = (
    Metric(
        "txcache_function_hits",
        "counter",
        "Calls answered from the cache.",
        _per_function(lambda s: s.hits),
    ),
    Metric(
        "txcache_function_misses",
        "counter",
        "Calls that missed and ran, by kind of miss.",
        _per_function_by("kind", MISS_KINDS_EXPORTED, lambda s: dict(s.misses)),
    ),
    Metric(
        "txcache_function_uncached",
        "counter",
        "Calls that ran without the cache (read/write transaction, bypass, fallback).",
        _per_function(lambda s: s.uncached),
    ),
    Metric(
        "txcache_function_errors",
        "counter",
        "Calls that raised.",
        _per_function(lambda s: s.errors),
    ),
    Metric(
        "txcache_function_inserts",
        "counter",
        "Results stored, by outcome.",
        _per_function_by("outcome", INSERT_OUTCOMES_EXPORTED, lambda s: dict(s.inserts)),
    ),
    Metric(
        "txcache_function_lease_waits",
        "counter",
        "Misses that waited for another caller computing the same key (its lease).",
        _per_function(lambda s: s.lease_waits),
    ),
    Metric(
        "txcache_function_hit_seconds",
        "counter",
        "Time spent in calls answered from the cache.",
        _per_function(lambda s: s.hit_seconds),
    ),
    Metric(
        "txcache_function_miss_seconds",
        "counter",
        "Time spent running the function on misses.",
        _per_function(lambda s: s.miss_seconds),
    ),
    Metric(
        "txcache_audit_checks",
        "counter",
        "Sampled hits re-run at their pin and compared with the cached value (audit_rate).",
        _per_audit(lambda s: s.checks),
    ),
    Metric(
        "txcache_audit_mismatches",
        "counter",
        "Audit checks whose result differed from the cached value at the same pin.",
        _per_audit(lambda s: s.mismatches),
    ),
    Metric(
        "txcache_audit_skipped",
        "counter",
        "Sampled hits the audit could not check (failed block, full queue, pin gone, ...).",
        _per_audit(lambda s: s.skipped),
    ),
    Metric(
        "txcache_view_requests",
        "counter",
        "Requests a view served in a read-only transaction (txcache.django's middleware).",
        _per_view(lambda s: s.requests),
    ),
    Metric(
        "txcache_view_hits",
        "counter",
        "Cacheable calls of a view's requests answered from the cache.",
        _per_view(lambda s: s.hits),
    ),
    Metric(
        "txcache_view_misses",
        "counter",
        "Cacheable calls of a view's requests that missed and ran.",
        _per_view(lambda s: s.misses),
    ),
    Metric(
        "txcache_lookups",
        "counter",
        "Cache lookups of read-only transactions (the default cache).",
        _latency("lookups"),
    ),
    Metric(
        "txcache_lookup_seconds",
        "counter",
        "Time spent in cache lookups (the default cache).",
        _latency("lookup_seconds"),
    ),
    Metric(
        "txcache_queries",
        "counter",
        "Database statements of read-only transactions (the default cache).",
        _latency("queries"),
    ),
    Metric(
        "txcache_standby_queries",
        "counter",
        "Of those statements, the ones run on each hot standby (the replicas setting).",
        _standby_queries,
    ),
    Metric(
        "txcache_fresh_pins",
        "counter",
        "Fresh pins (a snapshot taken now) read-only transactions asked the agent for and "
        "got (the default cache).",
        _latency("fresh_pins"),
    ),
    Metric(
        "txcache_fresh_pins_unavailable",
        "counter",
        "Fresh pins asked for and not given: the agent could not give one, or lately could "
        "not (the default cache).",
        _latency("fresh_pins_unavailable"),
    ),
    Metric(
        "txcache_query_seconds",
        "counter",
        "Time spent in database statements, rows included (the default cache).",
        _latency("query_seconds"),
    ),
)
"""Every metric this module exports, declared once."""


def _sources() -> Sources:
    from txcache._connect import default_cache  # the cache module imports this package's

    cache = default_cache()
    latency = None if cache is None else cache.latency
    return Sources(function_stats(), audit_stats(), all_view_stats(), latency)


def _exposed_name(metric: Metric) -> str:
    return f"{metric.name}_total" if metric.kind == "counter" else metric.name


def _label_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    escaped = (
        f'{key}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for key, value in labels.items()
    )
    return "{" + ",".join(escaped) + "}"


def render() -> str:
    """Every metric of :data:`METRICS` in the Prometheus text exposition format (0.0.4)."""
    sources = _sources()
    lines: list[str] = []
    for metric in METRICS:
        name = _exposed_name(metric)
        lines += [f"# HELP {name} {metric.help}", f"# TYPE {name} {metric.kind}"]
        lines += [
            f"{name}{_label_text(labels)} {value!r}" for labels, value in metric.samples(sources)
        ]
    return "\n".join(lines) + "\n"


class Collector:
    """A ``prometheus_client`` collector of :data:`METRICS` (import-free until collected)."""

    def collect(self) -> Iterator[Any]:
        """One metric family per metric, read now."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sources = _sources()
        for metric in METRICS:
            samples = list(metric.samples(sources))
            labels = sorted({key for sample_labels, _ in samples for key in sample_labels})
            family_type = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            family = family_type(metric.name, metric.help, labels=labels)
            for sample_labels, value in samples:
                family.add_metric([sample_labels[key] for key in labels], value)
            yield family

    def describe(self) -> list[Any]:
        """Nothing up front: the registry then takes the names from :meth:`collect`."""
        return []


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only GET /metrics here")
            return
        body = render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a scrape every few seconds is not news."""


class MetricsServer(ThreadingHTTPServer):
    """The server :func:`serve` starts; :meth:`close` stops it."""

    daemon_threads = True

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self.shutdown()
        self.server_close()


def serve(port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``GET /metrics`` (:func:`render`) on ``host:port`` (port 0: a free one, see
    ``server.server_address``) from a daemon thread; ``server.close()`` stops it."""
    server = MetricsServer((host, port), _Handler)
    threading.Thread(target=server.serve_forever, name="txcache-metrics", daemon=True).start()
    return server

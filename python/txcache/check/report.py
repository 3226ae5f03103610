"""The checker's report, as Markdown (what ``txcache check`` prints and writes)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from txcache.check.faults import Fault
from txcache.check.history import Verdict
from txcache.check.run import CheckReport, PhaseReport, TenantReport, describe, fault_counts

__all__ = ["as_json", "as_markdown", "when"]

_EXAMPLES = 3
_FAULT_WINDOW = 20.0


def _ddl_tracking(mode: str) -> str:
    if mode == "triggers":
        return "the DDL event triggers"
    return "no event triggers (dropped after setup): the agent checks every pin's fingerprint"


def as_markdown(report: CheckReport, command: str = "") -> str:
    """The report for people: one table per phase, anomalies with examples."""
    lines = ["# Consistency check", ""]
    if command:
        lines += [f"- command: `{command}`"]
    options = report.options
    lines += [
        f"- checked phase: {options.duration:g} s, {options.readers} readers, "
        f"{options.writers} writers, faults {', '.join(options.faults) or 'none'} "
        f"(one every {options.fault_every:g} s); control phase: {options.control_duration:g} s",
        f"- schema changes reach the caches by: {_ddl_tracking(options.ddl_tracking)}",
        f"- tenants: {_tenants(report.checked)}",
        f"- history: {report.commits} commits in order from the checker's own slot; "
        f"commits no writer logged: {report.foreign_commits}; committed writes it lacks: "
        f"{report.missing_commits}; xids two writers had (a promotion gave one out again): "
        f"{report.shared_xids}, of which not told apart by time or outcome: "
        f"{report.ambiguous_xids}; commits of an xid shown before at another position: "
        f"{report.repeated_xids}",
        f"- verdict: **{'PASSED' if report.passed else 'FAILED'}**",
        "",
        "| | checked (consistent, faults) | control (no_consistency) |",
        "|---|---|---|",
    ]
    phases: list[PhaseReport | None] = [report.checked, report.control]
    for label, value in _rows():
        cells = [value(phase) if phase is not None else "-" for phase in phases]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    for phase in (report.checked, report.control):
        if phase is not None:
            # Those that read only their own tenant's data first: the others are below.
            inconsistent = sorted(phase.inconsistent, key=lambda v: v.cross_tenant)
            lines += _examples(phase, "Inconsistent reads", inconsistent)
            lines += _examples(phase, "Cross-tenant reads", phase.cross_tenant)
    failed = [fault for fault in report.checked.faults if fault.error]
    if failed:
        lines += ["", "## Faults that failed to inject", ""]
        lines += [f"- {fault.kind}: {fault.error}" for fault in failed[:10]]
    if report.checked.errors_unexpected:
        lines += ["", "## Unexpected errors", ""]
        lines += [f"- {side}: {error}" for _, side, error in report.checked.errors_unexpected[:10]]
    return "\n".join(lines) + "\n"


def _tenants(phase: PhaseReport) -> str:
    return "; ".join(f"{name} ({tenant.description})" for name, tenant in phase.tenants.items())


def _examples(phase: PhaseReport, title: str, anomalies: list[Verdict]) -> list[str]:
    if not anomalies:
        return []
    lines = ["", f"## {title} in the {phase.mode} phase (first {_EXAMPLES})", ""]
    for verdict in anomalies[:_EXAMPLES]:
        heading = f"- {describe(verdict.read)}; {when(verdict, phase.faults)}"
        lines += [heading, "", "```", verdict.explanation, "```"]
    return lines


def when(verdict: Verdict, faults: list[Fault]) -> str:
    """When the read began, and which of ``faults`` started in the 20 s before it: what
    places an anomaly against the faults."""
    began = verdict.read.began
    clock = time.strftime("%H:%M:%S", time.gmtime(began))
    recent = [
        f"{fault.kind} {began - fault.started:.1f} s before"
        for fault in faults
        if 0 <= began - fault.started <= _FAULT_WINDOW
    ]
    listed = ", ".join(recent) or "none"
    return f"began {clock} UTC; faults started in the {_FAULT_WINDOW:g} s before: {listed}"


def _by_tenant(value: Callable[[TenantReport], object]) -> Callable[[PhaseReport], str]:
    return lambda p: ", ".join(f"{name} {value(t)}" for name, t in p.tenants.items())


def _rows() -> list[tuple[str, Any]]:
    return [
        ("read-only transactions checked", lambda p: f"{p.reads}"),
        ("… by tenant", _by_tenant(lambda t: t.reads)),
        ("read-only transactions per second", lambda p: f"{p.reads / max(p.seconds, 1e-9):.0f}"),
        ("read/write transactions committed", lambda p: f"{p.writes_committed}"),
        ("… by tenant", _by_tenant(lambda t: t.writes_committed)),
        ("read/write transactions rolled back", lambda p: f"{p.writes_rolled_back}"),
        ("**anomalies**", lambda p: f"**{len(p.anomalies)}**"),
        ("… inconsistent (by tenant)", _by_tenant(lambda t: t.inconsistent)),
        ("… **cross-tenant reads** (by tenant)", _by_tenant(lambda t: f"**{t.cross_tenant}**")),
        ("faults injected", _faults),
        (
            "takeovers (agents; promotions: until the nodes follow; a node that left: until "
            "it applied every commit again; the standby down: until the stream ran on the "
            "primary's spare)",
            _takeovers,
        ),
        (
            "promotions (no node rewound) and standbys down (none rewound or reset) that kept "
            "the cache",
            _kept,
        ),
        ("reads served from the cache", lambda p: f"{p.cache_share:.1%} of {p.cache_lookups}"),
        ("… by tenant", _by_tenant(lambda t: f"{t.cache_share:.1%} of {t.cache_lookups}")),
        ("errors during a PostgreSQL restart (allowed)", lambda p: f"{len(p.errors_allowed)}"),
        ("**other errors seen by the application**", lambda p: f"**{len(p.errors_unexpected)}**"),
        ("retried (SnapshotUnavailable)", lambda p: f"{p.retried}"),
        ("schema operations committed", _schema_ops),
        ("schema operations committed while the agent was down", _agent_down),
        ("schema operations that gave up on a lock (rolled back)", lambda p: f"{p.schema_gave_up}"),
        ("fell back to a database snapshot (no pin)", lambda p: f"{p.fell_back}"),
        ("ran on a standby (--standby-reads)", lambda p: f"{p.on_standby}"),
    ]


def _faults(phase: PhaseReport) -> str:
    counts = fault_counts(phase.faults)
    text = ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "0"
    failed = sum(1 for fault in phase.faults if fault.error)
    return f"{text} (**{failed} failed to inject**)" if failed else text


def _takeovers(phase: PhaseReport) -> str:
    """Per failover kind (agents, promotions, the standby down), the takeover times: p50
    and max over how many."""
    times: dict[str, list[float]] = {}
    for fault in phase.faults:
        if fault.took is not None:
            times.setdefault(fault.kind, []).append(fault.took)
    parts = [
        f"{kind}: p50 {statistics.median(took):.2f} s, max {max(took):.2f} s ({len(took)})"
        for kind, took in sorted(times.items())
    ]
    return "; ".join(parts) or "-"


def _kept(phase: PhaseReport) -> str:
    """How many promotions and standbys down left every node's entries in place."""
    moves = [fault for fault in phase.faults if fault.rewound is not None]
    if not moves:
        return "-"
    return f"{sum(1 for fault in moves if not fault.rewound)} of {len(moves)}"


def _schema_ops(phase: PhaseReport) -> str:
    total = sum(phase.schema_ops.values())
    kinds = ", ".join(f"{kind} {count}" for kind, count in phase.schema_ops.items())
    return f"{total} ({kinds})" if kinds else "0"


def _agent_down(phase: PhaseReport) -> str:
    return f"{phase.schema_while_agent_down}"


def as_json(report: CheckReport) -> str:
    """The report for programs (anomalies reduced to their explanations, and when each
    read began with the faults just before it)."""

    def phase(p: PhaseReport | None) -> dict[str, Any] | None:
        if p is None:
            return None
        data = asdict(p)
        data["anomalies"] = [v.explanation for v in p.anomalies]
        data["anomalies_when"] = [when(v, p.faults) for v in p.anomalies]
        data["cross_tenant"] = len(p.cross_tenant)
        data["cache_share"] = p.cache_share
        return data

    return json.dumps(
        {
            "options": asdict(report.options),
            "passed": report.passed,
            "commits": report.commits,
            "foreign_commits": report.foreign_commits,
            "missing_commits": report.missing_commits,
            "shared_xids": report.shared_xids,
            "ambiguous_xids": report.ambiguous_xids,
            "repeated_xids": report.repeated_xids,
            "checked": phase(report.checked),
            "control": phase(report.control),
        },
        indent=2,
        default=str,
    )

"""The checker's report, as Markdown (what ``txcache check`` prints and writes)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from txcache.check.run import CheckReport, PhaseReport, describe, fault_counts

__all__ = ["as_json", "as_markdown"]

_EXAMPLES = 3


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
        f"- history: {report.commits} commits in order from the checker's own slot; "
        f"commits no writer logged: {report.foreign_commits}",
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
        if phase is not None and phase.anomalies:
            lines += ["", f"## Anomalies in the {phase.mode} phase (first {_EXAMPLES})", ""]
            for verdict in phase.anomalies[:_EXAMPLES]:
                lines += [f"- {describe(verdict.read)}", "", "```", verdict.explanation, "```"]
    if report.checked.errors_unexpected:
        lines += ["", "## Unexpected errors", ""]
        lines += [f"- {side}: {error}" for _, side, error in report.checked.errors_unexpected[:10]]
    return "\n".join(lines) + "\n"


def _rows() -> list[tuple[str, Any]]:
    return [
        ("read-only transactions checked", lambda p: f"{p.reads}"),
        ("read/write transactions committed", lambda p: f"{p.writes_committed}"),
        ("read/write transactions rolled back", lambda p: f"{p.writes_rolled_back}"),
        ("**anomalies**", lambda p: f"**{len(p.anomalies)}**"),
        ("faults injected", _faults),
        ("reads served from the cache", lambda p: f"{p.cache_share:.1%} of {p.cache_lookups}"),
        ("errors during a PostgreSQL restart (allowed)", lambda p: f"{len(p.errors_allowed)}"),
        ("**other errors seen by the application**", lambda p: f"**{len(p.errors_unexpected)}**"),
        ("retried (SnapshotUnavailable)", lambda p: f"{p.retried}"),
        ("fell back to a database snapshot (no pin)", lambda p: f"{p.fell_back}"),
    ]


def _faults(phase: PhaseReport) -> str:
    counts = fault_counts(phase.faults)
    return ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "0"


def as_json(report: CheckReport) -> str:
    """The report for programs (anomalies reduced to their explanations)."""

    def phase(p: PhaseReport | None) -> dict[str, Any] | None:
        if p is None:
            return None
        data = asdict(p)
        data["anomalies"] = [v.explanation for v in p.anomalies]
        data["cache_share"] = p.cache_share
        return data

    return json.dumps(
        {
            "options": asdict(report.options),
            "passed": report.passed,
            "commits": report.commits,
            "foreign_commits": report.foreign_commits,
            "checked": phase(report.checked),
            "control": phase(report.control),
        },
        indent=2,
        default=str,
    )

"""The issue's goals for the cache node (``node_speed.py``) and the per-round ratios they
are judged by: two servers measured seconds apart, round by round, so that a change of the
shared host between rounds cancels out.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _node_phases import LOOKUPS, MAIN


def mean_of(rows: list[dict[str, Any]], label: str, cell: str, key: str) -> float:
    """The mean of ``key`` over the rounds of one target and cell (NaN when absent)."""
    values = [row[key] for row in rows if row["target"] == label and row["cell"] == cell]
    return sum(values) / len(values) if values else float("nan")


@dataclass(frozen=True)
class Ratios:
    """Per-round ratios of one cell, and whether they come from clean runs only."""

    values: list[float]
    clean: bool

    @property
    def median(self) -> float:
        """The median (NaN when there is no round)."""
        return statistics.median(self.values) if self.values else float("nan")

    def __str__(self) -> str:
        """``1.23x`` (one round) or ``1.23x (1.10-1.40)``: median and range; ``*`` marks
        ratios of runs that steal disturbed (no round was clean in both)."""
        if not self.values:
            return "-"
        text = f"{self.median:.2f}x"
        if len(self.values) > 1:
            text += f" ({min(self.values):.2f}-{max(self.values):.2f})"
        return text if self.clean else text + " *"


def round_ratios(rows: list[dict[str, Any]], a: str, b: str, cell: str, key: str = "ops") -> Ratios:
    """``a / b`` for one cell, each round apart: the two were measured seconds apart, so a
    change of the host between rounds cancels out. Rounds in which either run stayed
    disturbed by steal (``clean`` false) are left out, unless no round is clean in both."""
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        if row["cell"] == cell and row["target"] in (a, b):
            by_round.setdefault(row["round"], {})[row["target"]] = row
    pairs = [
        (v[a][key] / v[b][key], v[a].get("clean", True) and v[b].get("clean", True))
        for _, v in sorted(by_round.items())
        if a in v and b in v and v[b][key]
    ]
    clean = [value for value, ok in pairs if ok]
    return Ratios(clean, True) if clean else Ratios([value for value, _ in pairs], not pairs)


def goals(
    rows: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    mem: list[dict[str, Any]],
) -> list[str]:
    """The issue's goals, each marked met or not met."""

    def cells(pipeline: int) -> list[str]:
        return [s.name for s in MAIN if s.pipeline == pipeline]

    def ratios(a: str, b: str, names: list[str], key: str = "ops") -> list[Ratios]:
        return [round_ratios(rows, a, b, n, key) for n in names]

    def text(names: list[str], values: list[Ratios]) -> str:
        return ", ".join(f"{n}: {v}" for n, v in zip(names, values, strict=True))

    def medians(values: list[Ratios]) -> list[float]:
        return [v.median for v in values]

    pipelined = ratios("txcached", "redis", cells(16))
    plain = ratios("txcached", "redis", cells(1))
    every = [s.name for s in MAIN]
    cpu = ratios("txcached", "redis", every, "cpu_us_per_request")
    versioned = ratios("txcached TX", "txcached", every)
    lookups = [s.name for s in LOOKUPS]
    lookups_alone = ratios("txcached TX", "txcached", lookups)
    overhead = {row["target"]: row["overhead_bytes"] for row in mem}
    writes = [
        f"{r['cell']}: {r['syscalls']['writes']:.2f}" for r in calls if r["target"] == "txcached"
    ]
    batch_writes = [r["syscalls"]["writes"] for r in calls if r["target"] == "txcached"]
    nan = float("nan")
    checks: list[tuple[str, str, list[float], Callable[[list[float]], bool]]] = [
        (
            "throughput pipelined ≥ 1.5x Redis",
            text(cells(16), pipelined),
            medians(pipelined),
            lambda values: min(values) >= 1.5,
        ),
        (
            "throughput unpipelined ≥ 1.0x Redis",
            text(cells(1), plain),
            medians(plain),
            lambda values: min(values) >= 1.0,
        ),
        (
            "server CPU per request < Redis's",
            text(every, cpu),
            medians(cpu),
            lambda values: max(values) < 1.0,
        ),
        (
            "versioned lookup ≥ 0.8x plain GET (lookups alone)",
            text(lookups, lookups_alone),
            medians(lookups_alone),
            lambda values: min(values) >= 0.8,
        ),
        (
            "versioned ≥ 0.8x plain, 90:10 TXGET/TXSET against GET/SET",
            text(every, versioned),
            medians(versioned),
            lambda values: min(values) >= 0.8,
        ),
        (
            "per-item overhead ≤ 40 B (plain)",
            f"{overhead.get('txcached', nan):.0f} B plain, "
            f"{overhead.get('txcached TX', nan):.0f} B versioned",
            [overhead.get("txcached", nan)],
            lambda values: values[0] <= 40,
        ),
        (
            "one write per read batch",
            "writes per batch " + (", ".join(writes) or "-"),
            batch_writes,
            lambda values: max(values) <= 1.05,
        ),
    ]
    lines = [
        "## Goals (issue 7)",
        "",
        "Ratios: the median of the rounds' ratios, with their range, over the rounds where both "
        "runs were clean of CPU steal (`*`: none was, all rounds); a goal is met when every "
        "cell's median meets it (*not measured*: a server or tool it needs was not installed).",
        "",
        "| goal | measured (txcached) | |",
        "|---|---|---|",
    ]
    for goal, measured, values, holds in checks:
        if not values or any(value != value for value in values):
            verdict = "not measured"
        else:
            verdict = "met" if holds(values) else "**not met**"
        lines.append(f"| {goal} | {measured} | {verdict} |")
    return [*lines, ""]

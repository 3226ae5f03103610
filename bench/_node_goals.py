"""The goals for the cache node (``node_speed.py``) and the per-round ratios they
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


@dataclass(frozen=True)
class Goal:
    """One of the goals: what it asks, what was measured (as the report shows it),
    the values it is judged on and the test they must pass."""

    goal: str
    measured: str
    values: list[float]
    holds: Callable[[list[float]], bool]

    def verdict(self) -> str:
        """``met``, ``**not met**``, or ``not measured`` when a value is missing (NaN)."""
        if not self.values or any(value != value for value in self.values):
            return "not measured"
        return "met" if self.holds(self.values) else "**not met**"


def goals(
    rows: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    mem: list[dict[str, Any]],
) -> list[str]:
    """The goals, each marked met or not met."""
    checks = [*_speed_goals(rows), *_versioned_goals(rows), _memory_goal(mem), _write_goal(calls)]
    lines = [
        "## Goals",
        "",
        "Ratios: the median of the rounds' ratios, with their range, over the rounds where both "
        "runs were clean of CPU steal (`*`: none was, all rounds); a goal is met when every "
        "cell's median meets it (*not measured*: a server or tool it needs was not installed).",
        "",
        "| goal | measured (txcached) | |",
        "|---|---|---|",
    ]
    lines += [f"| {check.goal} | {check.measured} | {check.verdict()} |" for check in checks]
    return [*lines, ""]


def _cells(pipeline: int) -> list[str]:
    """The main cells run at ``pipeline`` requests per batch."""
    return [s.name for s in MAIN if s.pipeline == pipeline]


def _ratio_goal(
    rows: list[dict[str, Any]],
    goal: str,
    ab: tuple[str, str],
    names: list[str],
    holds: Callable[[list[float]], bool],
    key: str = "ops",
) -> Goal:
    """A goal on the per-round ratios ``a / b`` of ``key`` in the cells ``names``, judged
    on their medians."""
    values = [round_ratios(rows, *ab, name, key) for name in names]
    measured = ", ".join(f"{n}: {v}" for n, v in zip(names, values, strict=True))
    return Goal(goal, measured, [v.median for v in values], holds)


def _speed_goals(rows: list[dict[str, Any]]) -> list[Goal]:
    """txcached against Redis: throughput with and without pipelining, CPU per request."""
    against = ("txcached", "redis")
    every = [s.name for s in MAIN]
    return [
        _ratio_goal(
            rows,
            "throughput pipelined ≥ 1.5x Redis",
            against,
            _cells(16),
            lambda values: min(values) >= 1.5,
        ),
        _ratio_goal(
            rows,
            "throughput unpipelined ≥ 1.0x Redis",
            against,
            _cells(1),
            lambda values: min(values) >= 1.0,
        ),
        _ratio_goal(
            rows,
            "server CPU per request < Redis's",
            against,
            every,
            lambda values: max(values) < 1.0,
            "cpu_us_per_request",
        ),
    ]


def _versioned_goals(rows: list[dict[str, Any]]) -> list[Goal]:
    """txcached's versioned commands against its plain ones: lookups alone, and a mix."""
    versioned = ("txcached TX", "txcached")
    return [
        _ratio_goal(
            rows,
            "versioned lookup ≥ 0.8x plain GET (lookups alone)",
            versioned,
            [s.name for s in LOOKUPS],
            lambda values: min(values) >= 0.8,
        ),
        _ratio_goal(
            rows,
            "versioned ≥ 0.8x plain, 90:10 TXGET/TXSET against GET/SET",
            versioned,
            [s.name for s in MAIN],
            lambda values: min(values) >= 0.8,
        ),
    ]


def _memory_goal(mem: list[dict[str, Any]]) -> Goal:
    """Bytes per item beyond the item itself, plain (versioned shown beside it)."""
    overhead = {row["target"]: row["overhead_bytes"] for row in mem}
    nan = float("nan")
    return Goal(
        "per-item overhead ≤ 40 B (plain)",
        f"{overhead.get('txcached', nan):.0f} B plain, "
        f"{overhead.get('txcached TX', nan):.0f} B versioned",
        [overhead.get("txcached", nan)],
        lambda values: values[0] <= 40,
    )


def _write_goal(calls: list[dict[str, Any]]) -> Goal:
    """``write`` system calls per batch of pipelined reads."""
    own = [r for r in calls if r["target"] == "txcached"]
    writes = [f"{r['cell']}: {r['syscalls']['writes']:.2f}" for r in own]
    return Goal(
        "one write per read batch",
        "writes per batch " + (", ".join(writes) or "-"),
        [r["syscalls"]["writes"] for r in own],
        lambda values: max(values) <= 1.05,
    )

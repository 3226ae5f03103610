"""Statistics and reports, shared by every benchmark: percentiles and summaries, numbers and
Markdown tables, the note of what ran where (machine, build, command), the writers of
``results/<name>.md`` and ``results/<name>.json``, and plots.

A benchmark builds its report body as a list of Markdown lines and hands it, with its raw
samples, to :func:`write_report`; the header (command, machine, code, date) is the same for
all of them.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"

__all__ = [
    "BENCH_DIR",
    "REPO",
    "RESULTS_DIR",
    "build_note",
    "command_line",
    "fmt",
    "freeze_binaries",
    "git",
    "log",
    "machine_lines",
    "machine_note",
    "num",
    "per_round_p50",
    "percentile",
    "quantiles",
    "ratio",
    "result_name",
    "save_plot",
    "summarize",
    "table",
    "write_json",
    "write_markdown",
    "write_report",
]


def log(message: str) -> None:
    """Progress on stdout, timestamped, flushed at once."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Count, mean, p50, p90, p99 and max of ``values`` (NaN where empty)."""
    return {
        "count": len(values),
        "mean": statistics.fmean(values) if values else float("nan"),
        "p50": percentile(values, 0.50),
        "p90": percentile(values, 0.90),
        "p99": percentile(values, 0.99),
        "max": max(values) if values else float("nan"),
    }


def quantiles(values: Sequence[float], scale: float = 1.0) -> list[float]:
    """The distribution at every 0.5 % (0 %, 0.5 %, …, 100 %), each divided by ``scale``:
    what a CDF plot needs, without keeping every raw sample."""
    ordered = sorted(values)
    if not ordered:
        return []
    last = len(ordered) - 1
    return [round(ordered[round(last * step / 200)] / scale, 2) for step in range(201)]


def per_round_p50(values: Sequence[float], rounds: int, scale: float = 1.0) -> list[float]:
    """The median of each round's share of ``values`` (appended round by round), divided by
    ``scale``: shows whether a series drifted during the run."""
    size = max(1, len(values) // max(1, rounds))
    chunks = [values[start : start + size] for start in range(0, size * rounds, size)]
    return [round(statistics.median(chunk) / scale, 2) for chunk in chunks if chunk]


# -- numbers and tables ----------------------------------------------------------------------


def fmt(value: float, digits: int = 2) -> str:
    """A number for a Markdown table (``-`` for NaN)."""
    return "-" if value != value else f"{value:.{digits}f}"


def num(value: float, digits: int = 0) -> str:
    """A number with thousands separators (``-`` for NaN)."""
    return "-" if value != value else f"{value:,.{digits}f}"


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``1.23x`` (``-`` when either is missing or ``b`` is 0)."""
    return "-" if not b or a != a or b != b else f"{a / b:.2f}x"


def table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """A Markdown table. ``align`` has one letter per column, ``l`` or ``r`` (missing
    letters: left); cells are rendered with ``str``."""
    marks = [("---:" if align[i : i + 1] == "r" else "---") for i in range(len(header))]
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join(marks)}|"]
    lines += [f"| {' | '.join(str(cell) for cell in row)} |" for row in rows]
    return lines


# -- what ran where --------------------------------------------------------------------------


def git(*args: str) -> str:
    """A read-only git query in the repository (``''`` when git is unavailable)."""
    result = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )
    return result.stdout.strip()


_FROZEN: dict[str, str] = {}


def freeze_binaries() -> None:
    """Copy ``txcached`` and ``txcache-agent`` from this checkout's release build aside and
    point txcache at the copies (``$TXCACHED_BIN``, ``$TXCACHE_AGENT_BIN``, which
    :func:`txcache.stack.find_binary` reads), so that a rebuild while the benchmark runs
    cannot swap them. Records what was copied for the report."""
    if _FROZEN:
        return
    scratch = Path(tempfile.mkdtemp(prefix="txcache-bench-bin-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    for name in ("txcache-agent", "txcached"):
        built = REPO / "target" / "release" / name
        if not built.is_file():
            raise SystemExit(f"{built} is missing: run `make build` first")
        copy = scratch / name
        shutil.copy2(built, copy)
        os.environ[name.upper().replace("-", "_") + "_BIN"] = str(copy)
        digest = hashlib.sha256(copy.read_bytes()).hexdigest()[:12]
        stamp = datetime.fromtimestamp(built.stat().st_mtime, UTC).strftime("%H:%M UTC")
        _FROZEN[name] = f"{name} built {stamp} (sha256 {digest})"
    if git("status", "--porcelain", "crates"):
        _FROZEN["dirty"] = "; crates/ had uncommitted changes"


def build_note() -> str:
    """Which code ran: the commit and the (frozen) binaries, built by ``make build``."""
    freeze_binaries()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    binaries = ", ".join(_FROZEN[name] for name in ("txcache-agent", "txcached"))
    return f"commit {commit}; {binaries}{_FROZEN.get('dirty', '')}"


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return float("nan")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_note(postgres: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the numbers were measured on; ``postgres`` adds the database's lines
    (``postgres``: its version, ``storage``, ``fsync``)."""
    return {
        "build": build_note(),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": round(_memory_gib(), 1),
        "kernel": platform.release(),
        **(postgres or {}),
        "python": platform.python_version(),
        "load_average_at_start": [round(value, 2) for value in os.getloadavg()],
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def machine_lines(note: Mapping[str, Any]) -> list[str]:
    """The machine note as Markdown bullet lines (the database's only when it has them)."""
    lines = [
        f"- machine: {note['nproc']} CPUs ({note['cpu']}), {note['memory_gib']} GiB RAM, "
        f"Linux {note['kernel']}"
    ]
    if "postgres" in note:
        lines += [
            f"- PostgreSQL: {note['postgres']}",
            f"- cluster storage: {note['storage']} (fsync={note['fsync']})",
        ]
    load = ", ".join(map(str, note["load_average_at_start"]))
    return [
        *lines,
        f"- code: {note['build']}",
        f"- date: {note['date']}; load average at start (1, 5, 15 min): {load} (other work "
        "may share the machine)",
    ]


def command_line() -> str:
    """The exact command this run was started with."""
    script = Path(sys.argv[0])
    with_venv = Path(".venv/bin/python") if (Path.cwd() / ".venv").is_dir() else sys.executable
    return shlex.join([str(with_venv), str(script), *sys.argv[1:]])


# -- writing ---------------------------------------------------------------------------------


def result_name(base: str, quick: bool, storage: str = "disk", *extra: str) -> str:
    """The file name (no suffix) of a run's results: ``base``, then what differs from the
    default run (``_quick``, ``_tmpfs``, ``extra``)."""
    parts = [base, *(["quick"] if quick else []), *([storage] if storage != "disk" else [])]
    return "_".join([*parts, *extra])


def write_markdown(name: str, lines: Sequence[str]) -> Path:
    """Write ``results/<name>.md``; returns its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path


def write_json(name: str, payload: Mapping[str, Any]) -> Path:
    """Write ``results/<name>.json`` (values JSON cannot hold as their ``str``)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def write_report(
    name: str,
    title: str,
    note: Mapping[str, Any],
    body: Sequence[str],
    raw: Mapping[str, Any],
    header: Sequence[str] | None = None,
) -> Path:
    """Write ``results/<name>.md`` (title, command and ``header``, by default the machine
    note, on top of ``body``) and ``results/<name>.json`` (command, note and ``raw``);
    returns the Markdown's path."""
    command = command_line()
    top = [f"# {title}", "", f"- command: `{command}`", *(header or machine_lines(note)), ""]
    write_json(name, {"command": command, "machine": dict(note), **raw})
    return write_markdown(name, [*top, *body])


def save_plot(
    path: Path, draw: Callable[[list[Any]], None], panels: int = 1, height: float = 4.2
) -> bool:
    """Draw ``panels`` side-by-side axes with ``draw`` and save them as ``path`` (PNG);
    ``False`` when matplotlib is not installed (``pip install 'txcache[bench]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(1, panels, figsize=(6 * panels, height), squeeze=False)
    draw(list(axes[0]))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True

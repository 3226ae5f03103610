"""Counting a server's instructions per request with callgrind (``node_speed.py --only
instructions``).

A server runs under ``valgrind --tool=callgrind --instr-atstart=no``: nothing is counted
while it starts and is preloaded. :func:`counted` switches instrumentation on for one load
run (``callgrind_control -i on``), then off, dumps (``callgrind_control -d``; a dump also
zeroes the counters) and reads the dump's ``totals:`` line. Callgrind counts the user-space
instructions the process executes (``Ir``), its libraries included, all threads
(serialized, which changes nothing for counting); not kernel work, not cache misses, not
time. Those counts repeat within a fraction of a percent from run to run, which is why they
are reported: on a shared host with CPU steal, timings do not.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["counted", "guest_fd_limit", "instructions_table", "under_callgrind"]


def under_callgrind(out_dir: Path) -> list[str]:
    """The command prefix that runs a server under callgrind, instrumentation off, its
    dumps in ``out_dir`` (``cg.<pid>.out.<part>``)."""
    out = out_dir / "cg.%p.out"
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


def guest_fd_limit() -> int:
    """The descriptor limit a program sees under valgrind (which keeps a few descriptors for
    itself): the only hard limit valgrind lets it set (memcached sets it to its ``-c``)."""
    command = ["valgrind", "--tool=none", "sh", "-c", "ulimit -Hn"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return int(result.stdout.split()[-1])


def _control(pid: int, *args: str) -> None:
    """``callgrind_control <args> <pid>``; raises if it fails."""
    command = ["callgrind_control", *args, str(pid)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")


def _total(dump: Path) -> int | None:
    """The ``totals:`` line of a complete dump, or None while it is being written."""
    for line in reversed(dump.read_text(errors="replace").splitlines()):
        if line.startswith("totals:"):
            return int(line.split()[1])
    return None


def _dumped(out_dir: Path, pid: int, part: int) -> int:
    """Waits for dump ``part`` of ``pid`` and returns its instruction count."""
    dump = out_dir / f"cg.{pid}.out.{part}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        total = _total(dump) if dump.is_file() else None
        if total is not None:
            return total
        time.sleep(0.2)
    raise RuntimeError(f"callgrind wrote no {dump}")


@contextmanager
def counted(pid: int, out_dir: Path, result: dict[str, Any]) -> Iterator[None]:
    """Counts the instructions of server ``pid`` (running under :func:`under_callgrind`)
    while the body runs; sets ``result["instructions"]``."""
    parts = len(list(out_dir.glob(f"cg.{pid}.out.*")))
    _control(pid, "-i", "on")
    try:
        yield
    finally:
        _control(pid, "-i", "off")
    _control(pid, "-d")
    result["instructions"] = _dumped(out_dir, pid, parts + 1)


def instructions_table(rows: list[dict[str, Any]]) -> list[str]:
    """Instructions per request for every server and pipeline depth, and each beside Redis."""
    pipelines = sorted({row["pipeline"] for row in rows}, reverse=True)
    redis = {row["pipeline"]: row["per_request"] for row in rows if row["target"] == "redis"}
    header = " | ".join(f"pipeline {p} | vs Redis" for p in pipelines)
    lines = [
        "| server | commands | " + header + " |",
        "|---|---|" + "---:|---:|" * len(pipelines),
    ]
    for target in dict.fromkeys(row["target"] for row in rows):
        mine = {row["pipeline"]: row for row in rows if row["target"] == target}
        cells = []
        for pipeline in pipelines:
            row = mine.get(pipeline)
            if row is None:
                cells.append("- | -")
                continue
            base = redis.get(pipeline)
            versus = f"{row['per_request'] / base:.2f}x" if base else "-"
            cells.append(f"{row['per_request']:,.0f} | {versus}")
        commands = next(iter(mine.values()))["commands"]
        lines.append(f"| {target} | {commands} | " + " | ".join(cells) + " |")
    return [*lines, ""]

"""Counting a server's instructions and simulated cache misses per request with callgrind
(``node_speed.py --only instructions``).

A server runs under ``valgrind --tool=callgrind --instr-atstart=no --cache-sim=yes``: nothing
is counted while it starts and is preloaded. :func:`counted` switches instrumentation on for
one load run (``callgrind_control -i on``), then off, dumps (``callgrind_control -d``; a dump
also zeroes the counters) and reads the dump's ``totals:`` line. Callgrind counts the
user-space instructions the process executes (``Ir``), its libraries included, all threads
(serialized, which changes nothing for counting); not kernel work, not time.

It also runs every data access through a simulated cache of a fixed shape (:data:`CACHES`),
the same on every host, and counts the reads that miss its last level (``DLmr``): on a real
machine those are the loads that wait for the next level, the shared L3 or memory, where a
lookup's time goes (docs/node-speed.md). The simulation knows nothing of prefetching or of
misses that overlap, so it counts misses, not their cost. The instructions repeat within
about 1 % from run to run and the misses within about 5 % (hash tables are seeded at random
per process), which is why they are reported: on a shared host with CPU steal, timings do
not.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from txcache.stack import wait_until

__all__ = [
    "CACHES",
    "counted",
    "guest_fd_limit",
    "instructions_body",
    "per_request_table",
    "under_callgrind",
]

#: The simulated caches, as valgrind options (size, ways, line): a 32 KiB instruction and a
#: 48 KiB data L1, and a 2 MiB last level, one core's private L2 on current server CPUs.
CACHES = ["--I1=32768,8,64", "--D1=49152,12,64", "--LL=2097152,16,64"]


def under_callgrind(out_dir: Path) -> list[str]:
    """The command prefix that runs a server under callgrind, instrumentation off, its
    dumps in ``out_dir`` (``cg.<pid>.out.<part>``)."""
    out = out_dir / "cg.%p.out"
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--cache-sim=yes",
        *CACHES,
        f"--callgrind-out-file={out}",
    ]


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


def _totals(dump: Path) -> dict[str, int] | None:
    """The event totals of a complete dump (``Ir``, ``DLmr``, …), or None while it is
    being written."""
    events: list[str] = []
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("totals:"):
            return dict(zip(events, map(int, line.split()[1:]), strict=False))
    return None


def _dumped(out_dir: Path, pid: int, part: int) -> dict[str, int]:
    """Waits for dump ``part`` of ``pid`` and returns its event totals."""
    dump = out_dir / f"cg.{pid}.out.{part}"
    return wait_until(
        lambda: _totals(dump) if dump.is_file() else None,
        f"callgrind to write {dump}",
        timeout=60,
        interval=0.2,
    )


@contextmanager
def counted(pid: int, out_dir: Path, result: dict[str, Any]) -> Iterator[None]:
    """Counts the instructions and simulated last-level read misses of server ``pid``
    (running under :func:`under_callgrind`) while the body runs; sets
    ``result["instructions"]`` and ``result["misses"]``."""
    parts = len(list(out_dir.glob(f"cg.{pid}.out.*")))
    _control(pid, "-i", "on")
    try:
        yield
    finally:
        _control(pid, "-i", "off")
    _control(pid, "-d")
    totals = _dumped(out_dir, pid, parts + 1)
    result["instructions"] = totals["Ir"]
    result["misses"] = totals["DLmr"]


def per_request_table(rows: list[dict[str, Any]], field: str, digits: int = 0) -> list[str]:
    """``row[field]`` (a count per request) for every server and pipeline depth, and each
    beside Redis's, with ``digits`` decimals."""
    pipelines = sorted({row["pipeline"] for row in rows}, reverse=True)
    redis = {row["pipeline"]: row[field] for row in rows if row["target"] == "redis"}
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
            versus = f"{row[field] / base:.2f}x" if base else "-"
            cells.append(f"{row[field]:,.{digits}f} | {versus}")
        commands = next(iter(mine.values()))["commands"]
        lines.append(f"| {target} | {commands} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def instructions_body(rows: list[dict[str, Any]], budgets: dict[int, int]) -> list[str]:
    """The report of ``node_speed.py --only instructions``: what is counted, how, and the
    per-request tables."""
    budget_text = ", ".join(f"{n:,} at pipeline {p}" for p, n in budgets.items())
    return [
        "## User-space instructions per request (callgrind `Ir`)",
        "",
        "What this counts: the instructions each server process executes in user space "
        "(its own code and its libraries: libc, malloc, jemalloc in Redis), all threads, "
        "background timers included, divided by the requests answered. It does *not* count "
        "kernel work (system calls, TCP loopback, scheduling) or stalls, so it is not time. "
        "It is reported because it repeats to within about 1 % from run to run on this "
        "shared host, where CPU steal makes timings noisy.",
        "",
        f"Per server a fresh process; per row it is flushed and preloaded (100,000 keys, not "
        f"counted), then instrumentation is switched on (`callgrind_control -i on`) for "
        f"a fixed budget of requests ({budget_text}) by `txcache-loadgen`: 8 connections, "
        "90 % GET, uniform keys, 16 B keys, 100 B values; then off, and `callgrind_control "
        "-d` dumps the count.",
        "",
        *per_request_table(rows, "instructions_per_request"),
        "## Simulated last-level cache misses per request (callgrind `DLmr`)",
        "",
        "What this counts: the data reads of the same runs that miss the last level of a "
        "simulated cache of a fixed shape (48 KiB L1 data, 2 MiB last level: one core's L2 "
        "on current server CPUs), the loads that on a real machine wait for the shared L3 or "
        "memory. A dependent chain of them is where a pipelined lookup's time goes "
        "(docs/node-speed.md). The simulation has no prefetcher and does not know which "
        "misses overlap, so this counts misses, not their cost. It moves by about 5 % from "
        "run to run (each process seeds its hash tables at random, which places the items "
        "differently), where timings move by 25 to 40 %.",
        "",
        *per_request_table(rows, "misses_per_request", digits=2),
    ]

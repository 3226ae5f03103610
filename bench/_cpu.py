"""Where the CPU time went, from /proc: a process's CPU and run-queue time, the host's
stolen time, other work sharing the machine, the database server's processes, CPU per
component of a stack, and pinning processes to CPUs.

Every benchmark shares its machine with whatever else runs there (and, on a virtual
machine, with other guests), so each report says how much of both happened meanwhile.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

from txcache.stack import child_pids

__all__ = [
    "PLACEMENT_HELP",
    "ForeignCpu",
    "PhaseCpu",
    "context_switches",
    "cpu_by_child",
    "cpu_seconds",
    "database_cpu_seconds",
    "in_threads",
    "place_database_apart",
    "postmaster_pid",
    "run_queue_seconds",
    "set_affinity",
    "steal_seconds",
]

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU time of process ``pid`` so far; with ``reaped``, also that of the
    children it has reaped (a postmaster: the backends that exited)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11 : 15 if reaped else 13]) / _TICK


def run_queue_seconds(pid: int) -> float:
    """Time the threads of process ``pid`` have spent runnable but waiting for a CPU."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of ``pid`` so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            lines = (task / "status").read_text().splitlines()
        except OSError:  # a thread that ended meanwhile
            continue
        total += sum(int(line.split()[1]) for line in lines if "ctxt_switches" in line)
    return total


def steal_seconds() -> float:
    """CPU time the hypervisor has given to other guests while this machine's CPUs wanted to
    run (``steal`` in /proc/stat), all CPUs together, since boot."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / _TICK


def _system_busy_seconds() -> float:
    """CPU time every CPU of the machine has spent busy (not idle, iowait or steal)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / _TICK


def _processes() -> dict[int, tuple[int, float, str]]:
    """Every live process: its parent, its CPU time including that of the children it has
    reaped (utime, stime, cutime, cstime), and its name."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        name, fields = text[text.find("(") + 1 : text.rfind(")")], text[text.rfind(")") + 1 :]
        values = fields.split()
        table[int(entry.name)] = (int(values[1]), sum(int(v) for v in values[11:15]) / _TICK, name)
    return table


def _descends_from(pid: int, ancestor: int, parents: Mapping[int, int]) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = parents.get(pid, 0)
    return False


def _own_tree_seconds() -> float:
    """CPU time of this process and all its descendants, live or reaped (PostgreSQL and its
    backends, pgbench, txcached, txcache-agent are all started from here)."""
    table = _processes()
    parents = {pid: parent for pid, (parent, _, _) in table.items()}
    me = os.getpid()
    return sum(s for pid, (_, s, _) in table.items() if _descends_from(pid, me, parents))


class ForeignCpu:
    """CPU seconds used by processes that are not this benchmark's, between start and
    :meth:`seconds` (other work sharing the machine: it makes the numbers noisy)."""

    def __init__(self) -> None:
        """Start counting."""
        self.start = _system_busy_seconds() - _own_tree_seconds()

    def seconds(self) -> float:
        """Foreign CPU seconds since the start."""
        return max(0.0, _system_busy_seconds() - _own_tree_seconds() - self.start)


def cpu_by_child(component: Callable[[str], str]) -> dict[str, float]:
    """CPU seconds so far of each child process of this one with all its descendants (live
    or reaped), summed by ``component(name of the child)``; ``"this process"``: this
    process's own threads."""
    table = _processes()
    parents = {pid: parent for pid, (parent, _, _) in table.items()}
    me = os.getpid()
    totals: dict[str, float] = {}
    for child, (parent, _, name) in table.items():
        if parent != me:
            continue
        key = component(name)
        tree = sum(s for pid, (_, s, _) in table.items() if _descends_from(pid, child, parents))
        totals[key] = totals.get(key, 0.0) + tree
    totals["this process"] = cpu_seconds(me)
    return totals


PLACEMENT_HELP = (
    "'shared': every process may run on every CPU; 'split': the database server's processes "
    "(walsender included) on the first CPU, everything else (pgbench, agent, node, this "
    "script) on the others, as the paper measured with the database on its own machine"
)


def postmaster_pid(server: Any) -> int:
    """The server's postmaster, from the first line of its ``postmaster.pid``."""
    return int((server.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])


def database_cpu_seconds(server: Any) -> float:
    """CPU time the database server has used so far: the postmaster, every live child
    (backends, walsenders, checkpointer, ...) and every child that has exited (reaped by the
    postmaster). The host's stolen time distorts it less than throughput."""
    postmaster = postmaster_pid(server)
    table = _processes()
    return sum(s for pid, (parent, s, _) in table.items() if postmaster in (pid, parent))


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Pin every thread of process ``pid`` to ``cpus``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(ProcessLookupError, FileNotFoundError):  # a thread that ended
            os.sched_setaffinity(int(task.name), cpus)


def place_database_apart(server: Any) -> None:
    """Pin ``server``'s processes to the first CPU (backends and walsenders forked later
    inherit it) and this process, with whatever it starts from now on, to the other CPUs.

    Call again after every restart of the server."""
    cpus = os.cpu_count() or 1
    if cpus < 2:
        raise SystemExit("--placement split needs at least 2 CPUs")
    database, rest = {0}, set(range(1, cpus))
    postmaster = postmaster_pid(server)
    for pid in [postmaster, *child_pids(postmaster)]:
        with suppress(ProcessLookupError):  # an auxiliary process that exited meanwhile
            os.sched_setaffinity(pid, database)
    os.sched_setaffinity(0, rest)


class PhaseCpu:
    """Over a ``with`` block: its wall seconds, the CPU seconds of the database ``server``'s
    processes, and those of other work on the machine (:class:`ForeignCpu`)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.seconds = self.database_s = self.foreign_s = 0.0

    def __enter__(self) -> PhaseCpu:
        self._database, self._foreign = database_cpu_seconds(self.server), ForeignCpu()
        self._began = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self._began
        self.database_s = database_cpu_seconds(self.server) - self._database
        self.foreign_s = self._foreign.seconds()


T = TypeVar("T")


def in_threads(count: int, body: Callable[[int], T]) -> list[T]:
    """``body(index)`` in ``count`` threads started together; their results by index once
    all ended. :class:`RuntimeError` naming the first failures if any thread raised."""
    results: list[T | None] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = body(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {count} threads failed: {errors[:3]}")
    return [result for result in results if result is not None]

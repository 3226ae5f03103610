"""``txcache check``: run the workload against a fresh stack under faults, then judge every
read-only transaction (docs/check.md).

Two phases share one stack and one history: the *checked* phase (``consistent`` mode, with
faults) must show no anomaly; the *control* phase (``no_consistency`` mode, no faults) must
show some — a checker that finds nothing there is itself broken.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import txcache
from txcache.check.commits import CommitReader
from txcache.check.faults import FAULT_KINDS, Fault, FaultInjector
from txcache.check.history import Commit, History, Read, Verdict, judge
from txcache.check.stack import running_stack
from txcache.check.workload import (
    READER_FUNCTIONS,
    SCHEMA_SHARE,
    Outcome,
    initial_state,
    loop,
    read_once,
    schema_kind,
    write_once,
)
from txcache.stack import Stack

__all__ = ["CheckOptions", "CheckReport", "PhaseReport", "run_check"]

_RESTART_GRACE = 5.0  # seconds after a PostgreSQL restart during which errors are allowed
_AGENT_DOWN = ("agent-kill", "slot-lost")  # faults during which the agent is not running


@dataclass(frozen=True)
class CheckOptions:
    """How long and how hard to check."""

    duration: float = 60.0
    """Seconds of the checked phase."""
    control_duration: float = 20.0
    """Seconds of the no_consistency control phase (0: none)."""
    faults: tuple[str, ...] = FAULT_KINDS
    fault_every: float = 8.0
    readers: int = 4
    writers: int = 3
    seed: int = 1
    schema_share: float = SCHEMA_SHARE
    """Share of write transactions that are schema operations (0: none)."""
    slack: float = 1.0
    """Seconds of clock and decoding uncertainty around staleness and end bounds."""


@dataclass
class PhaseReport:
    """What one phase did and what the verdict found."""

    mode: str
    seconds: float
    reads: int = 0
    writes_committed: int = 0
    writes_rolled_back: int = 0
    anomalies: list[Verdict] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    cache_hits: int = 0
    cache_lookups: int = 0
    errors_allowed: list[tuple[float, str, str]] = field(default_factory=list)
    errors_unexpected: list[tuple[float, str, str]] = field(default_factory=list)
    retried: int = 0
    fell_back: int = 0
    """Read-only transactions that ran on a database snapshot of their own (no pin)."""
    schema_ops: dict[str, int] = field(default_factory=dict)
    """Schema operations committed, by kind."""
    schema_gave_up: int = 0
    """Schema operations that gave up waiting for a lock (rolled back, not an error)."""
    schema_while_agent_down: int = 0
    """Schema operations that committed while the agent was killed or its slot lost."""

    @property
    def cache_share(self) -> float:
        """Share of cacheable calls answered from the cache."""
        return self.cache_hits / self.cache_lookups if self.cache_lookups else 0.0


@dataclass
class CheckReport:
    """The whole run."""

    options: CheckOptions
    checked: PhaseReport
    control: PhaseReport | None
    commits: int
    foreign_commits: int
    """Commits no writer of the workload logged (must be 0: the history would be wrong)."""
    missing_commits: int = 0
    """Write transactions whose COMMIT succeeded but that the checker's slot never showed
    (must be 0: the history would be incomplete)."""

    @property
    def passed(self) -> bool:
        """No anomaly and no unexpected error when checked; some anomaly in the control."""
        control_ok = self.control is None or bool(self.control.anomalies)
        return (
            not self.checked.anomalies
            and not self.checked.errors_unexpected
            and self.foreign_commits == 0
            and self.missing_commits == 0
            and control_ok
        )


def run_check(options: CheckOptions, progress: Callable[[str], None] = print) -> CheckReport:
    """Start a stack, run both phases, judge every read; the stack is stopped after."""
    with running_stack() as stack:
        commits = CommitReader(stack.dsn)
        commits.start()
        outcome = Outcome()
        checked = _phase(stack, commits, options, "consistent", options.duration, outcome, progress)
        control = None
        if options.control_duration > 0:
            control_outcome = Outcome()
            control = _phase(
                stack,
                commits,
                options,
                "no_consistency",
                options.control_duration,
                control_outcome,
                progress,
            )
        progress("reading the commit order from the checker's slot…")
        commits.finish()
        writes = {log.xid: log for log in outcome.writes}
        if control is not None:
            writes.update({log.xid: log for log in control_outcome.writes})
        ordered = [
            Commit(xid, when, writes[xid].writes, commits.lsns.get(xid, 0))
            for xid, when in commits.commits
            if xid in writes
        ]
        history = History(initial_state(), ordered, slack=options.slack)
        _judge(history, outcome, checked, commits.commits)
        if control is not None:
            _judge(history, control_outcome, control, commits.commits)
        foreign = sum(1 for xid, _ in commits.commits if xid not in writes)
        seen = {xid for xid, _ in commits.commits}
        missing = sum(1 for log in writes.values() if log.committed and log.xid not in seen)
        return CheckReport(options, checked, control, len(ordered), foreign, missing)


def _phase(
    stack: Stack,
    commits: CommitReader,
    options: CheckOptions,
    mode: str,
    seconds: float,
    outcome: Outcome,
    progress: Callable[[str], None],
) -> PhaseReport:
    progress(f"phase {mode}: {seconds:.0f} s, {options.readers} readers, {options.writers} writers")
    cache = stack.connect(
        mode=mode,
        refresh_interval=0.1,
        pool_size=options.readers + options.writers + 4,
    )
    before = _lookups()
    stop = threading.Event()
    threads = _workers(cache, options, outcome, mode, stop)
    injector = None
    if mode == "consistent" and options.faults:
        injector = FaultInjector(
            stack, options.faults, options.fault_every, progress, keep_up=commits.catch_up
        )
        injector.start()
    started = time.monotonic()
    try:
        while not stop.wait(min(5.0, max(0.0, seconds - (time.monotonic() - started)))):
            if time.monotonic() - started >= seconds:
                break
            progress(_progress_line(outcome, time.monotonic() - started, seconds))
    finally:
        if injector is not None:
            injector.stop()
        stop.set()
        for thread in threads:
            thread.join()
        cache.close()
    after = _lookups()
    report = PhaseReport(mode, seconds, faults=injector.faults if injector else [])
    report.cache_hits = after[0] - before[0]
    report.cache_lookups = after[1] - before[1]
    report.retried = outcome.retried
    report.schema_gave_up = outcome.gave_up
    return report


def _workers(
    cache: txcache.Cache,
    options: CheckOptions,
    outcome: Outcome,
    mode: str,
    stop: threading.Event,
) -> list[threading.Thread]:
    threads = []
    for index in range(options.writers):
        rng = random.Random(f"{options.seed}-{mode}-w{index}")
        step = lambda rng=rng: write_once(cache, rng, outcome, options.schema_share)  # noqa: E731
        threads.append(threading.Thread(target=loop, args=(step, stop), daemon=True))
    for index in range(options.readers):
        rng = random.Random(f"{options.seed}-{mode}-r{index}")
        step = lambda rng=rng: read_once(cache, rng, outcome, mode)  # noqa: E731
        threads.append(threading.Thread(target=loop, args=(step, stop), daemon=True))
    for thread in threads:
        thread.start()
    return threads


def _lookups() -> tuple[int, int]:
    hits = sum(function.stats.hits for function in READER_FUNCTIONS)
    misses = sum(function.stats.miss_count for function in READER_FUNCTIONS)
    return hits, hits + misses


def _progress_line(outcome: Outcome, elapsed: float, seconds: float) -> str:
    with outcome.lock:
        reads, writes, errors = len(outcome.reads), len(outcome.writes), len(outcome.errors)
    return f"  {elapsed:5.0f}/{seconds:.0f} s: {reads} reads, {writes} writes, {errors} errors"


def _judge(
    history: History,
    outcome: Outcome,
    report: PhaseReport,
    commits: list[tuple[int, float]],
) -> None:
    committed = dict(commits)
    report.writes_committed = sum(1 for log in outcome.writes if log.xid in committed)
    _count_schema_ops(outcome, report, committed)
    report.writes_rolled_back = len(outcome.writes) - report.writes_committed
    report.reads = len(outcome.reads)
    report.fell_back = sum(1 for read in outcome.reads if read.snapshot is not None)
    report.anomalies = [
        v for v in map(lambda r: judge(history, r), outcome.reads) if v.points is None
    ]
    windows = [
        (f.started - 0.5, f.ended + _RESTART_GRACE)
        for f in report.faults
        if f.kind == "postgres-restart"
    ]
    for error in outcome.errors:
        allowed = any(start <= error[0] <= end for start, end in windows)
        (report.errors_allowed if allowed else report.errors_unexpected).append(error)


def _count_schema_ops(outcome: Outcome, report: PhaseReport, committed: dict[int, float]) -> None:
    """Schema operations committed, by kind, and how many of them committed while the agent
    was down (a DDL the agent must make up for when it starts again)."""
    down = [(f.started, f.ended) for f in report.faults if f.kind in _AGENT_DOWN]
    kinds: Counter[str] = Counter()
    for log in outcome.writes:
        kind = schema_kind(log.writes)
        if kind is None or log.xid not in committed:
            continue
        kinds[kind] += 1
        when = committed[log.xid]
        report.schema_while_agent_down += any(start <= when <= end for start, end in down)
    report.schema_ops = dict(sorted(kinds.items()))


def describe(read: Read) -> str:
    """One line about a read-only transaction."""
    token = f", not_before xid {read.not_before}" if read.not_before is not None else ""
    return f"{read.mode} read, staleness {read.staleness:g} s{token}, {len(read.observed)} values"


def fault_counts(faults: list[Fault]) -> Counter[str]:
    """Faults by kind."""
    return Counter(fault.kind for fault in faults)

"""``txcache check``: run the workload against a fresh stack under faults, then judge every
read-only transaction (docs/check.md).

Two phases share one stack and one history: the *checked* phase (``consistent`` mode, with
faults) must show no anomaly; the *control* phase (``no_consistency`` mode, no faults, and
keys blind to the session context) must show some — inconsistent reads, and reads of
another tenant's data when there are tenants: a checker that finds nothing there is itself
broken. Every tenant (:mod:`txcache.check.tenants`) has its own cache, readers and writers
in both phases, and its own history over the shared commit order.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import txcache
from txcache.check.agents import AgentGroup
from txcache.check.commits import CommitReader
from txcache.check.faults import (
    FAILOVER_KINDS,
    FAULT_KINDS,
    PROMOTE_KINDS,
    Fault,
    FaultInjector,
)
from txcache.check.history import (
    PUBLIC_TENANT,
    Commit,
    CommitOrder,
    History,
    Read,
    Verdict,
    judge,
)
from txcache.check.stack import CheckStack, running_stack
from txcache.check.tenants import Tenant, context_blind_keys, make_tenants
from txcache.check.workload import (
    READER_FUNCTIONS,
    SCHEMA_SHARE,
    Outcome,
    WriterLog,
    attribute,
    initial_state,
    loop,
    read_once,
    schema_kind,
    write_once,
)

__all__ = ["CheckOptions", "CheckReport", "PhaseReport", "TenantReport", "run_check"]

_RESTART_GRACE = 5.0  # seconds after a PostgreSQL restart during which errors are allowed
_POSTGRES_DOWN = ("postgres-restart", *PROMOTE_KINDS)  # the application sees errors then
# Faults during which no agent runs (or none is active yet).
_AGENT_DOWN = ("agent-kill", "slot-lost", *FAILOVER_KINDS)


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
    tenant_readers: int = 2
    """Reader threads of each tenant besides the public one (0: no other tenants)."""
    tenant_writers: int = 1
    """Writer threads of each tenant besides the public one."""
    seed: int = 1
    schema_share: float = SCHEMA_SHARE
    """Share of write transactions that are schema operations (0: none)."""
    slack: float = 1.0
    """Seconds of clock and decoding uncertainty around staleness and end bounds."""
    standby_agents: int = 0
    """Agents standing by beside the active one (each behind a proxy of its own; the
    library is given them all): for the ``agent-failover-*`` faults."""
    standby_postgres: bool = False
    """PostgreSQL as a primary and its synchronous streaming standby (17 and later), every
    DSN naming both: for the ``promote-*`` faults."""
    ddl_tracking: str = "triggers"
    """How schema changes reach the caches: ``triggers``, or ``fingerprint`` (the event
    triggers dropped after setup, the agent run with ``--ddl-tracking fingerprint``)."""
    standby_reads: bool = False
    """With ``standby_postgres``: the agent pins the standby too and the library runs misses
    there (``replicas``): for the ``standby-*`` faults."""
    decode_on_standby: bool = False
    """With ``standby_postgres``: the agent decodes the stream on the standby
    (``--decode-from``); the ``standby-*`` faults then pause and restart the stream's server."""
    primary_spare: bool = False
    """With ``decode_on_standby``: the primary keeps a spare slot and the standby is
    asynchronous: for the ``standby-down`` fault, which moves the stream to that spare."""


@dataclass
class TenantReport:
    """One tenant's part of a phase."""

    description: str = ""
    reads: int = 0
    """Read-only transactions checked."""
    writes_committed: int = 0
    inconsistent: int = 0
    """Read-only transactions no commit point of the tenant's history explains."""
    cross_tenant: int = 0
    """Read-only transactions that observed another tenant's data."""
    cache_hits: int = 0
    cache_lookups: int = 0
    retried: int = 0
    fell_back: int = 0

    @property
    def cache_share(self) -> float:
        """Share of its cacheable calls answered from the cache."""
        return self.cache_hits / self.cache_lookups if self.cache_lookups else 0.0


@dataclass
class PhaseReport:
    """What one phase did and what the verdict found (all tenants together, and each)."""

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
    on_standby: int = 0
    """Read-only transactions whose database transaction ran on a standby."""
    schema_ops: dict[str, int] = field(default_factory=dict)
    """Schema operations committed, by kind."""
    schema_gave_up: int = 0
    """Schema operations that gave up waiting for a lock (rolled back, not an error)."""
    schema_while_agent_down: int = 0
    """Schema operations that committed while the agent was killed or its slot lost."""
    tenants: dict[str, TenantReport] = field(default_factory=dict)

    @property
    def cache_share(self) -> float:
        """Share of cacheable calls answered from the cache."""
        return self.cache_hits / self.cache_lookups if self.cache_lookups else 0.0

    @property
    def cross_tenant(self) -> list[Verdict]:
        """The anomalies that observed another tenant's data."""
        return [verdict for verdict in self.anomalies if verdict.cross_tenant]

    @property
    def inconsistent(self) -> list[Verdict]:
        """The anomalies no commit point of their tenant's history explains."""
        return [verdict for verdict in self.anomalies if verdict.points is None]


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
    shared_xids: int = 0
    """Commits whose xid two writers' logs had (a promotion gave it out again), told apart
    by when each transaction ran."""
    ambiguous_xids: int = 0
    """Of those, commits that could not be told apart (must be 0: the history would be
    a guess)."""
    repeated_xids: int = 0
    """Commits the slot showed of an xid it had shown at another position (must be 0:
    the history leaves them out)."""

    @property
    def passed(self) -> bool:
        """No anomaly and no unexpected error when checked; in the control, inconsistent
        reads, and cross-tenant ones when other tenants read."""
        control_ok = self.control is None or (
            bool(self.control.inconsistent)
            and (len(self.control.tenants) < 2 or bool(self.control.cross_tenant))
        )
        return (
            not self.checked.anomalies
            and not self.checked.errors_unexpected
            and self.foreign_commits == 0
            and self.missing_commits == 0
            and self.ambiguous_xids == 0
            and self.repeated_xids == 0
            and control_ok
        )


def run_check(options: CheckOptions, progress: Callable[[str], None] = print) -> CheckReport:
    """Start a stack, run both phases, judge every read; the stack is stopped after."""
    tenants = make_tenants(enabled=options.tenant_readers > 0)
    with running_stack(
        tenants,
        standby_postgres=options.standby_postgres,
        ddl_tracking=options.ddl_tracking,
        standby_reads=options.standby_reads,
        decode_on_standby=options.decode_on_standby,
        primary_spare=options.primary_spare,
    ) as target:
        stack = target.stack
        agents = AgentGroup(stack, options.standby_agents) if options.standby_agents else None
        try:
            commits = CommitReader(stack.dsn)
            commits.start()
            phase = functools.partial(_phase, target, tenants, commits, options, agents=agents)
            checked = phase("consistent", options.duration, progress)
            phases = [checked]
            if options.control_duration > 0:
                phases.append(phase("no_consistency", options.control_duration, progress))
            progress("reading the commit order from the checker's slot…")
            commits.finish()
        finally:
            if agents is not None:
                agents.close()
        logs = [log for _, outcomes in phases for o in outcomes for log in o.writes]
        attribution = attribute(commits.commits, logs)
        writes = attribution.logs
        order = CommitOrder(
            [
                Commit(
                    xid,
                    when,
                    writes[xid].writes,
                    commits.lsns.get(xid, 0),
                    writes[xid].tenant,
                    writes[xid].answered,
                )
                for xid, when in commits.commits
                if xid in writes
            ]
        )
        progress(f"judging against {len(order.commits)} commits…")
        histories = {
            t.name: History(initial_state(t.name), order, slack=options.slack, tenant=t.name)
            for t in tenants
        }
        for report, outcomes in phases:
            _judge(histories, outcomes, report, attribution.committed)
        missing = sum(1 for log in logs if log.committed and log not in attribution.committed)
        control = phases[1][0] if len(phases) > 1 else None
        return CheckReport(
            options,
            checked[0],
            control,
            len(order.commits),
            attribution.foreign,
            missing,
            attribution.shared,
            attribution.ambiguous,
            commits.repeated_xids,
        )


def _phase(
    target: CheckStack,
    tenants: tuple[Tenant, ...],
    commits: CommitReader,
    options: CheckOptions,
    mode: str,
    seconds: float,
    progress: Callable[[str], None],
    agents: AgentGroup | None = None,
) -> tuple[PhaseReport, list[Outcome]]:
    """Run every tenant's readers and writers in ``mode`` for ``seconds`` (with faults when
    consistent; with keys blind to the session context when not); what each did."""
    stack = target.stack
    progress(
        f"phase {mode}: {seconds:.0f} s, tenants {', '.join(t.name for t in tenants)}; "
        f"{options.readers} readers, {options.writers} writers (each other tenant: "
        f"{options.tenant_readers}, {options.tenant_writers})"
    )
    outcomes = [Outcome(tenant=tenant.name) for tenant in tenants]
    caches = [
        stack.connect(
            dsn=tenant.dsn(stack.dsn),
            mode=mode,
            refresh_interval=0.1,
            pool_size=sum(_threads(options, tenant)) + 4,
            replicas={name: tenant.dsn(dsn) for name, dsn in target.replicas},
            **({"agent": ",".join(agents.addresses)} if agents is not None else {}),
        )
        for tenant in tenants
    ]
    injector = None
    # The control's keys ignore the session context: tenants then read each other's values.
    blind = context_blind_keys(READER_FUNCTIONS) if mode == "no_consistency" else nullcontext()
    stop = threading.Event()
    with blind:
        threads = [
            thread
            for tenant, cache, outcome in zip(tenants, caches, outcomes, strict=True)
            for thread in _workers(cache, tenant, options, outcome, mode, stop)
        ]
        if mode == "consistent" and options.faults:
            injector = FaultInjector(
                target,
                options.faults,
                options.fault_every,
                progress,
                keep_up=commits.catch_up,
                agents=agents,
            )
            injector.start()
        try:
            _wait(seconds, outcomes, progress)
        finally:
            if injector is not None:
                injector.stop()
            stop.set()
            for thread in threads:
                thread.join()
            for cache in caches:
                cache.close()
    report = PhaseReport(mode, seconds, faults=injector.faults if injector else [])
    _count(report, tenants, outcomes)
    return report, outcomes


def _count(report: PhaseReport, tenants: tuple[Tenant, ...], outcomes: list[Outcome]) -> None:
    """What the threads counted, per tenant and in all."""
    for tenant, outcome in zip(tenants, outcomes, strict=True):
        report.tenants[tenant.name] = TenantReport(
            tenant.describe(),
            cache_hits=outcome.cache_hits,
            cache_lookups=outcome.cache_lookups,
            retried=outcome.retried,
        )
        report.cache_hits += outcome.cache_hits
        report.cache_lookups += outcome.cache_lookups
        report.retried += outcome.retried
        report.schema_gave_up += outcome.gave_up


def _threads(options: CheckOptions, tenant: Tenant) -> tuple[int, int]:
    """A tenant's readers and writers."""
    if tenant.name == PUBLIC_TENANT:
        return options.readers, options.writers
    return options.tenant_readers, options.tenant_writers


def _wait(seconds: float, outcomes: list[Outcome], progress: Callable[[str], None]) -> None:
    """Report progress every 5 s for ``seconds``."""
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        time.sleep(min(5.0, seconds - elapsed))
        progress(_progress_line(outcomes, time.monotonic() - started, seconds))


def _workers(
    cache: txcache.Cache,
    tenant: Tenant,
    options: CheckOptions,
    outcome: Outcome,
    mode: str,
    stop: threading.Event,
) -> list[threading.Thread]:
    """Start ``tenant``'s writer and reader threads (the public tenant's seeds are those of
    a check without tenants)."""
    threads = []
    readers, writers = _threads(options, tenant)
    seed = options.seed if tenant.name == PUBLIC_TENANT else f"{options.seed}-{tenant.name}"
    for index in range(writers):
        rng = random.Random(f"{seed}-{mode}-w{index}")
        step = lambda rng=rng: write_once(cache, rng, outcome, options.schema_share)  # noqa: E731
        threads.append(threading.Thread(target=loop, args=(step, stop), daemon=True))
    for index in range(readers):
        rng = random.Random(f"{seed}-{mode}-r{index}")
        step = lambda rng=rng: read_once(cache, rng, outcome, mode)  # noqa: E731
        threads.append(threading.Thread(target=loop, args=(step, stop), daemon=True))
    for thread in threads:
        thread.start()
    return threads


def _progress_line(outcomes: list[Outcome], elapsed: float, seconds: float) -> str:
    counts = []
    for outcome in outcomes:
        with outcome.lock:
            counts.append(
                (outcome.tenant, len(outcome.reads), len(outcome.writes), len(outcome.errors))
            )
    reads = ", ".join(f"{name} {n}" for name, n, _, _ in counts)
    writes = sum(w for _, _, w, _ in counts)
    errors = sum(e for _, _, _, e in counts)
    return f"  {elapsed:5.0f}/{seconds:.0f} s: reads {reads}; {writes} writes, {errors} errors"


def _judge(
    histories: dict[str, History],
    outcomes: list[Outcome],
    report: PhaseReport,
    committed: dict[WriterLog, float],
) -> None:
    """Judge every tenant's reads against its own history; sort the errors the application
    saw into allowed (during a PostgreSQL restart) and unexpected. ``committed``: the logs
    of committed transactions, with their commit times."""
    for outcome in outcomes:
        tenant = report.tenants[outcome.tenant]
        report.anomalies += _judge_tenant(histories[outcome.tenant], outcome, tenant, committed)
        _count_schema_ops(outcome, report, committed)
        report.reads += tenant.reads
        report.writes_committed += tenant.writes_committed
        report.writes_rolled_back += len(outcome.writes) - tenant.writes_committed
        report.fell_back += tenant.fell_back
        report.on_standby += sum(1 for read in outcome.reads if read.server is not None)
        _sort_errors(outcome, report)


def _judge_tenant(
    history: History, outcome: Outcome, tenant: TenantReport, committed: dict[WriterLog, float]
) -> list[Verdict]:
    """Judge one tenant's reads against its history, counting them in ``tenant``; its
    anomalies."""
    verdicts = (judge(history, read) for read in outcome.reads)  # one at a time: millions
    anomalies = [verdict for verdict in verdicts if verdict.anomalous]
    tenant.reads = len(outcome.reads)
    tenant.writes_committed = sum(1 for log in outcome.writes if log in committed)
    tenant.inconsistent = sum(1 for verdict in anomalies if verdict.points is None)
    tenant.cross_tenant = sum(1 for verdict in anomalies if verdict.cross_tenant)
    tenant.fell_back = sum(1 for read in outcome.reads if read.snapshot is not None)
    return anomalies


def _sort_errors(outcome: Outcome, report: PhaseReport) -> None:
    windows = [
        (start - 0.5, end + _RESTART_GRACE)
        for f in report.faults
        if f.kind in _POSTGRES_DOWN
        for start, end in [f.outage or (f.started, f.ended)]
    ]
    for error in outcome.errors:
        allowed = any(start <= error[0] <= end for start, end in windows)
        (report.errors_allowed if allowed else report.errors_unexpected).append(error)


def _count_schema_ops(
    outcome: Outcome, report: PhaseReport, committed: dict[WriterLog, float]
) -> None:
    """Schema operations committed, by kind, and how many of them committed while the agent
    was down (a DDL the agent must make up for when it starts again)."""
    down = [(f.started, f.ended) for f in report.faults if f.kind in _AGENT_DOWN]
    kinds: Counter[str] = Counter(report.schema_ops)
    for log in outcome.writes:
        kind = schema_kind(log.writes)
        if kind is None or log not in committed:
            continue
        kinds[kind] += 1
        when = committed[log]
        report.schema_while_agent_down += any(start <= when <= end for start, end in down)
    report.schema_ops = dict(sorted(kinds.items()))


def describe(read: Read) -> str:
    """One line about a read-only transaction."""
    token = f", not_before xid {read.not_before}" if read.not_before is not None else ""
    return (
        f"{read.mode} read of tenant {read.tenant!r}, staleness {read.staleness:g} s{token}, "
        f"{len(read.observed)} values"
    )


def fault_counts(faults: list[Fault]) -> Counter[str]:
    """Faults by kind."""
    return Counter(fault.kind for fault in faults)

"""A short run of the consistency checker (``txcache check``) in the test suite: every
kind of fault at least once, every kind of schema operation, tenants by search path and by
role beside the public one, no anomaly, and the no_consistency control must show some — of
both kinds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from txcache.check import CheckOptions, CheckReport, PhaseReport, run_check
from txcache.check.faults import (
    FAILOVER_KINDS,
    FAULT_KINDS,
    PROMOTE_KINDS,
    SPARE_KINDS,
    STANDBY_KINDS,
    default_fault_kinds,
    fault_kinds_problem,
)
from txcache.check.report import as_markdown
from txcache.stack import PostgresStartError, ReplicatedPostgres

SCHEMA_KINDS = {"view", "truncate-reload", "detach", "attach", "index", "retype"}
TENANTS = {"public", "path", "role"}


@pytest.fixture(scope="module")
def short_check() -> CheckReport:
    """One 40 s check (and a 12 s control) for every test here."""
    # Schema operations at 3 % of writes (1 % by default): enough of each kind in 40 s even
    # on a loaded machine.
    options = CheckOptions(
        duration=40,
        control_duration=12,
        fault_every=5,
        readers=3,
        writers=2,
        tenant_readers=1,
        tenant_writers=1,
        schema_share=0.03,
    )
    report = run_check(options, progress=lambda line: None)
    print(as_markdown(report, "tests/test_check.py"))
    return report


def test_a_short_check_under_every_fault_finds_no_anomaly_and_the_control_finds_some(
    short_check: CheckReport,
) -> None:
    checked, control = short_check.checked, short_check.control
    assert {fault.kind for fault in checked.faults} == set(FAULT_KINDS)
    assert [fault for fault in checked.faults if fault.error] == []
    assert set(checked.schema_ops) == SCHEMA_KINDS
    assert checked.reads > 500
    assert checked.writes_committed > 500
    assert checked.anomalies == [], checked.anomalies[0].explanation
    assert checked.errors_unexpected == []
    assert checked.cache_hits > 0
    assert control is not None
    assert control.inconsistent, "a checker that finds nothing in the control is broken"
    assert short_check.foreign_commits == 0
    assert short_check.missing_commits == 0
    assert short_check.passed


def test_every_tenant_is_checked_and_none_reads_another_tenants_data(
    short_check: CheckReport,
) -> None:
    checked = short_check.checked
    assert set(checked.tenants) == TENANTS
    for name, tenant in checked.tenants.items():
        assert tenant.reads > 0, f"tenant {name}: no read-only transaction checked"
        assert tenant.writes_committed > 0, f"tenant {name}: nothing written"
        # Its reads went through the cache, not around it: else they would prove nothing.
        assert tenant.cache_hits > 0, f"tenant {name}: no cache hit"
        assert tenant.cross_tenant == 0, name
    assert checked.cross_tenant == []


def test_the_control_with_keys_blind_to_the_session_context_shows_cross_tenant_reads(
    short_check: CheckReport,
) -> None:
    control = short_check.control
    assert control is not None
    assert control.cross_tenant, "a checker that cannot see a cross-tenant read is broken"
    assert {verdict.read.tenant for verdict in control.cross_tenant} == TENANTS


def test_a_short_check_with_a_standby_agent_times_every_takeover() -> None:
    """Two agents, the active one killed, stopped and cut off in turn: no anomaly, and each
    takeover timed."""
    options = CheckOptions(
        duration=24,
        control_duration=0,
        faults=FAILOVER_KINDS,
        fault_every=6,
        readers=2,
        writers=1,
        tenant_readers=0,
        standby_agents=1,
    )
    checked = checked_soundly(options)
    assert all(fault.took is not None and fault.took > 0 for fault in checked.faults)


def test_a_short_check_with_a_standby_postgres_keeps_everything_through_promotions() -> None:
    """A primary and its synchronous standby, promoted after a clean stop and after a crash
    (and the primary restarted), with a standby agent taking over from one cut off from
    both servers, and misses running on whichever server is the standby while it lags and
    restarts: no anomaly, no committed write missing from the history, each promotion
    timed, and the nodes keep their entries (the new primary's history continues
    everything they saw)."""
    options = CheckOptions(
        duration=38,
        control_duration=0,
        faults=(*PROMOTE_KINDS, "postgres-restart", "agent-failover-cut", *STANDBY_KINDS),
        fault_every=6,
        readers=2,
        writers=1,
        tenant_readers=0,
        standby_agents=1,
        standby_postgres=True,
        standby_reads=True,
    )
    checked = checked_soundly(options)
    promotions = [fault for fault in checked.faults if fault.kind in PROMOTE_KINDS]
    assert all(fault.took is not None and fault.took > 0 for fault in promotions)
    assert [fault.kind for fault in promotions if fault.rewound] == []
    assert checked.on_standby > 0


def test_a_short_check_with_a_standby_postgres_decoding_the_stream() -> None:
    """The agent decodes on the standby (``--decode-from`` naming it, then the primary)
    while its replay pauses and it crashes, the primary is promoted away (the stream then
    decoded on the server it became, or moved to the other), the primary restarts and the
    agent is killed: no anomaly, no committed write missing, and the nodes apply the stream
    again after each."""
    options = CheckOptions(
        duration=40,
        control_duration=0,
        faults=(*STANDBY_KINDS, "promote-stop", "postgres-restart", "promote-crash", "agent-kill"),
        fault_every=6,
        readers=2,
        writers=1,
        tenant_readers=0,
        standby_postgres=True,
        decode_on_standby=True,
    )
    checked_soundly(options)


def test_a_short_check_with_a_standby_postgres_down_and_a_spare_on_the_primary() -> None:
    """The agent decodes on an asynchronous standby and keeps a spare slot on the primary
    (``--primary-spare``). The standby is kept down until the stream runs on that spare,
    then started again (the stream returns to it); it also crashes and restarts at once,
    and the agent is killed: no anomaly, no committed write missing, each move timed, and
    no node reset or rewound by the moves."""
    options = CheckOptions(
        duration=24,
        control_duration=0,
        faults=("standby-down", "standby-restart", "agent-kill"),
        fault_every=6,
        readers=2,
        writers=1,
        tenant_readers=0,
        standby_postgres=True,
        decode_on_standby=True,
        primary_spare=True,
    )
    checked = checked_soundly(options)
    downs = [fault for fault in checked.faults if fault.kind in SPARE_KINDS]
    assert downs
    assert all(fault.took is not None and fault.took > 0 for fault in downs)
    assert [fault for fault in downs if fault.rewound] == []


def checked_soundly(options: CheckOptions) -> PhaseReport:
    """Run a check of ``options``: every fault kind was injected without error, no anomaly,
    no unexpected error, some cache hits, no commit missing from the history or foreign to
    it. Its checked phase."""
    report = run_check(options, progress=lambda line: None)
    print(as_markdown(report, "tests/test_check.py"))
    checked = report.checked
    assert {fault.kind for fault in checked.faults} == set(options.faults)
    assert [fault for fault in checked.faults if fault.error] == []
    assert checked.anomalies == [], checked.anomalies[0].explanation
    assert checked.errors_unexpected == []
    assert checked.cache_hits > 0
    assert report.missing_commits == 0
    assert report.foreign_commits == 0
    assert report.ambiguous_xids == 0
    assert report.passed
    return checked


def test_fault_kinds_are_checked_before_the_stack_starts() -> None:
    assert fault_kinds_problem(FAULT_KINDS, several_agents=False) is None
    assert fault_kinds_problem(FAILOVER_KINDS, several_agents=True) is None
    assert fault_kinds_problem(("node-kill", "agent-failover-kill"), several_agents=False) == (
        "the agent-failover-* faults need --standby-agents"
    )
    problem = fault_kinds_problem(("agent-kill",), several_agents=True)
    assert problem is not None
    assert "agent-failover-kill" in problem
    assert fault_kinds_problem(("nap",), several_agents=False) == "unknown fault kind(s): nap"
    assert fault_kinds_problem(PROMOTE_KINDS, several_agents=False, standby_postgres=True) is None
    assert fault_kinds_problem(PROMOTE_KINDS, several_agents=False) == (
        "the promote-* faults need --standby-postgres"
    )
    for several_agents, standby_postgres in ((True, False), (False, True)):
        kinds = default_fault_kinds(
            several_agents=several_agents, standby_postgres=standby_postgres
        )
        assert (
            fault_kinds_problem(
                kinds, several_agents=several_agents, standby_postgres=standby_postgres
            )
            is None
        )
    problem = fault_kinds_problem(("slot-lost",), several_agents=False, standby_postgres=True)
    assert problem is not None
    assert "slot-lost" in problem
    problem = fault_kinds_problem(STANDBY_KINDS, several_agents=False)
    assert problem is not None
    assert "--standby-postgres" in problem
    kinds = default_fault_kinds(several_agents=False, standby_postgres=True, standby_reads=True)
    assert set(STANDBY_KINDS) <= set(kinds)
    kinds = default_fault_kinds(several_agents=False, standby_postgres=True, decode_on_standby=True)
    assert set(STANDBY_KINDS) | set(PROMOTE_KINDS) <= set(kinds)
    assert fault_kinds_problem(kinds, several_agents=False, standby_postgres=True) is None
    spare = {"several_agents": False, "standby_postgres": True, "primary_spare": True}
    kinds = default_fault_kinds(**spare, decode_on_standby=True)
    assert set(SPARE_KINDS) <= set(kinds)
    assert not set(PROMOTE_KINDS) & set(kinds)
    assert fault_kinds_problem(kinds, **spare) is None
    problem = fault_kinds_problem(PROMOTE_KINDS, **spare)
    assert problem is not None
    assert "asynchronous" in problem
    problem = fault_kinds_problem(SPARE_KINDS, several_agents=False, standby_postgres=True)
    assert problem is not None
    assert "--primary-spare" in problem


def test_a_promotion_check_before_postgresql_17_is_refused_before_anything_starts(
    system_postgres_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without failover slots (before 17) a promotion would lose the slots: refused, in one
    line, before any server starts."""
    monkeypatch.setenv("TXCACHE_PG_BIN", str(system_postgres_bin))
    with pytest.raises(PostgresStartError, match="PostgreSQL 17 or later"):
        ReplicatedPostgres()
    command = [sys.executable, "-m", "txcache", "check", "--standby-postgres", "--duration", "1"]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--standby-postgres needs PostgreSQL 17 or later (failover slots); this is 15" in (
        done.stderr
    )


def check_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "txcache", "check", *arguments]


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (
            ("--ddl-tracking", "fingerprint", "--standby-postgres", "--standby-reads"),
            "--standby-reads needs the DDL event triggers",
        ),
        (("--schema-share", "1.5"), "must be from 0 to 1, not 1.5"),
    ],
)
def test_options_that_cannot_run_together_are_usage_errors(
    arguments: tuple[str, ...], refusal: str
) -> None:
    done = subprocess.run(
        check_command(*arguments, "--duration", "1"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert refusal in done.stderr


def test_sigterm_stops_every_part_the_check_started(tmp_path: Path) -> None:
    """As Ctrl-C does: ``kill`` or a CI job's timeout leaves no server behind."""
    command = check_command("--duration", "120", "--control-duration", "1", "--faults", "")
    with subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as check:
        assert check.stderr is not None
        lines = []
        for line in check.stderr:  # the first progress line: every part runs
            lines.append(line)
            if " s: reads " in line:
                break
        else:
            pytest.fail("the check ended before it ran:\n" + "".join(lines))
        check.terminate()
        rest = check.stderr.read()
        assert check.wait(timeout=60) == 130, rest
    assert "interrupted; every part it started is stopped" in rest
    assert "Traceback" not in rest
    left = subprocess.run(
        ["ps", "-o", "pid=,args=", "-s", str(check.pid)], capture_output=True, text=True
    ).stdout
    assert left.strip() == "", f"left running: {left}"
    assert not list(Path("/dev/shm").glob(f"txcache-pg-{check.pid}-*"))

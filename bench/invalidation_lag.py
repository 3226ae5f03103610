"""Invalidation lag: from a commit to the moment a cache node has applied it.

A prober commits one small UPDATE every ~20 ms in its own connection. For each probe:

- ``t0``: just before ``COMMIT`` is sent;
- the exact commit LSN: ``pg_current_xact_id()`` inside the transaction, then the agent's
  ``COMMITLSN xid`` (asked from a helper thread right after the commit returns, so the wait
  for that answer never delays the polling);
- meanwhile the prober polls the node's ``TXSTATUS`` (``N``, the last applied position) in a
  tight loop (0.2 ms sleep by default; 1 ms once 20 ms have passed, so that a stream far
  behind does not make the prober hog a CPU) and records when each reply arrived; the probe
  is applied at the first reply with ``N >= commit LSN``. lag = that time - ``t0``.

Phases: ``idle`` (no other load), then ``load`` with ``pgbench -N -c 4 -j 2`` (simple-update)
running flat out on the same database. The goal: p99 <= 10 ms.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import psycopg
from _common import (
    STORAGE_HELP,
    BacklogMonitor,
    Pgbench,
    PgbenchResult,
    agent_pid,
    agent_status,
    bench_stack,
    call,
    create_database,
    database_note,
    execute,
    node_pid,
    node_position,
    pgbench_init,
    postgres,
    resp,
    scalar,
)
from _cpu import (
    PLACEMENT_HELP,
    ForeignCpu,
    cpu_seconds,
    place_database_apart,
    run_queue_seconds,
    steal_seconds,
)
from _report import fmt, log, machine_note, result_name, summarize, table, write_report

from txcache.protocol import ConnectionLost, ReplyError, RespConnection
from txcache.stack import Stack

PROBE_TIMEOUT = 10.0
TIGHT_POLLING = 0.020
"""Poll with the short sleep this long after the commit; then every 1 ms (a lag that long
is measured within 5 %, and a stream seconds behind does not make the prober hog a CPU)."""
SLOW_POLL_SLEEP = 0.001


@dataclass
class Probe:
    """One probe's times, in seconds after ``t0`` (its COMMIT being sent)."""

    commit_returned: float
    lsn_known: float
    applied: float
    polls: int

    @property
    def after_commit(self) -> float:
        """From the commit returning to the node applying it: txcache's own share."""
        return self.applied - self.commit_returned


@dataclass
class Phase:
    """The probes of one phase and what ran beside them."""

    name: str
    probes: list[Probe] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    pgbench: PgbenchResult | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    backlog: dict[str, Any] = field(default_factory=dict)
    run_queue: dict[str, float] = field(default_factory=dict)


class Prober:
    """Commits probes and measures when the node applies them."""

    def __init__(self, stack: Stack, args: argparse.Namespace) -> None:
        """Connect to the database, the node and the agent's endpoint."""
        self.poll_sleep = args.poll_sleep_ms / 1000
        self.interval = args.interval / 1000
        self.db = psycopg.connect(stack.dsn)
        # The library's own RESP client: one TXSTATUS poll costs what a library call would.
        self.node: RespConnection = resp(stack.nodes[0].address)
        self.agent = resp(stack.agent_address)
        self.helper = ThreadPoolExecutor(max_workers=1)

    def close(self) -> None:
        """Close every connection."""
        self.helper.shutdown()
        self.agent.close()
        self.node.close()
        self.db.close()

    def commit_lsn(self, xid: str) -> tuple[int, float]:
        """The commit LSN of ``xid`` (from the agent) and when it was known."""
        lsn = int(call(self.agent, "COMMITLSN", xid, int(PROBE_TIMEOUT * 1000)))
        return lsn, time.perf_counter()

    def probe(self) -> Probe:
        """Commit one UPDATE and wait until the node has applied it."""
        row = self.db.execute(
            "UPDATE probe SET v = v + 1 WHERE id = 1 RETURNING pg_current_xact_id()::text"
        ).fetchone()
        assert row is not None
        t0 = time.perf_counter()
        self.db.commit()
        returned = time.perf_counter()
        answer = self.helper.submit(self.commit_lsn, row[0])
        applied, polls = self.poll_until_applied(answer, t0)
        lsn_time = answer.result()[1]
        return Probe(returned - t0, lsn_time - t0, applied - t0, polls)

    def poll_until_applied(self, answer: Future[tuple[int, float]], t0: float) -> tuple[float, int]:
        """Poll TXSTATUS; returns the arrival time of the first reply with N >= the LSN."""
        samples: list[tuple[float, int]] = []
        while True:
            applied = node_position(self.node)
            now = time.perf_counter()
            samples.append((now, applied))
            if answer.done():
                target = answer.result()[0]
                if applied >= target:
                    first = next(t for t, n in samples if n >= target)
                    return first, len(samples)
            if now - t0 > PROBE_TIMEOUT:
                raise TimeoutError(f"not applied within {PROBE_TIMEOUT} s")
            time.sleep(self.poll_sleep if now - t0 < TIGHT_POLLING else SLOW_POLL_SLEEP)


def run_probes(prober: Prober, phase: Phase, seconds: float, interval: float) -> None:
    """Probe every ``interval`` seconds for ``seconds``."""
    deadline = time.monotonic() + seconds
    next_start = time.monotonic()
    while time.monotonic() < deadline:
        try:
            phase.probes.append(prober.probe())
        except (TimeoutError, ConnectionLost, ReplyError, psycopg.Error) as error:
            phase.failures.append(f"{type(error).__name__}: {error}")
            prober.db.rollback()
        next_start += interval
        pause = next_start - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            next_start = time.monotonic()
        if len(phase.probes) % 500 == 0 and phase.probes:
            log(f"  {phase.name}: {len(phase.probes)} probes")


@dataclass
class Watched:
    """The stack a phase measures, and the processes whose CPU it counts."""

    stack: Stack
    pids: dict[str, int]


def measure_phase(
    name: str, prober: Prober, watched: Watched, seconds: float, load: Pgbench | None
) -> Phase:
    """One phase: probes for ``seconds``, beside the ``load`` pgbench run if any."""
    phase = Phase(name)
    pids = watched.pids
    before = {key: cpu_seconds(pid) for key, pid in pids.items()}
    waiting = {key: run_queue_seconds(pid) for key, pid in pids.items()}
    foreign, steal = ForeignCpu(), steal_seconds()
    monitor = BacklogMonitor(watched.stack, load) if load else None
    if monitor:
        monitor.start()
    start = time.monotonic()
    run_probes(prober, phase, seconds, prober.interval)
    phase.seconds = time.monotonic() - start
    if load is not None:
        phase.pgbench = load.wait()
    phase.cpu = {key: cpu_seconds(pid) - before[key] for key, pid in pids.items()}
    phase.cpu["foreign"] = foreign.seconds()
    phase.cpu["stolen"] = steal_seconds() - steal
    phase.run_queue = {key: run_queue_seconds(pid) - waiting[key] for key, pid in pids.items()}
    if monitor:
        monitor.join()
        phase.backlog = {"peak_kib": monitor.peak, "walsender": monitor.states_text()}
    stats = summarize([p.applied * 1000 for p in phase.probes])
    log(f"  {name}: {stats['count']} probes, p50 {stats['p50']:.2f} ms, p99 {stats['p99']:.2f} ms")
    return phase


def start_load(server: Any, dsn: str, args: argparse.Namespace) -> Pgbench:
    """pgbench simple-update, flat out, for the load phase plus a second at each end."""
    duration = int(args.load_seconds) + 2
    command = ["-N", "-c", str(args.clients), "-j", "2", "-T", str(duration), "-P", "10"]
    return Pgbench(server, dsn, command)


MILESTONES = (
    ("commit returned", "commit_returned"),
    ("agent decoded (COMMITLSN answered)", "lsn_known"),
    ("**node applied (lag)**", "applied"),
    ("node applied - commit returned", "after_commit"),
)


def phase_rows(phase: Phase) -> list[list[str]]:
    """The lag table's rows of one phase: each milestone's distribution (ms)."""
    rows = []
    for label, attribute in MILESTONES:
        s = summarize([getattr(p, attribute) * 1000 for p in phase.probes])
        cells = [fmt(s[key]) for key in ("p50", "p90", "p99", "max", "mean")]
        rows.append([phase.name, label, str(int(s["count"])), *cells])
    return rows


def cpu_row(phase: Phase) -> list[str]:
    """The CPU table's row of one phase."""
    cpu, waiting = phase.cpu, phase.run_queue
    return [
        phase.name,
        f"{phase.seconds:.0f}",
        fmt(phase.pgbench.tps, 0) if phase.pgbench else "-",
        fmt(phase.pgbench.latency_ms) if phase.pgbench else "-",
        *(f"{cpu.get(key, 0.0):.1f}" for key in CPU_COLUMNS),
        f"{waiting['walsender']:.1f}",
        f"{waiting['agent']:.1f}",
        str(len(phase.failures)),
    ]


CPU_COLUMNS = ("agent", "node", "walsender", "prober", "foreign", "stolen")
CPU_HEADER = (
    "phase",
    "seconds",
    "pgbench TPS",
    "pgbench latency ms",
    "CPU s: agent",
    "node",
    "walsender",
    "prober (this script)",
    "other work on the machine",
    "stolen by the host",
    "waiting for a CPU s: walsender",
    "agent",
    "failed probes",
)


def report_body(phases: list[Phase], args: argparse.Namespace, status: dict[str, int]) -> list[str]:
    """The markdown report."""
    load = next((p for p in phases if p.pgbench), None)
    lag = summarize([p.applied * 1000 for p in load.probes]) if load else {}
    verdict = "met" if lag and lag["p99"] <= 10 else "NOT met"
    lag_header = ("phase", "milestone", "probes", "p50", "p90", "p99", "max", "mean")
    body = [
        "Milliseconds after `COMMIT` was sent. Commit LSN: exact, from `pg_current_xact_id()` "
        "and the agent's `COMMITLSN`; applied = first `TXSTATUS` reply with `N >= LSN` "
        f"(polled with a {args.poll_sleep_ms} ms sleep + one round trip for "
        f"{TIGHT_POLLING * 1000:.0f} ms after the commit, then every "
        f"{SLOW_POLL_SLEEP * 1000:.0f} ms).",
        "",
        *table(lag_header, [row for phase in phases for row in phase_rows(phase)]),
        "",
        f"Goal p99 <= 10 ms under load: **{verdict}**"
        + (f" (p99 {lag['p99']:.2f} ms)." if lag else "."),
        "",
        *table(CPU_HEADER, [cpu_row(phase) for phase in phases]),
    ]
    command = load.pgbench.as_dict()["command"] if load and load.pgbench else ""
    body += ["", f"Load: `{command}` (scale {args.scale})."]
    if args.placement == "split":
        body += [
            "",
            "Placement split: the database server's processes (walsender included) on CPU 0; "
            "pgbench, the agent, the node and the prober on the others.",
        ]
    if args.walsender_nice is not None:
        body += ["", f"The walsender was reniced to {args.walsender_nice} (default 0)."]
    if load and load.backlog:
        peak = load.backlog["peak_kib"]
        body += [
            "",
            "Stream backlog during the load (sampled every 0.25 s; WAL insert position minus "
            f"the walsender's `sent_lsn` / minus the node's `N`): peak {peak['walsender']} KiB "
            f"/ {peak['node']} KiB. Walsender state in those samples: "
            f"{load.backlog['walsender']} (CPU = decoding, WalSenderWaitForWal = caught up, "
            "WalSenderWriteData = waiting for the agent to read).",
        ]
    body += ["", f"Agent STATUS at the end: `{status}`"]
    return body


def raw_phase(phase: Phase) -> dict[str, Any]:
    """A phase as JSON: summaries and every probe."""
    return {
        "name": phase.name,
        "seconds": phase.seconds,
        "pgbench": phase.pgbench.as_dict() if phase.pgbench else None,
        "cpu_seconds": phase.cpu,
        "run_queue_seconds": phase.run_queue,
        "backlog": phase.backlog,
        "failures": phase.failures,
        "lag_ms": summarize([p.applied * 1000 for p in phase.probes]),
        "probes_ms": [
            [p.commit_returned * 1000, p.lsn_known * 1000, p.applied * 1000, p.polls]
            for p in phase.probes
        ],
    }


def prepare(server: Any, args: argparse.Namespace) -> str:
    """A pgbench database with the probe table (the stack sets it up for txcache)."""
    dsn = create_database(server, "bench")
    log(f"pgbench -i -s {args.scale}")
    pgbench_init(server, dsn, args.scale)
    execute(
        dsn,
        "CREATE TABLE probe (id integer PRIMARY KEY, v bigint NOT NULL)",
        "INSERT INTO probe VALUES (1, 0)",
    )
    return dsn


def run(args: argparse.Namespace) -> None:
    """Run both phases and write the report."""
    with postgres(args.storage) as server:
        dsn = prepare(server, args)
        if args.placement == "split":
            place_database_apart(server)
        note = machine_note(database_note(dsn, args.storage))
        flags = ("--heartbeat-interval", args.heartbeat_interval)
        with bench_stack(dsn, agent_args=flags) as stack:
            stack.caught_up()
            pids = {
                "agent": agent_pid(stack),
                "node": node_pid(stack),
                "walsender": scalar(dsn, "SELECT pid FROM pg_stat_replication"),
                "prober": os.getpid(),
            }
            if args.walsender_nice is not None:
                os.setpriority(os.PRIO_PROCESS, pids["walsender"], args.walsender_nice)
            watched = Watched(stack, pids)
            prober = Prober(stack, args)
            try:
                log(f"idle phase: {args.idle_seconds} s")
                phases = [measure_phase("idle", prober, watched, args.idle_seconds, None)]
                log(f"load phase: {args.load_seconds} s beside pgbench -N -c {args.clients}")
                load = start_load(server, dsn, args)
                time.sleep(1.0)
                phases.append(measure_phase("load", prober, watched, args.load_seconds, load))
            finally:
                prober.close()
            with closing(resp(stack.agent_address)) as agent:
                status = agent_status(agent)
    body = report_body(phases, args, status)
    raw = {
        "args": vars(args),
        "phases": [raw_phase(phase) for phase in phases],
    }
    extra = [] if args.walsender_nice is None else [f"walsender-nice{args.walsender_nice}"]
    extra += ["split"] if args.placement == "split" else []
    name = result_name("invalidation_lag", args.quick, args.storage, *extra)
    path = write_report(name, "Invalidation lag: commit → applied at a node", note, body, raw)
    print("\n".join(body))
    log(f"report: {path}")


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of well under a minute")
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=20.0, help="ms between probes")
    parser.add_argument(
        "--poll-sleep-ms", type=float, default=0.2, help="sleep between TXSTATUS polls"
    )
    parser.add_argument("--clients", type=int, default=4, help="pgbench -c")
    parser.add_argument("--scale", type=int, default=10, help="pgbench -i -s")
    parser.add_argument("--heartbeat-interval", default="200ms", help="agent flag")
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    parser.add_argument(
        "--walsender-nice",
        type=int,
        help="renice the walsender to this value (e.g. -10: a CPU-starved decoder is the "
        "usual cause of lag on a saturated machine); needs root",
    )
    parser.add_argument(
        "--placement", choices=("shared", "split"), default="shared", help=PLACEMENT_HELP
    )
    args = parser.parse_args()
    if args.quick:
        args.idle_seconds, args.load_seconds = 5.0, 15.0
    return args


if __name__ == "__main__":
    run(parse_args())

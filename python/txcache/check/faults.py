"""Faults the checker injects, each bounded in time and on this machine only.

| kind | what happens |
|---|---|
| ``node-kill`` | ``kill -9`` of a cache node, restarted on its port half a second later |
| ``agent-kill`` | ``kill -9`` of the agent, restarted on its port half a second later |
| ``slot-lost`` | the agent stopped and its replication slot invalidated for real (WAL past
  ``max_slot_wal_keep_size``, then a checkpoint); restarted, it recreates the slot and
  resets every node |
| ``pinner-kill`` | the agent's pinner sessions are terminated in PostgreSQL |
| ``postgres-restart`` | PostgreSQL stops (fast) and starts again on its port |
| ``node-stall`` | a cache node stops reading its sockets (``SIGSTOP``) for two seconds |
| ``node-leave`` | a cache node taken out of ``txcache.cache_nodes`` for two seconds (the agent
  stops feeding it, libraries stop placing keys on it) and put back: timed until it applied
  every commit again (replayed or reset first) |
| ``agent-failover-kill`` | with ``--standby-agents``: ``kill -9`` of the active agent; a standby
  takes over (timed), the killed one starts again on its port as a standby |
| ``agent-failover-stop`` | the active agent stopped (``SIGSTOP``) until a standby took over,
  then resumed: it must learn it lost the lease and deliver nothing more |
| ``agent-failover-cut`` | the active agent's proxy to PostgreSQL frozen (a partition) until a
  standby took over, then healed |
| ``promote-stop`` | with ``--standby-postgres``: the primary stopped (fast), the standby
  promoted (timed until every node applied the new primary's writes), a new standby made
  on the freed port |
| ``promote-crash`` | the same after an immediate shutdown of the primary. With
  ``--decode-on-standby`` the stream goes on on the promoted standby it was decoded on, or,
  decoded on the primary (a standby promoted before), moves to the other server |
| ``standby-lag`` | with ``--standby-reads``: the standby's replay paused for two seconds (its
  pins stop being current; reads past their staleness must go elsewhere), then resumed |
| ``standby-restart`` | the standby crashed (an immediate shutdown) and started again: timed
  until the agent lists pins on it again (with ``--standby-reads``) and, with
  ``--decode-on-standby``, until every node applied the stream decoded there again |
| ``standby-down`` | with ``--primary-spare``: the standby crashed and kept down until the
  stream ran on the primary's spare slot (timed), then started again: the stream returns
  to it, and no node may have been reset or rewound |

With a standby, ``postgres-restart`` restarts whichever server is primary; ``slot-lost`` is
refused (its checkpoint on one server would not invalidate the standby's copy).
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from txcache.check.agents import AgentGroup
from txcache.check.stack import AGENT_SLOT, CHECK_SLOT, SLOT_WAL_KEEP, CheckStack
from txcache.stack import EmbeddedPostgres, ReplicatedPostgres, wait_for_stream_on, wait_until

__all__ = [
    "FAILOVER_KINDS",
    "FAULT_KINDS",
    "PROMOTE_KINDS",
    "SPARE_KINDS",
    "STANDBY_KINDS",
    "Fault",
    "FaultInjector",
    "default_fault_kinds",
    "fault_kinds_problem",
]

log = logging.getLogger("txcache.check")

FAULT_KINDS = (
    "node-kill",
    "agent-kill",
    "slot-lost",
    "pinner-kill",
    "postgres-restart",
    "node-stall",
    "node-leave",
)
FAILOVER_KINDS = ("agent-failover-kill", "agent-failover-stop", "agent-failover-cut")
"""The faults of several agents (``--standby-agents``), each timing the takeover."""
PROMOTE_KINDS = ("promote-stop", "promote-crash")
"""The faults of a primary and its standby (``--standby-postgres``), each timing the
failover."""
STANDBY_KINDS = ("standby-lag", "standby-restart")
"""The faults of a standby misses run on (``--standby-reads``) or the stream is decoded on
(``--decode-on-standby``)."""
SPARE_KINDS = ("standby-down",)
"""The faults of a primary keeping a spare slot (``--primary-spare``; the standby then
asynchronous), each timing the stream's move to it."""
_ONE_AGENT_KINDS = ("agent-kill", "slot-lost")  # they restart "the" agent
_PROMOTE_TIMEOUT = 60.0  # seconds for the standby's slots to sync, or the nodes to follow
_SEGMENT = 16 << 20  # PostgreSQL's default WAL segment size


def default_fault_kinds(
    *,
    several_agents: bool,
    standby_postgres: bool = False,
    standby_reads: bool = False,
    decode_on_standby: bool = False,
    primary_spare: bool = False,
) -> tuple[str, ...]:
    """Every kind that can be injected into such a stack: with several agents the failover
    kinds instead of those that restart "the" agent; with a standby PostgreSQL the
    promotions instead of the lost slot; with reads on the standby or the stream decoded
    there, its lag and restart; with a spare on the primary, the standby down instead of
    the promotions."""
    kinds = list(FAULT_KINDS)
    if several_agents:
        kinds = [kind for kind in kinds if kind not in _ONE_AGENT_KINDS] + list(FAILOVER_KINDS)
    if standby_postgres:
        kinds = [kind for kind in kinds if kind != "slot-lost"]
        kinds += PROMOTE_KINDS
    if standby_reads or decode_on_standby:
        kinds += STANDBY_KINDS
    if primary_spare:
        kinds = [kind for kind in kinds if kind not in PROMOTE_KINDS] + list(SPARE_KINDS)
    return tuple(kinds)


def fault_kinds_problem(
    kinds: Sequence[str],
    *,
    several_agents: bool,
    standby_postgres: bool = False,
    primary_spare: bool = False,
) -> str | None:
    """Why ``kinds`` cannot be injected (``None``: they can): unknown ones, failovers
    without standby agents or standby PostgreSQL, with standby agents the kinds that
    restart "the" agent, with standby PostgreSQL the lost slot; promotions of the
    asynchronous standby a spare on the primary comes with, the standby down without it."""
    known = {*FAULT_KINDS, *FAILOVER_KINDS, *PROMOTE_KINDS, *STANDBY_KINDS, *SPARE_KINDS}
    unknown = set(kinds) - known
    if unknown:
        return f"unknown fault kind(s): {', '.join(sorted(unknown))}"
    if not several_agents and set(kinds) & set(FAILOVER_KINDS):
        return "the agent-failover-* faults need --standby-agents"
    if several_agents and set(kinds) & set(_ONE_AGENT_KINDS):
        return "with --standby-agents, use agent-failover-kill rather than agent-kill or slot-lost"
    if not standby_postgres and set(kinds) & set(PROMOTE_KINDS):
        return "the promote-* faults need --standby-postgres"
    if not standby_postgres and set(kinds) & set(STANDBY_KINDS):
        return "the standby-* faults need --standby-postgres (and --standby-reads to matter)"
    if standby_postgres and "slot-lost" in kinds:
        return "with --standby-postgres, slot-lost cannot be injected (the standby keeps a copy)"
    if primary_spare and set(kinds) & set(PROMOTE_KINDS):
        return (
            "with --primary-spare the standby is asynchronous, and its promotion after a crash "
            "may lose commits the application saw: the promote-* faults need a check without it"
        )
    if not primary_spare and set(kinds) & set(SPARE_KINDS):
        return (
            "the standby-down fault needs --primary-spare (a synchronous standby down stops "
            "every commit on the primary, the agent's lease renewal among them)"
        )
    return None


@dataclass(frozen=True)
class Fault:
    """One injected fault: its kind and when it started and ended (Unix seconds)."""

    kind: str
    started: float
    ended: float
    error: str = ""
    """Why injecting it failed (empty: it was injected)."""
    took: float | None = None
    """For a failover: seconds from the fault until another agent was active; for a
    promotion, until every node applied the new primary's writes; for the standby down,
    until the stream ran on the primary's spare slot."""
    rewound: bool | None = None
    """For a promotion: whether the agent rewound a node (its versioned entries dropped)
    rather than keep the cache; for the standby down, whether it rewound or reset one."""
    outage: tuple[float, float] | None = None
    """When PostgreSQL was away for the application (Unix seconds): a promotion's stop or
    crash until every node followed the new primary; ``None``: the whole fault, if any."""


class FaultInjector:
    """Injects ``kinds`` in turn, one due every ``every`` seconds, until stopped."""

    def __init__(
        self,
        target: CheckStack,
        kinds: Sequence[str],
        every: float,
        report: Callable[[str], None],
        keep_up: Callable[[], bool] | None = None,
        agents: AgentGroup | None = None,
    ) -> None:
        """``keep_up`` is called right before the lost-slot fault's checkpoint: whatever
        other slot must survive it (the checker's own) reads everything first, and there
        is no checkpoint unless it says it did. ``agents``: several agents, for the
        failover kinds (and without the one-agent kinds, which restart "the" agent)."""
        problem = fault_kinds_problem(
            kinds,
            several_agents=agents is not None,
            standby_postgres=target.servers is not None,
            primary_spare=target.primary_spare,
        )
        if problem is not None:
            raise ValueError(problem)
        self.agents = agents
        self.stack = target.stack
        self.servers = target.servers
        self.target = target
        self.kinds = list(kinds)
        self.every = every
        self.report = report
        self.keep_up = keep_up
        self.faults: list[Fault] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="check-faults", daemon=True)
        self._victim = itertools.count()
        self._outcome = _Outcome()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        # A fixed cadence: a slow fault (a PostgreSQL restart) does not push the later
        # kinds out of a short run.
        due = time.monotonic()
        for kind in itertools.cycle(self.kinds) if self.kinds else ():
            due += self.every
            if self._stop.wait(max(due - time.monotonic(), 0.0)):
                return
            started = time.time()
            self.report(f"fault: {kind}")
            error, took = "", None
            self._outcome = _Outcome()
            try:
                took = getattr(self, "_" + kind.replace("-", "_"))()
            except Exception as failure:  # a fault that failed is reported, the run goes on
                log.exception("injecting %s failed", kind)
                error = repr(failure)
            outcome = self._outcome
            self.faults.append(
                Fault(kind, started, time.time(), error, took, outcome.rewound, outcome.outage)
            )

    def _node_index(self) -> int:
        return next(self._victim) % len(self.stack.nodes)

    def _node_kill(self) -> None:
        index = self._node_index()
        self.stack.nodes[index].kill()
        time.sleep(0.5)
        self.stack.restart_node(index)

    def _agent_kill(self) -> None:
        assert self.stack.agent is not None
        self.stack.agent.kill()
        time.sleep(0.5)
        self.stack.restart_agent()

    def _slot_lost(self) -> None:
        """Stop the agent, push WAL past ``max_slot_wal_keep_size`` behind its slot and
        checkpoint until PostgreSQL invalidates the slot; then start the agent again."""
        assert self.stack.agent is not None
        self.stack.agent.kill()
        try:
            with psycopg.connect(self.stack.dsn, autocommit=True, connect_timeout=5) as admin:
                for _attempt in range(3):
                    self._push_wal_past_slot(admin)
                    if self.keep_up is not None and not self.keep_up():
                        raise RuntimeError("the checker's slot could not catch up: no checkpoint")
                    admin.execute("CHECKPOINT")
                    if _slot_status(admin, AGENT_SLOT) == "lost":
                        return
                raise RuntimeError(f"slot {AGENT_SLOT} was not invalidated")
        finally:
            self.stack.restart_agent()

    def _push_wal_past_slot(self, admin: psycopg.Connection[Any]) -> None:
        """Switch WAL segments (each after a record, or the switch does nothing) until the
        agent's slot holds more than ``max_slot_wal_keep_size`` and three more segments."""
        wanted = SLOT_WAL_KEEP + 3 * _SEGMENT
        for _ in range(64):
            row = admin.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (AGENT_SLOT,),
            ).fetchone()
            if row is None or row[0] is None or int(row[0]) > wanted:
                return
            admin.execute("SELECT pg_logical_emit_message(false, 'txcache-check', 'wal')")
            admin.execute("SELECT pg_switch_wal()")

    def _pinner_kill(self) -> None:
        with psycopg.connect(self.stack.dsn, autocommit=True, connect_timeout=5) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'txcache-agent pinner%%'"
            )

    def _postgres_restart(self) -> None:
        primary = self.servers.primary if self.servers is not None else self.stack.postgres
        assert primary is not None
        primary.restart()

    def _promote_stop(self) -> float:
        return self._promote("stop")

    def _promote_crash(self) -> float:
        return self._promote("crash")

    def _promote(self, how: Literal["stop", "crash"]) -> float:
        """Fail over once the standby holds both slots (else the promotion would lose them),
        time it until every node applied the new primary's writes, then make a new standby
        (even when the nodes did not follow: the next promotion needs one). Records the
        outage and whether a node was rewound in :attr:`_outcome`."""
        servers = self._servers()
        # Decoded on the standby (or, after a promotion, on the primary it became), the
        # agent's slot is no failover slot: where it is lost, the agent creates it again.
        synced = (CHECK_SLOT,) if self.target.decoding_standby else (AGENT_SLOT, CHECK_SLOT)
        wait_until(
            lambda: servers.slots_synced(synced),
            "the standby's copies of the failover slots",
            timeout=_PROMOTE_TIMEOUT,
        )
        rewinds = self._node_counts("rewinds")
        since, down = time.monotonic(), time.time()
        try:
            servers.fail_over(how)
            self.stack.caught_up(timeout=_PROMOTE_TIMEOUT)
            took = time.monotonic() - since
            self._outcome.outage = (down, time.time())
        finally:
            servers.rebuild_standby()
        self._outcome.rewound = self._node_counts("rewinds") != rewinds
        return took

    def _standby_lag(self) -> None:
        """Pause the standby's replay for two seconds, then resume it (the agent's pinner
        leaves a pause of someone else's in place)."""
        standby = self._standby()
        with psycopg.connect(standby.dsn, autocommit=True) as db:
            db.execute("SELECT pg_wal_replay_pause()")
            try:
                self._stop.wait(2.0)
            finally:
                db.execute("SELECT pg_wal_replay_resume()")

    def _standby_restart(self) -> float:
        """Crash the standby and start it again; the seconds until the agent lists pins on
        it again (when it pins it) and the nodes applied the stream decoded on it (when it
        is decoded there)."""
        standby = self._standby()
        standby.crash()
        since = time.monotonic()
        standby.start()
        if self.target.replicas:
            agents = self.agents.addresses if self.agents is not None else [None]
            wait_until(
                lambda: any(self.stack.standby_pins_listed(agent) for agent in agents),
                "the active agent to list pins on the restarted standby",
                timeout=_PROMOTE_TIMEOUT,
            )
        if self.target.decoding_standby:
            self.stack.caught_up(timeout=_PROMOTE_TIMEOUT)
        return time.monotonic() - since

    def _standby_down(self) -> float:
        """Crash the standby the stream is decoded on and keep it down until the stream runs
        on the primary's spare slot: the seconds that took. Then start it again and wait
        until the stream is back on it and every node applied it. Records in
        :attr:`_outcome` whether a node was rewound or reset meanwhile (the spare exists
        so that none is); a fault that does not get that far counts as one that did."""
        primary, standby = self._servers().primary, self._standby()
        wait_for_stream_on(
            standby.dsn,
            "the stream to run on the standby before it goes down",
            timeout=_PROMOTE_TIMEOUT,
        )
        before = self._node_counts("rewinds", "resets")
        self._outcome.rewound = True
        standby.crash()
        since = time.monotonic()
        try:
            wait_for_stream_on(
                primary.dsn,
                "the stream to move to the primary's spare slot",
                timeout=_PROMOTE_TIMEOUT,
            )
            took = time.monotonic() - since
        finally:
            standby.start()
        wait_for_stream_on(
            standby.dsn, "the stream to return to the restarted standby", timeout=_PROMOTE_TIMEOUT
        )
        self.stack.caught_up(timeout=_PROMOTE_TIMEOUT)
        self._outcome.rewound = self._node_counts("rewinds", "resets") != before
        return took

    def _standby(self) -> EmbeddedPostgres:
        standby = self._servers().standby
        assert standby is not None, "a promotion makes a new standby before it returns"
        return standby

    def _node_counts(self, *counters: str) -> list[tuple[str, ...]]:
        """Each node's ``counters`` of its INFO (``rewinds``, ``resets``; a node restarted
        meanwhile starts again at 0)."""
        infos = [self.stack.node_info(address, "txcache") for address in self.stack.node_addresses]
        return [tuple(info[counter] for counter in counters) for info in infos]

    def _servers(self) -> ReplicatedPostgres:
        assert self.servers is not None, "checked in __init__"
        return self.servers

    def _agent_failover_kill(self) -> float:
        group = self._group()

        def kill(index: int) -> Callable[[], None]:
            group.agents[index].kill()
            return lambda: group.restart(index)

        return _failover(group, kill)

    def _agent_failover_stop(self) -> float:
        group = self._group()

        def stop(index: int) -> Callable[[], None]:
            pid = group.agents[index].process.pid
            os.kill(pid, signal.SIGSTOP)
            return lambda: os.kill(pid, signal.SIGCONT)

        return _failover(group, stop)

    def _agent_failover_cut(self) -> float:
        group = self._group()

        def cut(index: int) -> Callable[[], None]:
            group.proxies[index].cut()
            return group.proxies[index].heal

        return _failover(group, cut)

    def _group(self) -> AgentGroup:
        assert self.agents is not None, "checked in __init__"
        return self.agents

    def _node_leave(self) -> float:
        """Take a node out of the agent's membership for two seconds, then put it back;
        the seconds from its return until it applied every commit so far."""
        address = self.stack.node_addresses[self._node_index()]
        self.stack.remove_members(address)
        try:
            self._stop.wait(2.0)
        finally:
            self.stack.add_members(address)
        since = time.monotonic()
        self.stack.caught_up()
        return time.monotonic() - since

    def _node_stall(self) -> None:
        process = self.stack.nodes[self._node_index()].process
        os.kill(process.pid, signal.SIGSTOP)
        try:
            self._stop.wait(2.0)
        finally:
            os.kill(process.pid, signal.SIGCONT)


@dataclass
class _Outcome:
    """What a promotion or the standby down found, beside its time."""

    rewound: bool | None = None
    outage: tuple[float, float] | None = None


def _failover(group: AgentGroup, fault: Callable[[int], Callable[[], None]]) -> float:
    """Inject ``fault`` on the active agent (it returns how to undo it), time the takeover,
    undo it."""
    old = group.active()
    since = time.monotonic()
    undo = fault(old)
    try:
        return group.takeover(old, since)
    finally:
        undo()


def _slot_status(admin: psycopg.Connection[Any], slot: str) -> str | None:
    """``wal_status`` of a replication slot (``None``: no such slot)."""
    row = admin.execute(
        "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    return None if row is None else str(row[0])

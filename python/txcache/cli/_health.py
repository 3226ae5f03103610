"""What ``txcache status`` calls degraded: parts that answer but do not do their job.

A node that answers but receives no stream serves nothing a consistent reader can use; an
agent that cannot take a pin makes every transaction run uncached; a slot far behind or a database
that lost a setting breaks invalidation. Each finding is a :class:`Problem` saying what is
wrong and what to do. :func:`diagnose` is pure (reports in, problems out);
:func:`probe_database` asks the database, within a bound: a server that accepts connections
but never answers (stopped, overloaded, behind a frozen proxy) is reported, not waited on.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from psycopg.conninfo import make_conninfo

from txcache._setup import SetupError, StepStatus, setup_database
from txcache.cli._probe import AgentReport, NodeReport

__all__ = [
    "LEAST_CONNECT_TIMEOUT",
    "SILENT_STREAM_SECONDS",
    "SLOT_BEHIND_BYTES",
    "Problem",
    "SlotPlace",
    "database_seconds",
    "diagnose",
    "diagnose_agents",
    "probe_database",
]

SILENT_STREAM_SECONDS = 10.0
"""A node whose newest stream message (commit or heartbeat, every 200 ms by default) is
older than this is not being fed."""

SLOT_BEHIND_BYTES = 256 << 20
"""A slot whose confirmed position is this far behind the database's WAL is far behind."""

LEAST_CONNECT_TIMEOUT = 2
"""libpq's (and psycopg's) shortest ``connect_timeout``, in whole seconds: 1 is taken as 2."""

_REACH_FIX = "check TXCACHE_DSN or --dsn, and that the server answers"

T = TypeVar("T")

_SLOT_STEP = "slot"
"""The name of setup's step that creates the agent's replication slot."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a part that answers: ``part`` (``node host:port``, ``agent …``,
    ``database``, ``settings``), ``what`` is wrong and what to do (``fix``)."""

    part: str
    what: str
    fix: str


def diagnose(
    nodes: list[NodeReport],
    agent: AgentReport | None,
    now_micros: int,
    *,
    agent_given: bool,
    nodes_given: bool = True,
) -> list[Problem]:
    """The problems of the reachable parts (unreachable ones are reported as such).
    ``nodes_given``: ``nodes`` are the ones asked about (``--nodes``), not those the agent
    named (its ``NODES``)."""
    problems = [problem for node in nodes for problem in _node_problems(node, now_micros)]
    agent_answers = agent is not None and agent.reachable
    if agent is not None and agent.reachable:
        problems += _agent_problems(agent, len(nodes), nodes_given=nodes_given)
        problems += [problem for node in nodes for problem in _database_problems(node, agent)]
    if not nodes and agent is not None and agent_answers and not nodes_given:
        problems.append(
            Problem(
                f"agent {agent.address}",
                "feeds no cache node: a library following it runs uncached",
                "start the agent with --node HOST:PORT for each node, or (an agent started "
                "without --node) add them with `txcache nodes add HOST:PORT`",
            )
        )
    elif not nodes and (nodes_given or not agent_given):  # else: the agent could not say
        problems.append(
            Problem(
                "settings",
                "no cache nodes given: a library with these settings runs uncached",
                "set TXCACHE_NODES (or pass nodes=) to the cache nodes' addresses "
                "(`txcache up` prints them)",
            )
        )
    if not agent_given:
        problems.append(
            Problem(
                "settings",
                "no agent given: a library with these settings runs uncached",
                "set TXCACHE_AGENT (or pass agent=) to the agent's --listen address",
            )
        )
    return problems


def diagnose_agents(agents: Sequence[AgentReport]) -> list[Problem]:
    """The problems of the agents named together (one active, the others standbys): none of
    those answering is active, or several are. Each active one's own problems are
    :func:`diagnose`'s."""
    answering = [agent for agent in agents if agent.reachable]
    active = [agent.address for agent in answering if agent.active]
    if answering and not active:
        standbys = "; ".join(f"{agent.address}: {agent.standby}" for agent in answering)
        return [
            Problem(
                "agents",
                f"no agent given is active ({standbys}): a library with these settings "
                "runs uncached until one is",
                "name the active agent too (TXCACHE_AGENT, comma-separated), or read the "
                "standbys' logs: one takes over within seconds of the active one's end",
            )
        ]
    if len(active) > 1:
        return [
            Problem(
                "agents",
                f"several agents answer as the active one ({', '.join(active)}): the "
                "library follows only the first it finds",
                "name only the agents that run against one database (of which one is active, "
                "the others standbys); if they do, read their logs",
            )
        ]
    return []


def _node_problems(node: NodeReport, now_micros: int) -> list[Problem]:
    if not node.reachable:
        return []
    part = f"node {node.address}"
    if node.last_message_time == 0:
        return [
            Problem(
                part,
                "receives no invalidation stream (no message since it started)",
                f"start the agent with --node {node.address} (it feeds only the nodes it "
                "is given), or take the node out of TXCACHE_NODES",
            )
        ]
    silent = (now_micros - node.last_message_time) / 1e6
    if silent > SILENT_STREAM_SECONDS:
        return [
            Problem(
                part,
                f"its last stream message is {silent:.0f} s old: the agent is not feeding it",
                "check that the agent runs and feeds this node (--node, or `txcache nodes "
                "add` for an agent started without --node); its log says why it cannot reach "
                "the node (a password: --node-password)",
            )
        ]
    return []


def _database_problems(node: NodeReport, agent: AgentReport) -> list[Problem]:
    """A node that follows another database than the agent's: two databases' agents were
    given the same nodes, and the first to feed it has it (docs/protocol.md, TXDATABASE)."""
    if not node.reachable or None in (node.database, agent.database):
        return []
    if node.database == agent.database:
        return []
    return [
        Problem(
            f"node {node.address}",
            f"follows database {node.database}, not the agent's {agent.database}: another "
            "database's agent fed it first, so this agent cannot feed it and this database's "
            "libraries do not use it",
            "give each database cache nodes of its own, or restart the node to hand it over",
        )
    ]


def _agent_problems(agent: AgentReport, nodes: int, *, nodes_given: bool) -> list[Problem]:
    part = f"agent {agent.address}"
    problems: list[Problem] = []
    if not agent.pins:
        problems.append(
            Problem(
                part,
                f"cannot take a pin ({agent.pin_error or 'none given'}): every read-only "
                "transaction runs without the cache",
                "read the agent's log: its pinner sessions cannot take snapshots "
                "(connections refused? the stream not started, or held back by a standby "
                "named in synchronized_standby_slots that is down?)",
            )
        )
    connected = agent.status.get("nodes_connected")
    why = "its log says why it cannot reach one (down, or a password: --node-password)"
    if connected is not None and nodes and connected < nodes and nodes_given:
        problems.append(
            Problem(
                part,
                f"is connected to {connected} node(s), {nodes} given here",
                "give the agent every node of TXCACHE_NODES (--node, or `txcache nodes add` "
                f"for an agent started without --node); {why}",
            )
        )
    elif connected is not None and nodes and connected < nodes:
        problems.append(
            Problem(
                part,
                f"is connected to {connected} of the {nodes} node(s) it feeds",
                f"a node it cannot reach is reported above if it is down; else {why}",
            )
        )
    return problems


@dataclass(frozen=True)
class SlotPlace:
    """Where the active agent keeps its slot, as its ``STATUS`` says: on a ``--decode-from``
    standby (``on_standby``; the primary's then has none), perhaps with a spare slot left on
    the primary (``primary_spare``)."""

    on_standby: bool = False
    primary_spare: bool = False

    @classmethod
    def of(cls, agent: AgentReport | None) -> SlotPlace:
        """The place ``agent`` reports (on the primary, when there is no agent to ask)."""
        status = agent.status if agent is not None else {}
        return cls(bool(status.get("slot_on_standby")), bool(status.get("primary_slot_spare")))


def probe_database(
    dsn: str,
    slot: str = "txcache",
    timeout: float = 5.0,
    place: SlotPlace = SlotPlace(),
    setup_command: str = "txcache setup",
) -> list[Problem]:
    """What ``txcache setup --check`` finds missing, and the slot's state; never raises.

    Each of its two connections (setup's check, then the slot's state) gets ``timeout``
    seconds to connect (``connect_timeout``, at least :data:`LEAST_CONNECT_TIMEOUT`) and
    ``timeout`` more for its statements (:func:`database_seconds` in all); one that has not
    finished by then is reported as not answering, after what was found before it. With
    the agent's slot on a standby (``place``), the primary's slot is missing on purpose, and
    one found there is a leftover holding WAL, unless it is the spare. A fix names
    ``setup_command`` (``manage.py txcache_setup`` from Django), with ``--slot``."""
    try:
        bounded = make_conninfo(dsn, connect_timeout=_connect_seconds(timeout))
    except psycopg.Error as error:  # a connection string psycopg cannot read
        return [_unreachable(error)]
    seconds = database_seconds(timeout)
    run_setup = setup_command if slot == "txcache" else f"{setup_command} --slot {slot}"
    setup = _within(seconds, lambda: _setup_problems(bounded, slot, place, run_setup))
    if setup is None:
        return [_silent("txcache setup --check", seconds)]
    problems, reachable = setup
    if not reachable:
        return problems
    state = _within(seconds, lambda: _slot_problems(bounded, slot, place))
    if state is None:
        return [*problems, _silent(f"the state of slot {slot}", seconds)]
    return [*problems, *state]


def database_seconds(timeout: float) -> float:
    """The longest one database connection of :func:`probe_database` may take: connecting,
    then ``timeout`` for its statements."""
    return _connect_seconds(timeout) + timeout


def _connect_seconds(timeout: float) -> int:
    return max(LEAST_CONNECT_TIMEOUT, math.ceil(timeout))


def _within(seconds: float, call: Callable[[], T]) -> T | None:
    """``call()``'s result, or ``None`` if it has not returned within ``seconds``: it runs
    in a daemon thread, left behind then (the command exits right after). psycopg bounds
    connecting but not a statement's reply, and a server-side ``statement_timeout`` never
    fires in a server that is stopped; only the caller's own clock bounds that wait."""
    results: list[T] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            results.append(call())
        except BaseException as error:  # raised again in the caller's thread
            failures.append(error)

    worker = threading.Thread(target=run, name="txcache-status-database", daemon=True)
    worker.start()
    worker.join(seconds)
    if failures:
        raise failures[0]
    return results[0] if results else None


def _setup_problems(
    dsn: str, slot: str, place: SlotPlace, run_setup: str
) -> tuple[list[Problem], bool]:
    """The steps setup's check finds missing (each fixed by running ``run_setup``), and
    whether the database answered well enough to ask about the slot too."""
    try:
        report = setup_database(dsn, slot=slot, check=True)
    except SetupError as error:
        first = str(error).splitlines()[0]
        if isinstance(error.__cause__, psycopg.OperationalError):  # no connection, or lost
            return [Problem("database", f"unreachable: {first}", _REACH_FIX)], False
        return [Problem("database", first, f"run `{run_setup}` for details")], False
    except psycopg.Error as error:
        return [_unreachable(error)], False
    missing = [
        Problem("database", f"setup step {step.name} missing: {step.detail}", f"run {run_setup}")
        for step in report.steps
        if step.status is StepStatus.MISSING
        and not (place.on_standby and step.name == _SLOT_STEP)  # the agent's is elsewhere
    ]
    return missing, True


def _slot_problems(dsn: str, slot: str, place: SlotPlace) -> list[Problem]:
    """Whether an agent streams from the slot, and how far behind the WAL it is; with the
    agent's slot on a standby, whether one is left on the primary that no agent keeps."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, "
                "active FROM pg_replication_slots WHERE slot_name = %s",
                (slot,),
            ).fetchone()
    except psycopg.Error as error:
        return [_unreachable(error)]
    if row is None:
        return []  # setup's check reported the missing slot
    problems = []
    behind, active = row
    if place.on_standby and not place.primary_spare and not active:
        return [
            Problem(
                "database",
                f"slot {slot} on this database is a leftover: the agent decodes on a standby "
                "(--decode-from), and nothing advances this one, which holds WAL",
                f"drop it: SELECT pg_drop_replication_slot('{slot}') (and do not run "
                "txcache setup for the slot while the agent decodes on a standby)",
            )
        ]
    if place.on_standby:
        return []  # the spare: tended by the agent, not streamed from
    if not active:
        problems.append(
            Problem(
                "database",
                f"no agent streams from slot {slot}: WAL piles up behind it",
                "start txcache-agent (or drop the slot if txcache is gone)",
            )
        )
    if behind is not None and behind > SLOT_BEHIND_BYTES:
        problems.append(
            Problem(
                "database",
                f"slot {slot} is {behind >> 20} MiB behind the database's WAL",
                "the agent cannot keep up or is stopped: read its log; a slot that falls "
                "behind max_slot_wal_keep_size is lost",
            )
        )
    return problems


def _silent(what: str, seconds: float) -> Problem:
    return Problem(
        "database",
        f"does not answer: {what} did not finish within {seconds:g} s",
        "check that the server runs and answers (stopped? overloaded? a stalled proxy or "
        "network path?); a slow but healthy one needs a longer --timeout",
    )


def _unreachable(error: psycopg.Error) -> Problem:
    return Problem("database", f"unreachable: {str(error).strip()}", _REACH_FIX)

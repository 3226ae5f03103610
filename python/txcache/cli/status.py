"""``txcache status``: how the cache nodes and the agent are doing (see ``docs/setup.md``).

For each node (``--nodes``, else those the active agent feeds): reachable or not, its
stream position N and how old its newest stream message is, memory used of the limit, keys,
versioned hits and misses by kind with the hit rate, plain ``GET`` hits and misses,
invalidations; its lag is the agent's ``commit_position`` minus N (bytes of WAL not yet
applied; 0 when caught up). For each agent (``--agent`` may name several: one active, the
others standbys): its ``STATUS`` fields and its pins, with the age of the newest pin's
``current_as_of``, or that it is a standby; the lag is the active one's. With a database
(``--dsn``, default ``$TXCACHE_DSN``), what ``txcache setup --check`` finds missing and the
slot's state, each of its connections bounded by ``--timeout`` too. ``rediss://`` endpoints
are checked against ``--tls-ca`` (default ``$TXCACHE_TLS_CA``, as the library reads it), else
the system's CAs. Then every problem of a part that answers but does not do its job, with what
to do (:mod:`txcache.cli._health`). ``--json`` prints the same as one JSON object. Exit
status 1 if any endpoint is unreachable or any problem was found, 0 otherwise, 2 for a bad
command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from txcache import _validate as validate
from txcache._pinset import Pin
from txcache._resp import parse_address
from txcache.cli._arguments import add_slot, checked, wait_seconds
from txcache.cli._health import Problem, SlotPlace, diagnose, diagnose_agents, probe_database
from txcache.cli._probe import (
    AgentReport,
    NodeReport,
    ProcessReport,
    Report,
    probe_agent,
    probe_metrics,
    probe_node,
)

__all__ = ["add_parser", "agent_json", "node_json", "run"]


def _address(text: str) -> str:
    try:
        parse_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text.strip()


def _address_list(text: str) -> list[str]:
    return [_address(part) for part in text.split(",") if part.strip()]


def _url_list(text: str) -> list[str]:
    urls = [part.strip() for part in text.split(",") if part.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise argparse.ArgumentTypeError(f"not an http(s) URL: {url!r}")
    return urls


def add_parser(subparsers: Any) -> None:
    """Register ``status`` and its options."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "status",
        help="report how the cache nodes, the agent and the database are; exit 1 on a problem",
        description=(
            "Ask every cache node (TXSTATUS, INFO), the agent (STATUS, PINS) and the database "
            "(setup's check, the slot) how they are and print it, with every problem found "
            "and what to do. Exit status 1 if anything is unreachable or degraded, 0 "
            "otherwise."
        ),
    )
    parser.add_argument(
        "--nodes",
        type=_address_list,
        default=os.environ.get("TXCACHE_NODES", ""),
        metavar="HOST:PORT,...",
        help="the cache nodes (default: $TXCACHE_NODES, else those the active agent feeds)",
    )
    parser.add_argument(
        "--agent",
        type=_address_list,
        default=os.environ.get("TXCACHE_AGENT", ""),
        metavar="HOST:PORT,...",
        help="the agent's endpoint, or several agents' (one active, the others standbys) "
        "(default: $TXCACHE_AGENT)",
    )
    parser.add_argument(
        "--metrics",
        type=_url_list,
        default=os.environ.get("TXCACHE_METRICS", ""),
        metavar="URL,...",
        help="application processes' /metrics (txcache.metrics) to show function statistics "
        "of (default: $TXCACHE_METRICS, else none)",
    )
    parser.add_argument(
        "--dsn",
        type=checked(validate.dsn, hidden=True, empty=True),
        default=os.environ.get("TXCACHE_DSN") or None,
        help="the database, to check its setup and slot (default: $TXCACHE_DSN, else none)",
    )
    add_slot(parser)
    parser.add_argument(
        "--password",
        default=os.environ.get("TXCACHE_PASSWORD") or None,
        help="AUTH password of the nodes and the agent (default: $TXCACHE_PASSWORD, else none)",
    )
    parser.add_argument(
        "--tls-ca",
        type=checked(validate.readable_file, empty=True),
        # As the library reads TXCACHE_TLS_CA: an empty variable is no setting.
        default=os.environ.get("TXCACHE_TLS_CA") or None,
        metavar="FILE",
        help="the CA file (PEM) the certificates of rediss:// nodes and agents must chain to "
        "(default: $TXCACHE_TLS_CA, else the system's CAs)",
    )
    parser.add_argument(
        "--timeout",
        type=wait_seconds,
        default=2.0,
        metavar="SECONDS",
        help="seconds to wait for each endpoint, above 0 and at most 86400; the database gets "
        "as long to connect (at least 2 s, libpq's least) and as long again to answer, per "
        "connection (default: 2)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    # What a problem of the database's setup says to run (Django's command names its own).
    parser.set_defaults(handler=run, setup_command="txcache setup")


def run(args: argparse.Namespace) -> int:
    """Ask every endpoint, print the report; 1 if any is unreachable."""
    if not args.nodes and not args.agent and not args.metrics:
        print(
            "txcache status: error: nothing to ask: give --nodes, --agent or --metrics, or set "
            "TXCACHE_NODES / TXCACHE_AGENT (`txcache up` prints them)",
            file=sys.stderr,
        )
        return 2
    options = {"password": args.password, "timeout": args.timeout, "tls_ca": args.tls_ca or None}
    # The agents first: a node's N is then read after the commit_position it is compared
    # with, so a lag shows only what the node really had not applied.
    agents = [probe_agent(address, **options) for address in args.agent]
    fed = next((agent.nodes for agent in agents if agent.active and agent.nodes), None)
    nodes = [probe_node(address, **options) for address in args.nodes or fed or []]
    processes = [probe_metrics(url, timeout=args.timeout) for url in args.metrics]
    now = time.time_ns() // 1000
    report = Everything(nodes, agents, processes, [])
    if args.nodes or args.agent:  # not when asked about processes alone
        active = report.active_agent
        report.problems = diagnose(
            nodes, active, now, agent_given=bool(args.agent), nodes_given=bool(args.nodes)
        )
        report.problems += diagnose_agents(agents)
    if args.dsn:
        place = SlotPlace.of(report.active_agent)
        report.problems += probe_database(
            args.dsn,
            slot=args.slot,
            timeout=args.timeout,
            place=place,
            setup_command=args.setup_command,
        )
    print(
        json.dumps(_report_json(report, now), indent=2) if args.json else _report_text(report, now)
    )
    return 0 if report.ok else 1


# -- shared numbers -------------------------------------------------------------------------


def _age(now: int, micros: int) -> float | None:
    """Seconds from a wall-clock time in µs to ``now`` (``None`` for 0: never)."""
    return round(max(0, now - micros) / 1e6, 3) if micros else None


def _micros(pin: Pin) -> int:
    """A pin's ``current_as_of`` in µs, as ``PINS`` sent it (the pin holds seconds)."""
    return round(pin.current_as_of * 1_000_000)


def _lag(node: NodeReport, agent: AgentReport | None) -> int | None:
    """Bytes of WAL the agent decoded that the node has not applied yet."""
    if not node.reachable or agent is None or agent.commit_position is None:
        return None
    return max(0, agent.commit_position - node.position)


# -- JSON -----------------------------------------------------------------------------------


def node_json(node: NodeReport, agent: AgentReport | None, now: int) -> dict[str, Any]:
    """One node as a JSON object (``info`` holds every INFO field)."""
    if not node.reachable:
        return {
            "address": node.address,
            "reachable": False,
            "state": node.state,
            "error": node.error,
        }
    info = node.info
    return {
        "address": node.address,
        "reachable": True,
        "state": node.state,
        "database": node.database,
        "position": node.position,
        "history_horizon": node.history_horizon,
        "last_message_age_seconds": _age(now, node.last_message_time),
        "lag_bytes": _lag(node, agent),
        "used_memory": info.get("used_memory"),
        "maxmemory": info.get("maxmemory"),
        "keys": info.get("keys"),
        "versions": info.get("versions"),
        "hits": info.get("hits"),
        "misses": node.misses,
        "hit_rate": node.hit_rate,
        "plain_hits": info.get("plain_hits"),
        "plain_misses": info.get("plain_misses"),
        "plain_hit_rate": node.plain_hit_rate,
        "invalidations": info.get("invalidations"),
        "info": info,
    }


def agent_json(agent: AgentReport, now: int) -> dict[str, Any]:
    """An agent as a JSON object (``status`` holds every STATUS field; ``standby`` what a
    standby answered, ``null`` for the active agent)."""
    if not agent.reachable:
        return {
            "address": agent.address,
            "reachable": False,
            "state": agent.state,
            "error": agent.error,
        }
    if agent.standby is not None:
        return {
            "address": agent.address,
            "reachable": True,
            "state": agent.state,
            "standby": agent.standby,
            "status": {**agent.fields, **agent.status},
        }
    newest = agent.newest_pin
    return {
        "address": agent.address,
        "reachable": True,
        "state": agent.state,
        "standby": None,
        "status": {**agent.fields, **agent.status},
        "standbys": agent.standbys,
        "database": agent.database,
        "pins": len(agent.pins),
        "newest_pin": None
        if newest is None
        else {
            "ts": newest.ts,
            "current_as_of": _micros(newest),
            "age_seconds": _age(now, _micros(newest)),
        },
    }


@dataclass
class Everything:
    """Every report of one run."""

    nodes: list[NodeReport]
    agents: list[AgentReport]
    processes: list[ProcessReport]
    problems: list[Problem]

    @property
    def active_agent(self) -> AgentReport | None:
        """The first agent that answered as the active one: the one a library follows."""
        return next((agent for agent in self.agents if agent.active), None)

    @property
    def agent(self) -> AgentReport | None:
        """The agent the report's ``agent`` names: the active one, else the first given."""
        return self.active_agent or next(iter(self.agents), None)

    @property
    def endpoints(self) -> list[Report]:
        """Every part asked, in the order printed."""
        return [*self.nodes, *self.agents, *self.processes]

    @property
    def ok(self) -> bool:
        """Every part answered and nothing is degraded."""
        return all(part.reachable for part in self.endpoints) and not self.problems


def process_json(process: ProcessReport) -> dict[str, Any]:
    """One application process as a JSON object (its functions' and views' counters)."""
    if not process.reachable:
        return {"url": process.address, "reachable": False, "state": process.state,
                "error": process.error}  # fmt: skip
    return {
        "url": process.address,
        "reachable": True,
        "state": process.state,
        "functions": {
            name: {**counters, "hit_rate": _hit_rate(counters)}
            for name, counters in sorted(process.functions.items())
        },
        "views": {
            name: {**counters, "hit_rate": _hit_rate(counters)}
            for name, counters in sorted(process.views.items())
        },
    }


def _report_json(report: Everything, now: int) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "time": now,
        "nodes": [node_json(node, report.active_agent, now) for node in report.nodes],
        "agent": agent_json(report.agent, now) if report.agent is not None else None,
        "agents": [agent_json(agent, now) for agent in report.agents],
        "processes": [process_json(process) for process in report.processes],
        "problems": [
            {"part": problem.part, "what": problem.what, "fix": problem.fix}
            for problem in report.problems
        ],
    }


# -- text -----------------------------------------------------------------------------------


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f} %"


def _seconds_ago(now: int, micros: int) -> str:
    age = _age(now, micros)
    return "never" if age is None else f"{age:.1f} s ago"


def _node_text(node: NodeReport, agent: AgentReport | None, now: int) -> list[str]:
    if not node.reachable:
        return [f"node {node.address}: {node.state.upper()}: {node.error}"]
    info, lag = node.info, _lag(node, agent)
    used, limit = info.get("used_memory", 0), info.get("maxmemory", 0)
    misses = ", ".join(f"{kind} {count}" for kind, count in node.misses.items())
    lag_text = "unknown (no agent)" if lag is None else f"{lag} bytes behind the agent"
    return [
        f"node {node.address}: up",
        f"  stream         N {node.position}, last message "
        f"{_seconds_ago(now, node.last_message_time)}, lag {lag_text}",
        f"  memory         {_size(used)} used of {_size(limit)} "
        f"({_percent(used / limit if limit else None)})",
        f"  keys           {info.get('keys', 0)} ({info.get('versions', 0)} versions, "
        f"{info.get('open_versions', 0)} open)",
        f"  lookups        hits {info.get('hits', 0)}, misses {sum(node.misses.values())} "
        f"({misses}), hit rate {_percent(node.hit_rate)}",
        f"  plain GET      hits {info.get('plain_hits', 0)}, misses "
        f"{info.get('plain_misses', 0)}, hit rate {_percent(node.plain_hit_rate)}",
        f"  invalidations  {info.get('invalidations', 0)} applied, "
        f"{info.get('invalidations_duplicate', 0)} duplicate, "
        f"{info.get('versions_truncated', 0)} versions truncated; "
        f"{info.get('evictions', 0)} evictions",
    ]


def _agent_text(agent: AgentReport, now: int) -> list[str]:
    if not agent.reachable:
        return [f"agent {agent.address}: {agent.state.upper()}: {agent.error}"]
    if agent.standby is not None:
        return [f"agent {agent.address}: up, standby: {agent.standby}"]
    status, newest = agent.status, agent.newest_pin
    pins = f"{len(agent.pins)} live"
    if newest is not None:
        pins += f", newest ts {newest.ts} current as of {_seconds_ago(now, _micros(newest))}"
    lines = [
        f"agent {agent.address}: up",
        f"  stream         commit_position {status.get('commit_position', 0)}, "
        f"heartbeat_position {status.get('heartbeat_position', 0)}, delivered_everywhere "
        f"{status.get('delivered_everywhere', 0)}, nodes_connected "
        f"{status.get('nodes_connected', 0)}",
        f"  pins           {pins}; certified {status.get('pins_certified', 0)}, unclean "
        f"{status.get('pins_unclean', 0)}, below floor {status.get('pins_below_floor', 0)}",
    ]
    if agent.standbys:
        listed = ", ".join(f"{name} {count} pin(s)" for name, count in agent.standbys.items())
        idle = [name for name, count in agent.standbys.items() if count == 0]
        lines.append(f"  standbys       {listed}")
        if idle:
            lines.append(
                f"                 without pins: {', '.join(idle)} (their misses go to the "
                "primary until they have one: idle for want of reads, or the agent's log "
                "lines starting 'standby pins:' say why, with what to do)"
            )
    return lines


def _hit_rate(counters: dict[str, float]) -> float | None:
    lookups = counters.get("hits", 0.0) + counters.get("misses", 0.0)
    return counters.get("hits", 0.0) / lookups if lookups else None


def _process_text(process: ProcessReport) -> list[str]:
    if not process.reachable:
        return [f"process {process.address}: {process.state.upper()}: {process.error}"]
    lines = [f"process {process.address}: up, {len(process.functions)} cacheable function(s)"]
    for name, counters in sorted(process.functions.items()):
        count = {key: int(counters.get(key, 0)) for key in ("hits", "misses", "uncached", "errors")}
        lines.append(
            f"  {name}: hits {count['hits']}, misses {count['misses']}, uncached "
            f"{count['uncached']}, errors {count['errors']}, hit rate "
            f"{_percent(_hit_rate(counters))}"
        )
    for name, counters in sorted(process.views.items()):
        count = {key: int(counters.get(key, 0)) for key in ("requests", "hits", "misses")}
        lines.append(
            f"  view {name}: requests {count['requests']}, hits {count['hits']}, misses "
            f"{count['misses']}, hit rate {_percent(_hit_rate(counters))}"
        )
    return lines


def _report_text(report: Everything, now: int) -> str:
    lines: list[str] = []
    for node in report.nodes:
        lines += _node_text(node, report.active_agent, now)
    for agent in report.agents:
        lines += _agent_text(agent, now)
    for process in report.processes:
        lines += _process_text(process)
    for problem in report.problems:
        lines += [f"DEGRADED {problem.part}: {problem.what}", f"  fix: {problem.fix}"]
    everything = report.endpoints
    down = [f"{part.address} ({part.state})" for part in everything if not part.reachable]
    verdict = f"not up: {', '.join(down)}" if down else "all reachable"
    if report.problems:
        verdict += f"; {len(report.problems)} problem(s)"
    lines.append(f"{len(everything) - len(down)} of {len(everything)} endpoint(s) up; {verdict}")
    return "\n".join(lines)

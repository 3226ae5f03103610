"""The stack a check runs against, with the handles its faults need: PostgreSQL (embedded,
its own server so that it can be restarted), two cache nodes and the agent, each restarted
on the same port after a crash so that the library's settings stay right."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg

from txcache._agent_process import AgentProcess
from txcache._node_process import NodeProcess
from txcache._postgres import EmbeddedPostgres
from txcache._setup import setup_database
from txcache.check.workload import SCHEMA

__all__ = ["AGENT_SLOT", "CHECK_SLOT", "SLOT_WAL_KEEP_MB", "CheckStack", "running_stack"]

CHECK_SLOT = "txcache_check"
"""The checker's own logical slot (test_decoding): commit order and times, independent of
the system under test."""

AGENT_SLOT = "txcache"
"""The agent's slot (``txcache setup``'s default), which the lost-slot fault invalidates."""

SLOT_WAL_KEEP_MB = 64
"""``max_slot_wal_keep_size``: small, so that the lost-slot fault is quick; the checker's
own slot is read every second and caught up before that fault's checkpoint."""

_AGENT_ARGS = (
    *("--pin-interval", "200ms", "--heartbeat-interval", "50ms"),
    *("--max-staleness", "30s", "--pin-lease", "5s"),
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class CheckStack:
    """The running parts; :meth:`restart_node` and :meth:`restart_agent` keep ports."""

    postgres: EmbeddedPostgres
    node_ports: list[int]
    agent_port: int
    nodes: list[NodeProcess] = field(default_factory=list)
    agent: AgentProcess | None = None

    @property
    def slot_wal_keep(self) -> int:
        """``max_slot_wal_keep_size`` in bytes."""
        return SLOT_WAL_KEEP_MB << 20

    @property
    def dsn(self) -> str:
        return self.postgres.dsn

    @property
    def node_addresses(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.node_ports]

    @property
    def agent_address(self) -> str:
        return f"127.0.0.1:{self.agent_port}"

    def start_node(self, index: int) -> None:
        """Start node ``index`` on its port."""
        node = NodeProcess("--port", str(self.node_ports[index]), "--max-memory", "64mb")
        if index < len(self.nodes):
            self.nodes[index] = node
        else:
            self.nodes.append(node)

    def start_agent(self) -> None:
        """Start the agent on its port, feeding every node."""
        self.agent = AgentProcess(
            self.dsn,
            self.node_addresses,
            f"--listen=127.0.0.1:{self.agent_port}",
            f"--slot={AGENT_SLOT}",
            *_AGENT_ARGS,
            start_timeout=60.0,
        )

    def stop(self) -> None:
        """Stop the agent, the nodes, then PostgreSQL."""
        if self.agent is not None:
            self.agent.stop()
        for node in self.nodes:
            node.stop()
        self.postgres.stop()


@contextlib.contextmanager
def running_stack() -> Iterator[CheckStack]:
    """A fresh PostgreSQL with the workload's schema, set up, with the checker's slot,
    two nodes and the agent; everything stopped on exit."""
    postgres = EmbeddedPostgres({"max_slot_wal_keep_size": f"{SLOT_WAL_KEEP_MB}MB"})
    stack = CheckStack(postgres, [_free_port(), _free_port()], _free_port())
    try:
        with psycopg.connect(postgres.dsn, autocommit=True) as admin:
            admin.execute(SCHEMA)
            setup_database(postgres.dsn, slot=AGENT_SLOT)
            admin.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (CHECK_SLOT,)
            )
        for index in range(len(stack.node_ports)):
            stack.start_node(index)
        stack.start_agent()
        yield stack
    finally:
        stack.stop()

"""A whole stack for library tests: PostgreSQL (set up), two cache nodes, the agent, and a
:class:`txcache.Cache` connected to them.

``lib`` gives a :class:`LibraryStack`; its ``admin`` connection (autocommit) writes behind
the library's back, and :meth:`LibraryStack.caught_up` waits until both nodes applied every
commit so far.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
import redis

import txcache
from agent_fixtures import lsn
from conftest import StartNode, wait_for
from txcache import AgentProcess, NodeProcess, setup_database

SCHEMA = """
CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, price integer NOT NULL,
                    category integer NOT NULL);
CREATE INDEX ON items (category);
CREATE TABLE users (id integer PRIMARY KEY, name text NOT NULL);
INSERT INTO items SELECT i, 'item ' || i, 10 * i, i % 3 FROM generate_series(1, 20) i;
INSERT INTO users SELECT i, 'user ' || i FROM generate_series(1, 5) i;
"""


AGENT_ARGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")
"""The agent's settings in these tests: pins and heartbeats every 50 ms."""


@dataclass
class LibraryStack:
    dsn: str
    nodes: list[NodeProcess]
    agent: AgentProcess
    cache: txcache.Cache
    admin: psycopg.Connection

    def clients(self) -> list[redis.Redis]:
        return [redis.Redis(host=n.host, port=n.port, protocol=2) for n in self.nodes]

    def write(self, statement: str, *params: object) -> None:
        self.admin.execute(statement, params)

    def caught_up(self, timeout: float = 20.0) -> None:
        """Wait until every node applied everything committed so far, and the library's
        pin list holds a pin at least that recent."""
        row = self.admin.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        target = lsn(row[0])
        deadline = time.monotonic() + timeout
        for client in self.clients():
            while client.execute_command("TXSTATUS")[0] < target:
                assert time.monotonic() < deadline, "a node did not catch up"
                time.sleep(0.01)
            client.close()

    def commit(self, *statements: str) -> int:
        """Run ``statements`` in one read/write transaction through the library; its commit
        LSN, once both nodes applied it and the library knows a pin at or after it."""
        with self.cache.read_write() as tx:
            for statement in statements:
                tx.execute(statement)
        token = tx.commit_timestamp
        assert token is not None
        self.caught_up()
        self.fresh_pins(after=token - 1)
        return token

    def start_agent(self) -> None:
        """Start the agent again on its address (after it was stopped or killed), and wait
        until the library is back with it."""
        self.agent = AgentProcess(
            self.dsn,
            [node.address for node in self.nodes],
            f"--listen={self.agent.host}:{self.agent.port}",
            *AGENT_ARGS,
        )
        self.caught_up()
        assert self.cache.agent is not None
        wait_for(self.cache.agent.refresh, "the library to reconnect to the agent", timeout=20)

    def fresh_pins(self, after: int = 0, timeout: float = 20.0) -> None:
        """Wait until the library knows a pin newer than ``after``."""
        assert self.cache.agent is not None
        deadline = time.monotonic() + timeout
        while True:
            self.cache.agent.refresh()
            pins = self.cache.agent.pins(staleness=60, not_before=after + 1, now=time.time())
            if pins:
                return
            assert time.monotonic() < deadline, "no new pin"
            time.sleep(0.02)


def start_library_stack(
    dsn: str, start_node: StartNode, *agent_args: str, **settings: object
) -> Iterator[LibraryStack]:
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(SCHEMA)
        setup_database(dsn)
        nodes = [start_node("--max-memory", "64mb") for _ in range(2)]
        agent = AgentProcess(dsn, [node.address for node in nodes], *AGENT_ARGS, *agent_args)
        options = {"refresh_interval": 0.05, **settings}
        cache = txcache.connect(
            dsn,
            nodes=[node.address for node in nodes],
            agent=f"{agent.host}:{agent.port}",
            **options,  # type: ignore[arg-type]
        )
        try:
            yield LibraryStack(dsn, nodes, agent, cache, admin)
        finally:
            cache.close()
            agent.stop()


@pytest.fixture
def lib(database: str, start_node: StartNode) -> Iterator[LibraryStack]:
    """PostgreSQL with ``items`` and ``users``, two nodes, the agent, a connected cache."""
    yield from start_library_stack(database, start_node)

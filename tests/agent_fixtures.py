"""A whole stack for agent tests: PostgreSQL (set up), one cache node, the agent.

Probes: open versions at the node that depend on one tag each. A commit carrying a matching
tag truncates the probe at the commit's LSN, so which probes a write truncated shows exactly
which tags reached the node, and when.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
import redis

from conftest import StartNode
from txcache import AgentProcess, NodeProcess, setup_database

SCHEMA = """
CREATE TABLE items (
    id integer PRIMARY KEY,
    sku text UNIQUE,
    category integer,
    price numeric(10, 2),
    ref uuid,
    added date
);
CREATE INDEX ON items (category);
CREATE INDEX ON items (ref);
CREATE INDEX ON items (added);
"""


def lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass
class Stack:
    dsn: str
    node: NodeProcess
    agent: AgentProcess
    cache: redis.Redis
    db: psycopg.Connection

    def wal_position(self) -> int:
        row = self.db.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        return lsn(row[0])

    def caught_up(self, timeout: float = 20.0, cache: redis.Redis | None = None) -> int:
        """Wait until the node (``cache``, default the stack's) has applied everything
        committed so far; returns its N."""
        cache = cache or self.cache
        target = self.wal_position()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            applied = cache.execute_command("TXSTATUS")[0]
            if applied >= target:
                return int(applied)
            time.sleep(0.02)
        pytest.fail(f"node stuck at {applied} < {target}:\n{self.agent.log_text()[-3000:]}")

    def probe(self, *tags: str, cache: redis.Redis | None = None) -> dict[str, str]:
        """One open probe per tag, valid from the node's current position."""
        cache = cache or self.cache
        position = self.caught_up(cache=cache)
        keys = {}
        for tag in tags:
            key = f"probe:{tag}"
            reply = cache.execute_command(
                "TXSET", key, b"p", 0, "OPEN", "SNAPSHOT", position, "TAGS", tag
            )
            assert reply[2] is None, reply
            keys[tag] = key
        return keys

    def truncated(
        self, probes: dict[str, str], cache: redis.Redis | None = None
    ) -> dict[str, int | None]:
        """Each probe's upper bound: the LSN of the commit that matched it, or None."""
        cache = cache or self.cache
        self.caught_up(cache=cache)
        result = {}
        for tag, key in probes.items():
            value, _lo, hi, is_open = cache.execute_command("TXGET", key, 0, 2**62)
            assert value == b"p"
            result[tag] = None if is_open else hi
        return result

    def assert_streams_an_insert(self, row: int, cache: redis.Redis | None = None) -> None:
        """Insert item ``row`` and assert its invalidation reaches the node (``cache``,
        default the stack's): the node follows the stream."""
        probes = self.probe(f"public.items:id={row}", cache=cache)
        self.write("INSERT INTO items (id) VALUES (%s)", row)
        assert all(self.truncated(probes, cache=cache).values())

    def write(self, statement: str, *params: object) -> tuple[int, int]:
        """Run one write transaction; returns the WAL positions before and after it."""
        before = self.wal_position()
        self.db.execute(statement, params)
        return before, self.wal_position()


@pytest.fixture
def stack(database: str, start_node: StartNode) -> Iterator[Stack]:
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(SCHEMA)
        setup_database(database)
        node = start_node("--max-memory", "64mb")
        agent = AgentProcess(database, [node.address], "--heartbeat-interval", "50ms")
        cache = redis.Redis(host=node.host, port=node.port, protocol=2)
        try:
            yield Stack(database, node, agent, cache, db)
        finally:
            cache.close()
            agent.stop()

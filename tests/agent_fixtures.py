"""A whole stack for agent tests: a database of the session's PostgreSQL (set up), cache
nodes (one by default) and the agent, started by :class:`txcache.stack.Stack`.

Probes: open versions at a node that depend on one tag each. A commit carrying a matching
tag truncates the probe at the commit's LSN, so which probes a write truncated shows exactly
which tags reached the node, and when.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis

from txcache.stack import NodeProcess, StackOptions, wait_until, wal_position
from txcache.stack import Stack as BaseStack

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

HEARTBEATS = ("--heartbeat-interval", "50ms")
"""The agent's arguments in these tests: heartbeats every 50 ms, so that an idle node's
position moves soon."""


class Stack(BaseStack):
    """A :class:`txcache.stack.Stack` on the existing database ``dsn`` (``schema_sql`` run
    before setup), with what agent tests read the nodes with: ``cache``, a redis-py client
    of the first node; ``db``, an autocommit connection; probes. A context manager."""

    def __init__(
        self,
        dsn: str,
        *,
        nodes: int = 1,
        schema_sql: str | None = SCHEMA,
        max_memory: str = "64mb",
        password: str | None = None,
        agent_args: tuple[str, ...] = HEARTBEATS,
        agent_dsn: str | None = None,
    ) -> None:
        """Prepare the stack; :meth:`start` (or ``with``) starts it."""
        super().__init__(
            StackOptions(
                dsn=dsn,
                nodes=nodes,
                max_memory=max_memory,
                schema_sql=schema_sql,
                password=password,
                agent_args=agent_args,
                agent_dsn=agent_dsn,
            )
        )
        self.cache: redis.Redis  # opened by start()
        self._clients: list[redis.Redis] = []
        self._db: psycopg.Connection | None = None

    def start(self, stop_requested: Callable[[], bool] = lambda: False) -> None:
        """Start the stack, then open ``db`` and ``cache``."""
        super().start(stop_requested)
        self._db = psycopg.connect(self.dsn, autocommit=True)
        self.cache = self.client(0)

    def stop(self) -> None:
        """Close every client and ``db``, then stop the stack."""
        while self._clients:
            self._clients.pop().close()
        if self._db is not None:
            self._db.close()
            self._db = None
        super().stop()

    @property
    def db(self) -> psycopg.Connection:
        """An autocommit connection to the database."""
        assert self._db is not None, "the stack has not started"
        return self._db

    @property
    def node(self) -> NodeProcess:
        """The first node (the only one by default)."""
        return self.nodes[0]

    def client(self, index: int = 0, *, stream: bool = False, **options: Any) -> redis.Redis:
        """A redis-py client of node ``index`` (``options`` as ``redis.Redis`` takes them),
        closed when the stack stops. With ``stream`` it authenticates with the stream
        password and speaks for the node's current epoch (``TXEPOCH``) on its one
        connection, so it may send stream commands, as the agent does."""
        node = self.nodes[index]
        password = self.stream_password if stream else self.options.password
        if stream:
            options["single_connection_client"] = True
        client = redis.Redis(
            host=node.host, port=node.port, password=password, protocol=2, **options
        )
        self._clients.append(client)
        if stream:
            client.execute_command("TXEPOCH", client.execute_command("TXEPOCH"))
        return client

    def wal_position(self) -> int:
        """The database's current WAL insert position."""
        return wal_position(self.db)

    def caught_up(self, timeout: float = 20.0, cache: redis.Redis | None = None) -> int:
        """Wait until the node of ``cache`` (default the first node) has applied everything
        committed so far; returns its N. Only that node is asked: another may be stopped on
        purpose."""
        return self.applied_through(self.wal_position(), timeout=timeout, cache=cache)

    def applied_through(
        self,
        target: int,
        *,
        timeout: float = 20.0,
        cache: redis.Redis | None = None,
        log: Callable[[], str] | None = None,
    ) -> int:
        """Wait until the node of ``cache`` (default the first node) has applied the stream
        up to ``target`` (a WAL position: of a promoted standby, say); returns its N. The
        failure message shows ``log`` (default the stack's agent's)."""
        client = cache or self.cache

        def applied() -> int | None:
            position = int(client.execute_command("TXSTATUS")[0])
            return position if position >= target else None

        where = client.connection_pool.connection_kwargs.get("port")
        return wait_until(
            applied,
            f"the node on port {where} to apply the stream up to {target}",
            timeout=timeout,
            log=log or self._agent_log,
        )

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
        default the first node's): the node follows the stream."""
        probes = self.probe(f"public.items:id={row}", cache=cache)
        self.write("INSERT INTO items (id) VALUES (%s)", row)
        assert all(self.truncated(probes, cache=cache).values())

    def write(self, statement: str, *params: object) -> tuple[int, int]:
        """Run one write transaction; returns the WAL positions before and after it."""
        before = self.wal_position()
        self.db.execute(statement, params)
        return before, self.wal_position()


@pytest.fixture
def stack(database: str) -> Iterator[Stack]:
    """The session's PostgreSQL with ``items``, one node, the agent (heartbeats every 50 ms)."""
    with Stack(database) as running:
        yield running


def open_probe(cache: redis.Redis, key: str) -> bool:
    """Whether the probe ``key`` (:meth:`Stack.probe`) is still open: no commit has matched
    its tag."""
    _value, _lo, _hi, is_open = cache.execute_command("TXGET", key, 0, 2**62)
    return bool(is_open)

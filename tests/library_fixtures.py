"""A whole stack for library tests: a database of the session's PostgreSQL (set up), two
cache nodes, the agent (all started by :class:`txcache.stack.Stack`), and a
:class:`txcache.Cache` connected to them.

``lib`` gives a :class:`LibraryStack`; its ``admin`` connection (autocommit) writes behind
the library's back, and :meth:`LibraryStack.caught_up` waits until both nodes applied every
commit so far. A test that needs other library settings starts its own:
``with LibraryStack(database, pool_size=1) as lib:``.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import io
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

import psycopg
import pytest
import redis

import txcache
from txcache.cli import status
from txcache.stack import Stack, StackOptions, TlsFiles, wait_until

SCHEMA = """
CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, price integer NOT NULL,
                    category integer NOT NULL);
CREATE INDEX ON items (category);
CREATE TABLE users (id integer PRIMARY KEY, name text NOT NULL);
INSERT INTO items SELECT i, 'item ' || i, 10 * i, i % 3 FROM generate_series(1, 20) i;
INSERT INTO users SELECT i, 'user ' || i FROM generate_series(1, 5) i;
"""


AGENT_ARGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")
FINGERPRINTS = (*AGENT_ARGS, "--ddl-tracking", "fingerprint")
"""An agent without DDL event triggers: it checks every pin's catalog fingerprint."""
EVENT_TRIGGERS = ("txcache_ddl_command_start", "txcache_ddl_command_end", "txcache_sql_drop")


def drop_event_triggers(stack: LibraryStack) -> None:
    """What a service that allows no event trigger leaves: setup's objects without them."""
    for trigger in EVENT_TRIGGERS:
        stack.admin.execute(f"DROP EVENT TRIGGER {trigger}")


T = TypeVar("T")


def as_another_process(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a context of its own, as another process would run it: the
    writes it commits are not the test's (read-your-writes holds a context's later reads to
    its own writes only)."""
    return contextvars.copy_context().run(function, *args)


"""The agent's settings in these tests: pins and heartbeats every 50 ms."""


class LibraryStack(Stack):
    """A :class:`txcache.stack.Stack` on the existing database ``dsn`` with ``items`` and
    ``users``: two nodes, the agent, ``cache`` (a :class:`txcache.Cache` with ``settings``
    as :func:`txcache.connect` takes them, refreshing every 50 ms unless they say otherwise)
    and ``admin`` (an autocommit connection). A context manager. With ``tls`` the nodes
    and the agent serve TLS, and the library trusts its CA."""

    def __init__(
        self,
        dsn: str,
        *,
        tls: TlsFiles | None = None,
        agent_args: tuple[str, ...] = AGENT_ARGS,
        membership: Literal["flags", "database"] = "flags",
        **settings: Any,
    ) -> None:
        """Prepare the stack (the agent run with ``agent_args``); :meth:`start` (or
        ``with``) starts it."""
        super().__init__(
            StackOptions(
                dsn=dsn,
                nodes=2,
                max_memory="64mb",
                schema_sql=SCHEMA,
                agent_args=agent_args,
                tls=tls,
                membership=membership,
            )
        )
        self.cache_settings = {"refresh_interval": 0.05, **settings}
        self._cache: txcache.Cache | None = None
        self._admin: psycopg.Connection | None = None

    def start(self, stop_requested: Callable[[], bool] = lambda: False) -> None:
        """Start the stack, then open ``admin`` and connect ``cache``."""
        super().start(stop_requested)
        self._admin = psycopg.connect(self.dsn, autocommit=True)
        self._cache = self.connect(**self.cache_settings)

    def stop(self) -> None:
        """Close ``cache`` and ``admin``, then stop the stack."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        super().stop()

    @property
    def cache(self) -> txcache.Cache:
        """The library, connected to this stack."""
        assert self._cache is not None, "the stack has not started"
        return self._cache

    @property
    def admin(self) -> psycopg.Connection:
        """An autocommit connection to the database, behind the library's back."""
        assert self._admin is not None, "the stack has not started"
        return self._admin

    def clients(self) -> list[redis.Redis]:
        """A redis-py client of each node (the caller closes them)."""
        return [redis.Redis(host=n.host, port=n.port, protocol=2) for n in self.nodes]

    def write(self, statement: str, *params: object) -> None:
        """Run ``statement`` on ``admin``, in a transaction of its own."""
        self.admin.execute(statement, params)

    def commit(self, *statements: str) -> int:
        """Run ``statements`` in one read/write transaction through the library, as another
        process would (in a context of its own: the test's later reads are not held to it,
        as read-your-writes holds a context's own); its commit LSN, once both nodes applied
        it and the library knows a pin at or after it."""
        tx = as_another_process(self._write, statements)
        token = tx.commit_timestamp
        assert token is not None
        self.caught_up()
        self.fresh_pins(after=token - 1)
        return token

    def _write(self, statements: tuple[str, ...]) -> txcache.ReadWriteTransaction:
        with self.cache.read_write() as tx:
            for statement in statements:
                tx.execute(statement)
        return tx

    def restart_agent(self) -> None:
        """Start the agent again on its port (after it was stopped or killed), and wait
        until the nodes caught up and the library is back with it."""
        super().restart_agent()
        self.caught_up()
        agent = self.cache.agent
        assert agent is not None
        wait_until(agent.refresh, "the library to reconnect to the agent", timeout=20)

    def fresh_pins(self, after: int = 0, timeout: float = 20.0) -> None:
        """Wait until the library knows a pin newer than ``after`` (asking the agent)."""
        wait_for_pin(self.cache, not_before=after + 1, timeout=timeout, log=self._agent_log)


def wait_for_pin(
    cache: txcache.Cache,
    *,
    not_before: int | None = None,
    timeout: float = 20.0,
    log: Callable[[], str] = lambda: "",
) -> None:
    """Wait until ``cache`` knows a pin at or after ``not_before``, asking the agent for one
    each time: an agent nobody asked for a pin for a lease (2 s) holds none until the next
    ``PIN``."""
    agent = cache.agent
    assert agent is not None

    def known() -> bool:
        agent.pin_now()
        agent.refresh()
        return bool(agent.pins(staleness=60, not_before=not_before, now=time.time()))

    wait_until(
        known, f"the library to know a pin at or after {not_before}", timeout=timeout, log=log
    )


@pytest.fixture
def lib(database: str) -> Iterator[LibraryStack]:
    """PostgreSQL with ``items`` and ``users``, two nodes, the agent, a connected cache."""
    with LibraryStack(database) as stack:
        yield stack


def status_report(nodes: list[str], agents: list[str]) -> tuple[int, str]:
    """``txcache status`` for ``nodes`` and ``agents`` (in process): its exit status and
    what it printed."""
    arguments = argparse.Namespace(
        nodes=nodes,
        agent=agents,
        metrics=[],
        dsn=None,
        slot="txcache",
        password=None,
        tls_ca=None,
        timeout=5.0,
        json=False,
        setup_command="txcache setup",
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = status.run(arguments)
    return code, printed.getvalue()

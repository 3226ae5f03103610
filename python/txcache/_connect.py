"""The :class:`Cache`: one application's handle on the database, the cache nodes and the
agent, and the factory of its transactions.

Pooled connections are shared by every transaction, so a read/write transaction's connection
is reset to a new session's state before it goes back to the pool (:meth:`Cache.release`,
docs/library.md "Connections and session state"): its ``SET``, temporary tables, locks and
the like must not change what later transactions — whose results the cache shares — compute.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

import psycopg
import psycopg_pool
from psycopg import sql

from txcache import _protocol as protocol
from txcache import _tokens as tokens
from txcache._agent import AgentClient
from txcache._cache_core import CacheCore, gather_settings, unknown_relation
from txcache._config import Mode, Settings
from txcache._lsn import wal_position
from txcache._nodes import CacheNode, NodeRing
from txcache._pinset import PinPolicy
from txcache._schema import Catalog, Schema
from txcache._serialize import Serializer
from txcache._session import PIN_AND_READ_CONTEXT, SessionContext, context_from_row, pin_statement
from txcache._sql import UncacheableQuery
from txcache._transaction import Params, ReadOnlyTransaction, ReadWriteTransaction

__all__ = ["Cache", "connect", "deallocation", "default_cache", "reset_statement"]

log = logging.getLogger("txcache")

# What DISCARD ALL does (PostgreSQL documents it as this sequence) in one round trip, but
# DEALLOCATE ALL: it would also drop psycopg's own prepared statements behind its back (its
# cache notices a DISCARD ALL only the first time it sees the statement), so only those the
# application PREPAREd in SQL are deallocated, by the names the last statement lists.
# DISCARD PLANS stays: a statement psycopg prepared meanwhile was analysed under the
# application's settings (a timestamptz literal under its TimeZone) and must be re-analysed.
# Then the session's result settings are pinned again to its context's values
# (txcache._session), and the application's prepared statements listed.
_RESET_SESSION = "; ".join(
    (
        "CLOSE ALL",
        "SET SESSION AUTHORIZATION DEFAULT",  # also ends SET ROLE, which RESET ALL keeps
        "RESET ALL",
        "UNLISTEN *",
        "SELECT pg_catalog.pg_advisory_unlock_all()",
        "DISCARD PLANS",
        "DISCARD TEMP",
        "DISCARD SEQUENCES",
    )
)
_PREPARED_IN_SQL = "SELECT name FROM pg_catalog.pg_prepared_statements WHERE from_sql"

_default: Cache | None = None
_default_lock = threading.Lock()


def default_cache() -> Cache | None:
    """The cache implicit transactions use: the last one :func:`connect` made in this
    process and not yet closed (a forked child starts without one)."""
    return _default


def _forget_default_in_child() -> None:
    global _default
    _default = None


os.register_at_fork(after_in_child=_forget_default_in_child)


def connect(
    dsn: str | None = None,
    *,
    nodes: str | Iterable[str] | None = None,
    agent: str | None = None,
    password: str | None = None,
    secret: str | None = None,
    mode: Mode | None = None,
    staleness: float | None = None,
    serializer: Serializer | None = None,
    pin_policy: PinPolicy | None = None,
    safe_functions: Iterable[str] = (),
    **settings: Any,
) -> Cache:
    """A :class:`Cache` configured by these arguments, then ``TXCACHE_*`` environment
    variables, then ``txcache.toml`` (see :mod:`txcache._config` for every setting).

    Without nodes or an agent the cache runs every transaction against the database alone.
    ``safe_functions`` names SQL functions cacheable queries may call (deterministic and
    reading no table). Raises :class:`~txcache.ConfigurationError`.
    """
    given: dict[str, Any] = {"dsn": dsn, "nodes": nodes, "agent": agent, "password": password}
    given |= {"secret": secret, "mode": mode, "staleness": staleness}
    loaded = gather_settings(given, settings)
    return Cache(
        loaded, serializer=serializer, pin_policy=pin_policy, safe_functions=safe_functions
    )


class Cache(CacheCore):
    """Database pool, cache nodes, agent client, and the settings transactions read.

    A context manager: leaving it closes everything. Thread-safe: transactions of many
    threads (one per thread at a time) share it.
    """

    agent: AgentClient | None
    ring: NodeRing[CacheNode] | None

    def __init__(
        self,
        settings: Settings,
        *,
        serializer: Serializer | None = None,
        pin_policy: PinPolicy | None = None,
        safe_functions: Iterable[str] = (),
    ) -> None:
        """Open the database pool and start refreshing pins (see :func:`connect`)."""
        super().__init__(
            settings, serializer=serializer, pin_policy=pin_policy, safe_functions=safe_functions
        )
        caching = self.uncached_reason is None
        self.ring = self._ring(settings) if caching else None
        self.agent = self._agent(settings) if caching else None
        if self.ring is not None:
            self._staleness_probe: threading.Thread | None = threading.Thread(
                target=self._ask_max_staleness, name="txcache-max-staleness", daemon=True
            )
            self._staleness_probe.start()
        else:
            self._staleness_probe = None
        self.pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            settings.dsn,
            min_size=1,
            max_size=settings.pool_size,
            timeout=settings.pool_timeout,
            kwargs={"autocommit": True},
            name="txcache",
            open=True,
        )
        global _default
        with _default_lock:
            _default = self

    def _ask_max_staleness(self) -> None:
        assert self.ring is not None
        command = protocol.max_staleness()
        self._note_max_staleness([node.run(command) for node in self.ring.nodes])

    @staticmethod
    def _ring(settings: Settings) -> NodeRing[CacheNode]:
        options = {"password": settings.password, "timeout": settings.node_timeout}
        return NodeRing([CacheNode(address, **options) for address in settings.nodes])

    @staticmethod
    def _agent(settings: Settings) -> AgentClient:
        assert settings.agent is not None
        client = AgentClient(
            settings.agent,
            password=settings.password,
            refresh_interval=settings.refresh_interval,
        )
        if not client.wait_ready(timeout=2.0):
            log.warning(
                "the agent at %s has not answered yet; transactions read the database "
                "until it does",
                settings.agent,
            )
        return client

    def read_only(
        self, staleness: float | None = None, *, not_before: int | None = None
    ) -> ReadOnlyTransaction:
        """A read-only transaction that sees the database at one commit point at most
        ``staleness`` seconds old (default: the ``staleness`` setting) and not before the
        ``not_before`` token (a :attr:`ReadWriteTransaction.commit_timestamp`, or a
        :meth:`timestamp` taken after writes made elsewhere)."""
        limit = self._staleness_limit(staleness, not_before)
        return ReadOnlyTransaction(self, limit, not_before)

    def timestamp(self) -> int:
        """A ``not_before`` token for every transaction that committed anywhere before this
        call — through this library, another service, a migration, psql: the database's
        WAL insert position now. A read-only transaction given it sees all of them."""
        with self.pool.connection() as connection:
            return wal_position(connection)

    def written_token(self) -> int | None:
        """The ``not_before`` token of what this thread (or task) committed to this
        cache's database — in the current :meth:`request_scope`, if any: what to hand a
        client so that its next request, wherever it runs, sees its writes. ``None`` when it
        wrote nothing. May ask the agent for a commit's timestamp (once)."""
        return tokens.floor(self.settings.dsn)

    def read_write(self, *, isolation: str | None = None) -> ReadWriteTransaction:
        """A read/write transaction on the database, bypassing the cache. ``isolation``:
        ``"READ COMMITTED"`` (the database default), ``"REPEATABLE READ"``,
        ``"SERIALIZABLE"``."""
        return ReadWriteTransaction(self, self._isolation_level(isolation))

    def analyze(
        self, statement: str, params: Params, snapshot: int
    ) -> tuple[frozenset[str], Catalog]:
        """The invalidation tags of ``statement`` at ``snapshot`` (docs/sql-tags.md), and
        the catalog reading they were derived from."""
        assert self.agent is not None
        columns = self.agent.tag_columns(snapshot)
        try:
            return self._analysis(statement, params, self._current_schema(), columns)
        except UncacheableQuery as refusal:
            if not unknown_relation(refusal):
                raise
            self._reload_schema_locked(self._cover_reading)  # a table created since the reading
            return self._analysis(statement, params, self._current_schema(), columns)

    def checkout(self) -> psycopg.Connection[Any]:
        """A pooled connection holding no statement psycopg prepared under an older catalog
        reading: PostgreSQL refuses to run a prepared statement whose result type a schema
        change altered (``cached plan must not change result type``)."""
        if self.agent is not None:
            self._current_schema()  # a schema change the agent reported is read first
        connection: psycopg.Connection[Any] = self.pool.getconn()
        readings, outdated = self._prepared_outdated(connection)
        try:
            if outdated:
                _forget_prepared(connection)
            if self._known_context(connection) is None:
                self._connection_contexts[connection] = _pin_context(connection)
        except psycopg.Error:
            self.pool.putconn(connection)
            raise
        self._connection_readings[connection] = readings
        return connection

    def connection_context(self, connection: psycopg.Connection[Any]) -> SessionContext:
        """The session context of a connection :meth:`checkout` gave; a context that
        differs from a new session's has the catalog read again soon."""
        context = self._known_context(connection)
        assert context is not None, "a connection not checked out by this cache"
        self._connection_outdated(context)
        return context

    def transaction_context(self) -> SessionContext | None:
        """The session context a read-only transaction beginning now keys its values by
        (:meth:`CacheCore._context_for`): the current catalog reading's, read first if
        due; ``None`` — the transaction runs uncached — when caching is not sound for it, or
        the catalog cannot be read (the database is down: its first statement will say)."""
        if self.agent is None:
            return None
        try:
            return self._context_for(self._current_schema())
        except psycopg.Error as error:
            log.warning("the catalog could not be read (%s); the transaction runs uncached", error)
            return None

    def _current_schema(self) -> Schema:
        """The catalog facts, re-read once after every change of the agent's catalog (a
        DDL) and after a query found them outdated (:meth:`CacheCore._schema_stale`)."""
        # Read before the catalog is: a DDL the agent reports meanwhile reads it again.
        generation = self.agent.catalog_generation if self.agent is not None else 0
        if self._schema_stale(generation):
            self._read_schema(generation, self._cover_reading)
        if self._take_sessions_changed():
            self.pool.drain()  # connections in use are closed when given back
        schema = self._schema
        assert schema is not None
        return schema

    def _cover_reading(self) -> None:
        """Have the agent's stream pass the catalog reading just made, so that what is
        computed with it can be stored at once (docs/library.md, "Schema changes under a
        running query"): a fresh pin writes a fence after it and waits until the stream
        decoded it; the refresh then learns the barrier as of there. Without it, the next
        heartbeat does the same, a little later."""
        if self.agent is not None and self.agent.pin_now() is not None:
            self.agent.refresh()

    def release(self, connection: psycopg.Connection[Any], *, reset: bool = False) -> None:
        """Give ``connection`` back to the pool. With ``reset`` (it ran the application's
        SQL outside a read-only transaction) its session is first brought back to a new
        session's state; a connection that cannot be reset is closed, which makes the pool
        replace it: it never goes back dirty."""
        reset_done = not reset
        try:
            if reset:
                _reset_session(connection, self._known_context(connection))
                reset_done = True
        except psycopg.Error as error:
            log.warning("a pooled connection could not be reset (%s): closing it", error)
        finally:
            if not reset_done:
                connection.close()
            self.pool.putconn(connection)

    def close(self) -> None:
        """Stop the agent refresher, close node connections and the database pool. In a
        forked child, only forget the cache: its connections are the parent's."""
        global _default
        with _default_lock:
            if _default is self:
                _default = None
        if self.inherited():
            return
        if self.agent is not None:
            self.agent.close()
        if self._staleness_probe is not None:
            # Its connections are the ring's: closing them under it would leak a socket.
            # Bounded: each node answers or times out within node_timeout.
            self._staleness_probe.join()
        if self.ring is not None:
            self.ring.close()
        self.pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _forget_prepared(connection: psycopg.Connection[Any]) -> None:
    """Have psycopg deallocate every statement it prepared on the idle ``connection``: its
    ``rollback()`` of an open transaction does (its cache notices a ``DEALLOCATE ALL`` sent
    as a statement only the first time it sees one). Two round trips."""
    connection.execute("BEGIN", prepare=False)
    connection.rollback()


def _pin_context(connection: psycopg.Connection[Any]) -> SessionContext:
    """Pin the idle ``connection``'s result settings and read its context (one round
    trip; :data:`~txcache._session.PIN_AND_READ_CONTEXT`)."""
    cursor = connection.execute(PIN_AND_READ_CONTEXT, prepare=False)
    while cursor.nextset():
        pass  # to the last result: the context
    return context_from_row(cursor.fetchone())


def reset_statement(context: SessionContext | None) -> sql.Composed:
    """What resets a session (``_RESET_SESSION``), pins its result settings back to
    ``context`` (if known) and lists the statements the application PREPAREd (the last
    result)."""
    parts: list[sql.Composable] = [sql.SQL(_RESET_SESSION)]
    if context is not None:
        parts.append(pin_statement(context))
    parts.append(sql.SQL(_PREPARED_IN_SQL))
    return sql.SQL("; ").join(parts)


def _reset_session(connection: psycopg.Connection[Any], context: SessionContext | None) -> None:
    """End any transaction on ``connection`` and discard its session state: settings
    (pinned back to ``context``'s), role, temporary tables, held cursors, session advisory
    locks, LISTENs, cached plans, sequence state, and statements the application PREPAREd;
    psycopg's own prepared statements stay (``_RESET_SESSION``). One round trip, plus one if
    the application PREPAREd statements (and one more if a transaction was open); raises
    psycopg's errors."""
    if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        connection.execute("ROLLBACK")
    cursor = connection.execute(reset_statement(context), prepare=False)
    while cursor.nextset():
        pass  # to the last result: the statements the application prepared
    deallocate = deallocation([name for (name,) in cursor.fetchall()])
    if deallocate is not None:
        connection.execute(deallocate, prepare=False)


def deallocation(names: list[str]) -> sql.Composed | None:
    """``DEALLOCATE`` of the statements the application prepared in SQL (``names``, the
    last result of ``_RESET_SESSION``); ``None`` when there are none."""
    if not names:
        return None
    deallocate = sql.SQL("DEALLOCATE {}")
    return sql.SQL("; ").join(deallocate.format(sql.Identifier(n)) for n in names)

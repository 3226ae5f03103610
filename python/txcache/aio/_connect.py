"""The :class:`AsyncCache`: the async library's handle on the database
(:class:`psycopg_pool.AsyncConnectionPool`), the cache nodes (one multiplexed connection
each) and the agent (refreshed by a task), and the factory of async transactions.

What it shares with the sync :class:`~txcache.Cache` — settings, argument checks, the
staleness warning, the catalog state and its decisions — is
:class:`~txcache._cache_core.CacheCore`'s. The catalog reading is synchronous (a connection
of its own, after a schema change): it runs in a worker thread.

Connections go back to the pool clean or not at all (:meth:`AsyncCache.release`): rolled
back (a read/write block's session also reset), or closed — and so replaced by the pool —
when that fails or their state is unknown (a statement cancelled mid-way). Giving one back
is shielded from cancellation, so a task cancelled while it leaves a block still returns
its connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

import psycopg
import psycopg_pool

from txcache import _connect
from txcache import _protocol as protocol
from txcache import _tokens as tokens
from txcache._cache_core import CacheCore, gather_settings, unknown_relation
from txcache._config import Mode, Settings
from txcache._lsn import WAL_POSITION
from txcache._nodes import NodeRing
from txcache._pinset import PinPolicy
from txcache._schema import Catalog, Schema
from txcache._serialize import Serializer
from txcache._session import PIN_AND_READ_CONTEXT, SessionContext, context_from_row
from txcache._sql import UncacheableQuery
from txcache._transaction import Params
from txcache.aio._agent import AsyncAgentClient
from txcache.aio._nodes import AsyncCacheNode
from txcache.aio._read_only import AsyncReadOnlyTransaction
from txcache.aio._transaction import AsyncReadWriteTransaction

__all__ = ["AsyncCache", "connect", "default_cache"]

log = logging.getLogger("txcache")

AsyncConnection = psycopg.AsyncConnection[Any]
_UNKNOWN_STATES = (psycopg.pq.TransactionStatus.ACTIVE, psycopg.pq.TransactionStatus.UNKNOWN)

_default: AsyncCache | None = None


def default_cache() -> AsyncCache | None:
    """The cache implicit async transactions use (an async cacheable function called
    outside any transaction): the last one :func:`connect` made in this process and not yet
    closed (a forked child starts without one)."""
    return _default


def _forget_default_in_child() -> None:
    global _default
    _default = None


os.register_at_fork(after_in_child=_forget_default_in_child)


async def connect(
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
) -> AsyncCache:
    """An open :class:`AsyncCache`, configured as :func:`txcache.connect` configures the
    sync one (arguments, then ``TXCACHE_*``, then ``txcache.toml``). Its connections and
    tasks belong to the running event loop: use it there, and ``await cache.close()``."""
    given: dict[str, Any] = {"dsn": dsn, "nodes": nodes, "agent": agent, "password": password}
    given |= {"secret": secret, "mode": mode, "staleness": staleness}
    cache = AsyncCache(
        gather_settings(given, settings),
        serializer=serializer,
        pin_policy=pin_policy,
        safe_functions=safe_functions,
    )
    await cache.open()
    return cache


class AsyncCache(CacheCore):
    """Database pool, cache nodes, agent client and settings, for ``async`` code on one
    event loop. Transactions of many tasks (one per task at a time) share it. An async
    context manager: leaving it closes everything."""

    agent: AsyncAgentClient | None
    ring: NodeRing[AsyncCacheNode] | None

    def __init__(
        self,
        settings: Settings,
        *,
        serializer: Serializer | None = None,
        pin_policy: PinPolicy | None = None,
        safe_functions: Iterable[str] = (),
    ) -> None:
        """Prepare the cache; :meth:`open` (which :func:`connect` awaits) starts it."""
        super().__init__(
            settings, serializer=serializer, pin_policy=pin_policy, safe_functions=safe_functions
        )
        caching = self.uncached_reason is None
        self.ring = self._ring(settings) if caching else None
        self.agent = self._agent(settings) if caching else None
        self.pool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
            settings.dsn,
            min_size=1,
            max_size=settings.pool_size,
            timeout=settings.pool_timeout,
            kwargs={"autocommit": True},
            name="txcache-async",
            open=False,
        )
        self._background: set[asyncio.Task[Any]] = set()
        self._reading = asyncio.Lock()  # one catalog reading at a time on this loop

    @staticmethod
    def _ring(settings: Settings) -> NodeRing[AsyncCacheNode]:
        options = {"password": settings.password, "timeout": settings.node_timeout}
        return NodeRing([AsyncCacheNode(address, **options) for address in settings.nodes])

    @staticmethod
    def _agent(settings: Settings) -> AsyncAgentClient:
        assert settings.agent is not None
        return AsyncAgentClient(
            settings.agent, password=settings.password, refresh_interval=settings.refresh_interval
        )

    async def open(self) -> None:
        """Open the pool, start the agent's refresher task and wait (2 s at most) for its
        first answer; ask the nodes' ``--max-staleness`` in the background."""
        await self.pool.open()
        if self.agent is not None:
            self.agent.start()
            if not await self.agent.wait_ready(timeout=2.0):
                log.warning(
                    "the agent at %s has not answered yet; transactions read the database "
                    "until it does",
                    self.settings.agent,
                )
        if self.ring is not None:
            self._spawn(self._ask_max_staleness())
        global _default
        _default = self

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)  # a reference, so that the task is not collected
        task.add_done_callback(self._background.discard)

    async def _ask_max_staleness(self) -> None:
        assert self.ring is not None
        command = protocol.max_staleness()
        self._note_max_staleness([await node.run(command) for node in self.ring.nodes])

    # -- transactions -----------------------------------------------------------------------

    def read_only(
        self, staleness: float | None = None, *, not_before: int | None = None
    ) -> AsyncReadOnlyTransaction:
        """An async read-only transaction (``async with``), as
        :meth:`txcache.Cache.read_only` describes it."""
        limit = self._staleness_limit(staleness, not_before)
        return AsyncReadOnlyTransaction(self, limit, not_before)

    async def written_token(self) -> int | None:
        """The token of what this task committed to this cache's database
        (:meth:`txcache.Cache.written_token`)."""
        return await tokens.floor_async(self.settings.dsn)

    def read_write(self, *, isolation: str | None = None) -> AsyncReadWriteTransaction:
        """An async read/write transaction (``async with``) on the database, bypassing the
        cache; ``isolation`` as :meth:`txcache.Cache.read_write` takes it."""
        return AsyncReadWriteTransaction(self, self._isolation_level(isolation))

    async def timestamp(self) -> int:
        """A ``not_before`` token for every transaction committed anywhere before this
        call (:meth:`txcache.Cache.timestamp`)."""
        async with self.pool.connection() as connection:
            cursor = await connection.execute(WAL_POSITION)
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    # -- the catalog ------------------------------------------------------------------------

    async def analyze(
        self, statement: str, params: Params, snapshot: int
    ) -> tuple[frozenset[str], Catalog]:
        """The invalidation tags of ``statement`` at ``snapshot`` and the catalog reading
        they came from (:meth:`txcache.Cache.analyze`)."""
        assert self.agent is not None
        columns = await self.agent.tag_columns(snapshot)
        try:
            return self._analysis(statement, params, await self._current_schema(), columns)
        except UncacheableQuery as refusal:
            if not unknown_relation(refusal):
                raise
            await asyncio.to_thread(self._reload_schema_locked)  # a table created since
            await self._cover_reading()
            return self._analysis(statement, params, await self._current_schema(), columns)

    async def _current_schema(self) -> Schema:
        """The catalog facts, read again (in a worker thread) when
        :meth:`~txcache._cache_core.CacheCore._schema_stale` says so."""
        generation = self.agent.catalog_generation if self.agent is not None else 0
        if self._schema_stale(generation):
            # The other tasks wait here, not in worker threads of their own.
            async with self._reading:
                stale = self._schema_stale(generation)
                if stale and await asyncio.to_thread(self._read_schema, generation, None):
                    await self._cover_reading()
        if self._take_sessions_changed():
            await self.pool.drain()  # connections in use are closed when given back
        schema = self._schema
        assert schema is not None
        return schema

    async def _cover_reading(self) -> None:
        """As the sync cache's: a fresh pin, then a refresh, so that the barrier passes the
        reading just made."""
        if self.agent is not None and await self.agent.pin_now() is not None:
            await self.agent.refresh()

    # -- connections ------------------------------------------------------------------------

    async def checkout(self) -> AsyncConnection:
        """A pooled connection holding no statement psycopg prepared under an older catalog
        reading (:meth:`txcache.Cache.checkout`)."""
        if self.agent is not None:
            await self._current_schema()  # a schema change the agent reported is read first
        connection: AsyncConnection = await self.pool.getconn()
        readings, outdated = self._prepared_outdated(connection)
        try:
            if outdated:
                await connection.execute("BEGIN", prepare=False)
                await connection.rollback()  # psycopg forgets its prepared statements
            if self._known_context(connection) is None:
                self._connection_contexts[connection] = await _pin_context(connection)
        except BaseException:
            await self.release(connection)
            raise
        self._connection_readings[connection] = readings
        return connection

    def connection_context(self, connection: AsyncConnection) -> SessionContext:
        """The session context of a connection :meth:`checkout` gave
        (:meth:`txcache.Cache.connection_context`)."""
        context = self._known_context(connection)
        assert context is not None, "a connection not checked out by this cache"
        self._connection_outdated(context)
        return context

    async def transaction_context(self) -> SessionContext | None:
        """The session context a read-only transaction beginning now keys its values by
        (:meth:`txcache.Cache.transaction_context`)."""
        if self.agent is None:
            return None
        try:
            return self._context_for(await self._current_schema())
        except psycopg.Error as error:
            log.warning("the catalog could not be read (%s); the transaction runs uncached", error)
            return None

    async def release(self, connection: AsyncConnection, *, reset: bool = False) -> None:
        """Give ``connection`` back to the pool: its transaction rolled back (with
        ``reset``, its session brought back to a new session's state as
        :meth:`txcache.Cache.release` does), or closed when that fails or its state is
        unknown. Shielded: a cancellation meanwhile does not stop it."""
        await asyncio.shield(self._give_back(connection, reset=reset))

    async def _give_back(self, connection: AsyncConnection, *, reset: bool) -> None:
        clean = False
        try:
            context = self._known_context(connection) if reset else None
            clean = await _cleaned(connection, reset=reset, context=context)
        finally:
            if not clean:
                await connection.close()
            await self.pool.putconn(connection)

    async def close(self) -> None:
        """Stop the agent's refresher, close node connections and the pool."""
        global _default
        if _default is self:
            _default = None
        if self.inherited():
            return  # its connections are the parent's
        background = set(self._background)
        for task in background:
            task.cancel()
        if background:
            await asyncio.wait(background)
        if self.agent is not None:
            await self.agent.close()
        if self.ring is not None:
            self.ring.close()
        await self.pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


async def _pin_context(connection: AsyncConnection) -> SessionContext:
    """:func:`txcache._connect._pin_context` on an async connection."""
    cursor = await connection.execute(PIN_AND_READ_CONTEXT, prepare=False)
    while cursor.nextset():
        pass  # to the last result: the context
    return context_from_row(await cursor.fetchone())


async def _cleaned(
    connection: AsyncConnection, *, reset: bool, context: SessionContext | None = None
) -> bool:
    """Bring ``connection`` back to an idle, clean state (with ``reset``, its session
    reset and pinned back to ``context``): ``True`` if it is; ``False`` (logged) when it
    cannot be known to be, and must be closed."""
    status = connection.info.transaction_status
    if status in _UNKNOWN_STATES:
        return False  # a statement still running (cancelled mid-way), or a broken link
    try:
        if reset:
            await _reset_session(connection, context)
        elif status == psycopg.pq.TransactionStatus.INERROR:
            await connection.rollback()  # psycopg's own: it also forgets its prepared statements
        elif status != psycopg.pq.TransactionStatus.IDLE:
            await connection.execute("ROLLBACK")
    except psycopg.Error as error:
        log.warning("a pooled connection could not be cleaned (%s): closing it", error)
        return False
    return True


async def _reset_session(connection: AsyncConnection, context: SessionContext | None) -> None:
    """The sync library's session reset (:func:`txcache._connect.reset_statement`, the
    same statements), on an async connection."""
    if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        await connection.execute("ROLLBACK")
    cursor = await connection.execute(_connect.reset_statement(context), prepare=False)
    while cursor.nextset():
        pass  # to the last result: the statements the application prepared
    deallocate = _connect.deallocation([name for (name,) in await cursor.fetchall()])
    if deallocate is not None:
        await connection.execute(deallocate, prepare=False)

"""What a cache does once made: the factory of its transactions, its tokens, the catalog
reading analysis uses, and its pooled connections — checked out with no statement prepared
under an older catalog and with their session context read, given back clean or not at all.

Its sync twin is generated from it (``tools/async_to_sync.py``). The state and decisions
both share without I/O are :class:`~txcache._cache_core.CacheCore`'s.
Making a cache — its pool, nodes and agent client, and what runs in the background — is
the hand-written part of each driver (:class:`txcache.Cache`,
:class:`txcache.aio.AsyncCache`).

The catalog reading itself is synchronous (a connection of its own, after a schema change):
the async driver runs it in a worker thread. Connections go back to the pool clean or not at
all (:meth:`AsyncCacheDriver.release`): rolled back (a read/write block's session also
reset), or closed — and so replaced by the pool — when that fails or their state is unknown
(a statement interrupted mid-way). Giving one back is shielded from cancellation, so a task
cancelled while it leaves a block still returns its connection; one cancelled while it takes
one (a parked one rolled back, a new one prepared) gives it back too. Once the cache is
closed nothing is parked, and no parked connection is handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import psycopg_pool

from txcache import _tokens as tokens
from txcache._cache_core import CacheCore, CatalogUnavailable, unknown_relation
from txcache._current import Params
from txcache._drivers import ASYNC
from txcache._lsn import WAL_POSITION
from txcache._parking import ParkedSnapshot
from txcache._pinset import Pin
from txcache._ring import NodeRing
from txcache._schema import Catalog, Schema
from txcache._session import (
    CHECK_CONTEXT,
    FORGET_BLOCK_STATE,
    PIN_AND_READ_CONTEXT,
    SessionContext,
    SessionReset,
    context_changes,
    context_from_row,
    deallocation,
    reset_statement,
)
from txcache._sql import UncacheableQuery
from txcache.aio._agent import AsyncAgentClient
from txcache.aio._nodes import AsyncCacheNode
from txcache.aio._read_only import AsyncReadOnlyTransaction
from txcache.aio._transaction import AsyncReadWriteTransaction
from txcache.errors import TransactionError

__all__ = ["AsyncCacheDriver"]

log = logging.getLogger("txcache")

AsyncConnection = psycopg.AsyncConnection[Any]
# A statement still running (interrupted mid-way), or a broken link: not known to be clean.
_UNKNOWN_STATES = (psycopg.pq.TransactionStatus.ACTIVE, psycopg.pq.TransactionStatus.UNKNOWN)


class AsyncCacheDriver(CacheCore):
    """A cache's round trips (module docstring); the driver's cache class makes the pool,
    the nodes and the agent client it uses."""

    agent: AsyncAgentClient | None
    ring: NodeRing[AsyncCacheNode] | None
    pool: psycopg_pool.AsyncConnectionPool[Any]
    replica_pools: dict[str, psycopg_pool.AsyncConnectionPool[Any]]
    """One pool per hot standby of the ``replicas`` setting, by name."""
    if ASYNC:
        _reading: asyncio.Lock
        """One catalog reading at a time on the loop (the other tasks wait on it)."""

    def _new_node(self, address: str) -> AsyncCacheNode:
        return AsyncCacheNode(address, **self._node_options())

    # -- transactions -----------------------------------------------------------------------

    def read_only(
        self, staleness: float | None = None, *, not_before: int | None = None
    ) -> AsyncReadOnlyTransaction:
        """A read-only transaction that sees the database at one commit point at most
        ``staleness`` seconds old (default: the ``staleness`` setting) and not before the
        ``not_before`` token (a read/write transaction's ``commit_timestamp``, or a
        :meth:`timestamp` taken after writes made elsewhere)."""
        self._refuse_inherited()
        limit = self._staleness_limit(staleness, not_before)
        return AsyncReadOnlyTransaction(self, limit, not_before)

    def read_write(self, *, isolation: str | None = None) -> AsyncReadWriteTransaction:
        """A read/write transaction on the database, bypassing the cache. ``isolation``:
        ``"READ COMMITTED"`` (the database default), ``"REPEATABLE READ"``,
        ``"SERIALIZABLE"``."""
        self._refuse_inherited()
        return AsyncReadWriteTransaction(self, self._isolation_level(isolation))

    def _refuse_inherited(self) -> None:
        """Raise :class:`~txcache.TransactionError` in a forked child of the process that
        made the cache: its pool's and nodes' sockets are the parent's, and a child using
        them would put the parent's sessions and node connections out of step."""
        if self.inherited():
            raise TransactionError(
                "this cache was created in the parent process before fork(); connect again "
                "in the child (txcache.connect_async)"
            )

    async def timestamp(self) -> int:
        """A ``not_before`` token for every transaction that committed anywhere before this
        call — through this library, another service, a migration, psql: the database's
        WAL insert position now. A read-only transaction given it sees all of them."""
        self._refuse_inherited()
        async with self.pooled() as connection:
            cursor = await connection.execute(WAL_POSITION)
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    @contextlib.asynccontextmanager
    async def pooled(self) -> AsyncIterator[AsyncConnection]:
        """A connection of the primary's pool for statements outside the cache's
        transactions (integrations use it too), given back as psycopg_pool gives back its
        own — rolled back, or replaced when broken — but shielded from cancellation: a task
        cancelled while giving it back would otherwise lose it for good (``connection()``
        of psycopg_pool is not shielded)."""
        connection = await self.pool.getconn()
        try:
            yield connection
        finally:
            if ASYNC:
                await asyncio.shield(self.pool.putconn(connection))
            else:
                self.pool.putconn(connection)

    async def written_token(self) -> int | None:
        """The ``not_before`` token of what this thread (or task) committed to this
        cache's database — in the current :meth:`request_scope`, if any: what to hand a
        client so that its next request, wherever it runs, sees its writes. ``None`` when it
        wrote nothing. May ask the agent for a commit's timestamp (once)."""
        return await tokens.floor_async(self.settings.dsn)

    # -- the catalog ------------------------------------------------------------------------

    async def analyze(
        self, statement: str, params: Params, snapshot: int
    ) -> tuple[frozenset[str], Catalog]:
        """The invalidation tags of ``statement`` at ``snapshot`` (docs/sql-tags.md), and
        the catalog reading they were derived from."""
        assert self.agent is not None
        columns = await self.agent.tag_columns(snapshot)
        try:
            return self._analysis(statement, params, await self._known_schema(), columns)
        except UncacheableQuery as refusal:
            if not unknown_relation(refusal):
                raise
            # A table created since the reading: read the catalog again.
            try:
                if ASYNC:
                    await asyncio.to_thread(self._reload_schema_locked)
                    await self._cover_reading()
                else:
                    self._reload_schema_locked(self._cover_reading)
            except psycopg.errors.LockNotAvailable as error:
                raise CatalogUnavailable(f"a table is locked ({error})") from error
            return self._analysis(statement, params, await self._known_schema(), columns)

    async def _known_schema(self) -> Schema:
        """:meth:`_current_schema`; :class:`CatalogUnavailable` when it cannot be read."""
        schema = await self._current_schema()
        if schema is None:
            raise CatalogUnavailable("a table is locked")
        return schema

    async def _current_schema(self) -> Schema | None:
        """The catalog facts, re-read once after every change of the agent's catalog (a
        DDL) and after a query found them outdated (:meth:`CacheCore._schema_stale`);
        ``None`` while they are due and cannot be read (a table locked: the reading waits
        for no lock longer than a second, and is tried again a second later)."""
        # Read before the catalog is: a DDL the agent reports meanwhile reads it again.
        generation = self.agent.catalog_generation if self.agent is not None else 0
        if self._schema_stale(generation):
            if ASYNC:
                # The other tasks wait here, not in worker threads of their own.
                async with self._reading:
                    stale = self._schema_stale(generation)
                    if stale and await asyncio.to_thread(self._read_schema, generation, None):
                        await self._cover_reading()
            else:
                self._read_schema(generation, self._cover_reading)
        if self._take_sessions_changed():
            await self.end_parked(every=True)
            await self.pool.drain()  # connections in use are closed when given back
        if not self.catalog_known(generation):
            return None
        return self._schema

    async def _cover_reading(self) -> None:
        """Have the agent's stream pass the catalog reading just made, so that what is
        computed with it can be stored at once (docs/library.md, "Schema changes under a
        running query"): a fresh pin writes a fence after it and waits until the stream
        decoded it; the refresh then learns the barrier as of there. Without it, the next
        heartbeat does the same, a little later."""
        if self.agent is not None and await self.agent.pin_now() is not None:
            await self.agent.refresh()

    async def transaction_context(self) -> SessionContext | None:
        """The session context a read-only transaction beginning now keys its values by
        (:meth:`CacheCore._context_for`): the current catalog reading's, read first if
        due; ``None`` — the transaction runs uncached — when caching is not sound for it, or
        the catalog cannot be read (the database is down: its first statement will say; a
        table is locked)."""
        if self.agent is None:
            return None
        try:
            schema = await self._current_schema()
        except psycopg.Error as error:
            log.warning("the catalog could not be read (%s); the transaction runs uncached", error)
            return None
        return None if schema is None else self._context_for(schema)

    # -- connections ------------------------------------------------------------------------

    async def checkout(self) -> AsyncConnection:
        """A pooled connection holding no statement psycopg prepared under an older catalog
        reading — PostgreSQL refuses to run a prepared statement whose result type a schema
        change altered (``cached plan must not change result type``) — with its session
        context known (read, and its settings pinned, when first checked out)."""
        self._refuse_inherited()
        known = True
        if self.agent is not None:  # a schema change the agent reported is read first
            known = await self._current_schema() is not None
        connection = await self._parked_elsewhere()
        if connection is None:
            connection = await self.pool.getconn()
        await self._prepare_checkout(connection, catalog_known=known)
        return connection

    async def checkout_replica(self, name: str) -> AsyncConnection | None:
        """A connection to the hot standby ``name``, prepared as :meth:`checkout` prepares
        the primary's, that waits for its answers at most ``replica_timeout`` each
        (:class:`~txcache.aio._replica_connection.AsyncReplicaConnection`); ``None`` when it
        is down after a failure, or gives no connection within ``node_timeout`` (it is then
        down until it answers a probe: :class:`~txcache._replicas.ReplicaHealth`)."""
        self._refuse_inherited()
        if not self.replica_health.usable(name):
            return None
        connection = await self._parked_elsewhere(name)
        if connection is None:
            try:
                connection = await self._pooled_replica(name)
            except (psycopg_pool.PoolTimeout, psycopg.OperationalError) as error:
                self.replica_health.failed(name, f"no connection: {error}")
                return None
            self._replica_of[connection] = name
        try:
            await self._prepare_checkout(connection)  # gives the connection back if it fails
        except psycopg.OperationalError as error:
            self.replica_health.failed(name, str(error))
            return None
        return connection

    async def _pooled_replica(self, name: str) -> AsyncConnection:
        """A connection of the standby ``name``'s pool, which is drained first once after
        each time the standby went down: a standby that restarted closed its end of every
        connection made before, and the first statement on one would have it taken for down
        once more."""
        pool = self.replica_pools[name]
        outages = self.replica_health.outages(name)
        if self._replica_drained.get(name, 0) < outages:
            self._replica_drained[name] = outages
            await pool.drain()  # those in use are closed as they come back
        connection: AsyncConnection = await pool.getconn(timeout=self.settings.node_timeout)
        return connection

    async def _prepare_checkout(
        self, connection: AsyncConnection, *, catalog_known: bool = True
    ) -> None:
        """No statement prepared under an older catalog reading (none at all while the
        catalog is not known: a schema change may have gone unread), the session context
        known; the connection given back if that fails or is interrupted."""
        try:
            readings, outdated = self._prepared_outdated(connection)
            if outdated or not catalog_known:
                await _forget_prepared(connection)
            if self._known_context(connection) is None:
                context = await _pin_context(connection)
                self._connection_contexts[connection] = context
                tokens.reaches(self.settings.dsn, context.running_database)
        except BaseException:
            await self.release(connection)
            raise
        self._connection_readings[connection] = readings

    async def _parked_elsewhere(self, server: str | None = None) -> AsyncConnection | None:
        """A parked connection to ``server`` (``None``: the primary), its database
        transaction ended, before the pool's: a connection parked at another pin is never
        idle while the pool has none to give; ``None`` once the cache is closed."""
        while not self.closed and (parked := self.parking.take_any(server)) is not None:
            try:
                await parked.connection.execute("ROLLBACK")  # keeps psycopg's prepared ones
            except psycopg.Error as error:
                log.info("a parked connection could not be rolled back (%s): closing it", error)
                await self.release(parked.connection)
                continue
            except BaseException:
                # Cancelled or interrupted mid-rollback: back to the pool (closed, its state
                # unknown), or the pool would have lost it.
                await self.release(parked.connection)
                raise
            connection: AsyncConnection = parked.connection
            return connection
        return None

    async def take_parked(
        self, pin: Pin, context: SessionContext
    ) -> ParkedSnapshot[AsyncConnection] | None:
        """A database transaction parked at ``pin`` in ``context`` and still young
        (:mod:`txcache._parking`), for a read-only transaction to run in; ``None`` when
        there is none or the cache is closed, or when its connection prepared statements
        under an older catalog reading (it is then given back instead)."""
        if self.closed:
            return None
        parked = self.parking.take(pin, context, time.monotonic())
        if parked is None:
            return None
        readings, outdated = self._prepared_outdated(parked.connection)
        if outdated:
            await self.release(parked.connection)
            return None
        self._connection_readings[parked.connection] = readings
        return parked

    async def park(self, parked: ParkedSnapshot[AsyncConnection]) -> None:
        """Keep a read-only transaction's database transaction open for the next one at
        its pin; or give its connection back — when it is too old to keep, someone waits
        for the pool, or the cache is closed (nothing would end it) — and the oldest parked
        one's if the lot was full."""
        waiting = self._pool_of(parked.connection).get_stats().get("requests_waiting", 0)
        keep = not waiting and not self.closed
        end = self.parking.park(parked, time.monotonic()) if keep else parked
        if end is not None:
            await self.release(end.connection)
        if self.closed:
            # close() ran meanwhile (another thread's) and ended the parked ones before this
            # one was kept: nothing else would end it.
            await self.end_parked(every=True)

    async def housekeeping(self) -> None:
        """The cache's background work, run by the agent's refresher after each refresh and
        between them: end the parked database transactions too old to keep, and have the
        nodes read the replies they still owe to stores not waited for (the sync driver's
        only: the async one hands them over as they arrive)."""
        if self.settings.snapshot_hold > 0:
            await self.end_parked()
        ring = self.ring
        if ring is not None:
            for node in ring.nodes:
                node.settle()

    async def end_parked(self, *, every: bool = False) -> None:
        """Give back the connections of the parked database transactions too old to keep
        (every one with ``every``: the cache closes, or its pool is drained). The cache's
        background worker calls it each ``refresh_interval``."""
        parked = self.parking.drain() if every else self.parking.expired(time.monotonic())
        for each in parked:
            await self.release(each.connection)
        for connection in self.parking.take_terminated():  # its session ended: replaced
            await connection.close()
            await self.pool.putconn(connection)

    def connection_context(self, connection: AsyncConnection) -> SessionContext:
        """The session context of a connection :meth:`checkout` gave; a context that
        differs from a new session's has the catalog read again soon."""
        context = self._known_context(connection)
        assert context is not None, "a connection not checked out by this cache"
        self._connection_outdated(context)
        return context

    async def release(
        self, connection: AsyncConnection, *, reset: SessionReset = SessionReset.NONE
    ) -> None:
        """Give ``connection`` back to the pool: its transaction rolled back, its session
        ``reset`` as much as what ran on it needs (:class:`~txcache._session.SessionReset`;
        in full, back to a new session's state with its settings pinned back) — or closed,
        which makes the pool replace it, when that fails or its state is unknown: it never
        goes back dirty."""
        if ASYNC:
            await asyncio.shield(self._give_back(connection, reset=reset))
        else:
            self._give_back(connection, reset=reset)

    async def _give_back(self, connection: AsyncConnection, *, reset: SessionReset) -> None:
        clean = False
        try:
            context = self._known_context(connection) if reset is not SessionReset.NONE else None
            clean = await _cleaned(connection, reset=reset, context=context)
        finally:
            if not clean:
                await connection.close()
            pool = self._pool_of(connection)
            self._replica_of.pop(connection, None)
            await pool.putconn(connection)

    def _pool_of(self, connection: AsyncConnection) -> psycopg_pool.AsyncConnectionPool[Any]:
        """The pool ``connection`` came from: the primary's, or its standby's."""
        replica = self._replica_of.get(connection)
        return self.pool if replica is None else self.replica_pools[replica]


async def _forget_prepared(connection: AsyncConnection) -> None:
    """Have psycopg deallocate every statement it prepared on the idle ``connection``: its
    ``rollback()`` of an open transaction does (its cache notices a ``DEALLOCATE ALL`` sent
    as a statement only the first time it sees one). Two round trips."""
    await connection.execute("BEGIN", prepare=False)
    await connection.rollback()


async def _pin_context(connection: AsyncConnection) -> SessionContext:
    """Pin the idle ``connection``'s result settings and read its context (one round
    trip; :data:`~txcache._session.PIN_AND_READ_CONTEXT`)."""
    cursor = await connection.execute(PIN_AND_READ_CONTEXT, prepare=False)
    while cursor.nextset():
        pass  # to the last result: the context
    return context_from_row(await cursor.fetchone())


async def _cleaned(
    connection: AsyncConnection,
    *,
    reset: SessionReset,
    context: SessionContext | None = None,
) -> bool:
    """Bring ``connection`` back to an idle, clean state (its session ``reset``, in full
    pinned back to ``context``): ``True`` if it is; ``False`` (logged) when it cannot be
    known to be, and must be closed."""
    status = connection.info.transaction_status
    if status in _UNKNOWN_STATES:
        return False
    try:
        if reset is not SessionReset.NONE:
            await _reset_session(connection, context, reset)
        elif status == psycopg.pq.TransactionStatus.INERROR:
            await connection.rollback()  # psycopg's own: it also forgets its prepared statements
        elif status != psycopg.pq.TransactionStatus.IDLE:
            await connection.execute("ROLLBACK")
    except psycopg.Error as error:
        log.warning("a pooled connection could not be cleaned (%s): closing it", error)
        return False
    return True


async def _changed_unseen(connection: AsyncConnection, context: SessionContext | None) -> bool:
    """Forget the idle ``connection``'s sequences' state and temporary tables, and tell
    whether the statements of its read/write block changed its session's ``context``
    nonetheless: code the statement check cannot see — a function's or a trigger's ``SET``,
    ``SET ROLE`` or ``set_config`` — whose change a ``COMMIT`` kept. One round trip."""
    async with connection.pipeline():  # one round trip; the check prepared once used enough
        for statement in FORGET_BLOCK_STATE:
            await connection.execute(statement, prepare=False)
        cursor = None if context is None else await connection.execute(CHECK_CONTEXT)
    if cursor is None or context is None:
        return False
    rows = await cursor.fetchall()
    changed = context_changes(context, rows[0] if rows else None)
    if changed:
        log.warning(
            "a read/write transaction changed its session's %s without a statement that says "
            "so (a function or a trigger that runs SET, SET ROLE or set_config): resetting "
            "the connection before it goes back to the pool",
            ", ".join(changed),
        )
    return bool(changed)


async def _reset_session(
    connection: AsyncConnection, context: SessionContext | None, reset: SessionReset
) -> None:
    """End any transaction on ``connection`` and reset its session: with
    :attr:`~txcache._session.SessionReset.SEQUENCES`, only its sequences' state and
    temporary tables (in full when its context changed all the same:
    :func:`_changed_unseen`); in full, its settings (pinned back to ``context``'s), role,
    temporary tables, held cursors, session advisory locks, LISTENs, cached plans, sequence
    state, and statements the application PREPAREd — psycopg's own prepared statements stay
    (:func:`~txcache._session.reset_statement`). One round trip, plus one if the application
    PREPAREd statements (and one more if a transaction was open); raises psycopg's
    errors."""
    if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        await connection.execute("ROLLBACK")
    if reset is SessionReset.SEQUENCES and not await _changed_unseen(connection, context):
        return
    cursor = await connection.execute(reset_statement(context), prepare=False)
    while cursor.nextset():
        pass  # to the last result: the statements the application prepared
    deallocate = deallocation([name for (name,) in await cursor.fetchall()])
    if deallocate is not None:
        await connection.execute(deallocate, prepare=False)

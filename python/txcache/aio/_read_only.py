"""The read-only transaction: it reads at one commit point, from the cache where possible.

It keeps a :class:`~txcache._pinset.PinSet`. Cache lookups ask for any version valid
between its smallest and largest pin; each hit narrows the set. The database transaction
starts lazily, at the first query, on a pin chosen by the pin policy (or ★: a pin taken
now). Query results are valid at that snapshot; when a later hit is not, the library asks a
node over which range the transaction's query results stay valid (``TXINTERVAL``) and, if
some pin lies in both, moves the database transaction there. When no pin can be had (the
agent is down), it runs on a plain ``REPEATABLE READ READ ONLY`` snapshot without the cache
from then on — slower, never wrong. What it guards against is docs/library.md's "Read-only
safety".

Every state and decision is :class:`~txcache._read_only_core.ReadOnlyCore`'s; this class
does the round trips — node lookups, the agent's fresh pins, the database's imports and
statements. Its sync twin is generated from it (``tools/async_to_sync.py``).

In the async driver, a cancellation (``asyncio.CancelledError``, or the ``TimeoutError`` of
``asyncio.timeout``):
one that interrupts a database round trip (a statement, the start of the database
transaction, a move) fails the block as a failed statement does — the connection's state is
unknown, so nothing more is read or stored in the block, and the connection is rolled back
or discarded when the block ends. One that interrupts a cache lookup changes nothing: the
reply is dropped when it comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.rows import AsyncRowFactory, tuple_row

from txcache import _tokens as tokens
from txcache._cache_core import CatalogUnavailable
from txcache._current import Params
from txcache._drivers import ASYNC
from txcache._lsn import WAL_POSITION
from txcache._pinset import Pin
from txcache._protocol import Hit, Interval, Miss
from txcache._read_only_core import (
    BEGIN_READ_ONLY,
    CURRENT_SNAPSHOT,
    NO_SNAPSHOT,
    NODE_CATCH_UP,
    REWRITE_MOVES,
    ReadOnlyCore,
    RewriteCheck,
    StaleRead,
    Statement,
    lost_while_moving,
)
from txcache._schema import Catalog
from txcache._session import SessionReset
from txcache._sql import UncacheableQuery
from txcache.aio._cursor import AsyncResultCursor
from txcache.aio._nodes import AsyncCacheNode
from txcache.aio._transaction import AsyncTransaction
from txcache.errors import SnapshotUnavailable

if TYPE_CHECKING:
    from txcache.aio._cache import AsyncCacheDriver

__all__ = ["AsyncReadOnlyTransaction"]

log = logging.getLogger("txcache")

T = TypeVar("T")

AsyncConnection = psycopg.AsyncConnection[Any]

if ASYNC:
    # A cancelled round trip leaves the connection's state unknown: it fails the block.
    _INTERRUPTED: tuple[type[BaseException], ...] = (asyncio.CancelledError,)
else:
    _INTERRUPTED: tuple[type[BaseException], ...] = ()
# What fails the block when it happens during a move.
_MOVE_FAILURES: tuple[type[BaseException], ...] = (
    psycopg.Error,
    SnapshotUnavailable,
    *_INTERRUPTED,
)


class AsyncReadOnlyTransaction(AsyncTransaction, ReadOnlyCore["AsyncCacheDriver"]):
    """Reads at one commit point, from the cache where possible (module docstring)."""

    def __init__(self, cache: AsyncCacheDriver, staleness: float, not_before: int | None) -> None:
        AsyncTransaction.__init__(self, cache)
        ReadOnlyCore.__init__(self, cache, staleness, not_before)
        self.ring = cache.ring
        """The nodes its keys are placed on: the cache's as it began (the agent may name
        others meanwhile)."""

    async def _begin(self) -> None:
        if not self.uncached:
            self._adopt_context(await self.cache.transaction_context())
        if not self.uncached:
            self._raise_not_before(await tokens.floor_async(self.cache.settings.dsn, self._written))

    # -- the cache --------------------------------------------------------------------------

    async def lookup(
        self, node: AsyncCacheNode, key: bytes, decode: Callable[[bytes], T]
    ) -> tuple[Hit, T] | Miss:
        """The cached version of ``key`` this transaction may use, with its value as
        ``decode`` reads it, narrowing the pin set. A hit ``decode`` refuses (another
        application's ``secret``, a forged value) is a ``foreign`` miss, and one no pin of
        the set can be serialized with a ``consistency`` miss — before either narrows the
        set, moves the transaction or binds it to cached data."""
        if self._failure is not None:
            self.check_usable()
        bounds = self._lookup_bounds()
        if bounds is None:
            bounds = self._bounds_at_fresh(await self._fresh_pin())
            if bounds is None:
                return Miss("unavailable")
        started = time.perf_counter()
        lease_ms = round(self.cache.settings.lease * 1000) or None
        found = await node.lookup(
            key, bounds[0], bounds[1], with_tags=bool(self.frames), lease_ms=lease_ms
        )
        self.cache.latency.record_lookup(time.perf_counter() - started)
        if isinstance(found, Miss):
            return found
        try:
            value = decode(found.value)
        except Exception:  # a pluggable serializer may raise anything: a miss
            return Miss("foreign")
        try:
            accepted = self._accept_here(found.interval)
            if accepted is None:
                accepted = await self._move(found.interval)
        except _MOVE_FAILURES as error:
            self._fail(error)  # a move failed, or was interrupted
            server = self._server()
            if server is not None and isinstance(error, psycopg.OperationalError):
                # The standby's connection failed (or went silent) in the move: it is down,
                # and the transaction, bound to what it read there, is to be retried.
                self.cache.replica_health.failed(server, str(error))
                raise SnapshotUnavailable(
                    f"the standby {server} failed while the transaction moved to another of "
                    f"its snapshots ({error}); retry the transaction"
                ) from error
            raise
        if not accepted:
            return Miss("consistency")
        self.read_cache = True
        return found, value

    async def _move(self, interval: Interval) -> bool:
        """Move the database transaction to a pin where both ``interval`` and every query
        result read so far are valid, if there is one. The same connection is reused (a
        second one could wait forever on a full pool)."""
        active, connection = self.snapshot, self._connection
        assert active is not None
        assert connection is not None
        node = self._interval_node(self.ring)
        if node is None or self._fingerprinted():
            # Without DDL triggers a result read here may have run with a catalog newer
            # than the pin, which no interval the node knows accounts for: it stays here.
            return False
        known = await node.database_interval(active.ts, self._sorted_query_tags())
        targets = self._move_targets(interval, known)
        if targets is None:
            return False
        lo, hi, candidates = targets
        for pin in candidates:
            if await self._import(connection, pin):
                self._moved_to(pin)
                self.pin_set.narrow(lo, hi)
                return True
            self.pin_set.discard(pin)
        if not await self._import(connection, active):
            raise lost_while_moving()
        return False

    # -- the database -----------------------------------------------------------------------

    async def _execute(
        self, statement: str, params: Params, row_factory: AsyncRowFactory[Any] | None
    ) -> psycopg.AsyncCursor[Any]:
        """:meth:`execute`, once it checked the owner. Only reads run:
        :class:`~txcache.StatementNotAllowed` names what does not (nothing is sent). Inside
        a cacheable function the query must be cacheable: :class:`~txcache.UncacheableQuery`
        names what is not. A database error (or :class:`~txcache.SnapshotUnavailable`)
        fails the block: every later lookup, query and cacheable call raises
        :class:`~txcache.TransactionError`. The cursor returned holds the results only."""
        if self._closed:  # first: a write after the end is refused for the end, not as a write
            raise self._ended_error()
        single = self._statement_count(statement, params) == 1
        try:
            try:
                connection = await self._database()
                cursor, tags = await self._run(connection, statement, params, single, row_factory)
            except psycopg.OperationalError as error:
                if not self._may_leave_replica(failed=True):
                    raise
                await self._leave_replica(f"its connection failed ({error})", failed=True)
                connection = await self._database()
                cursor, tags = await self._run(connection, statement, params, single, row_factory)
        except (psycopg.Error, SnapshotUnavailable) as error:
            replacement = self._failed_by(error)
            if replacement is None:
                raise
            raise replacement from error
        except _INTERRUPTED as error:
            self._fail(error)
            raise
        self._check_session(self._connection or connection)  # a standby's may have been left
        self._record_query(tags)
        return cursor

    async def _run(
        self,
        connection: AsyncConnection,
        statement: str,
        params: Params,
        single: bool,
        rows: AsyncRowFactory[Any] | None,
    ) -> tuple[AsyncResultCursor, frozenset[str] | None]:
        """Run ``statement`` with its checks: unless every table it reads was verified
        earlier in this database transaction, for a rewrite after the snapshot; if it was
        analysed, for a catalog newer than the snapshot's. Either drops the result: the
        database transaction moves past the change and the statement runs again (or
        :class:`SnapshotUnavailable` is raised). Returns the cursor and the statement's
        tags (``None`` if not derived)."""
        for attempt in range(REWRITE_MOVES + 1):
            connection = await self._database()  # the primary's, if a move left a standby
            tags, analysed = (None, None) if self.uncached else await self._tags(statement, params)
            cursor = AsyncResultCursor(connection, row_factory=rows or tuple_row)
            started = time.perf_counter()
            catalog_check = self._catalog_check(analysed)
            rewritten, catalog, session = await self._run_with_checks(
                connection,
                cursor,
                statement,
                params,
                single=single,
                rewrite_check=self._rewrite_check(tags, analysed, catalog_check),
                catalog_check=catalog_check,
                context_check=self._context_check(tags),
            )
            self.cache.latency.record_query(time.perf_counter() - started, self._server())
            self._fail_if_session_changed(connection, session)
            stale = self._stale_read(rewritten, analysed, catalog)
            if stale is not None and stale.ask_agent:
                assert self.cache.agent is not None
                await self.cache.agent.refresh()
                stale = self._stale_read(rewritten, analysed, catalog, refreshed=True)
            if stale is None:
                return cursor, tags
            await self._move_past(stale, last_chance=attempt == REWRITE_MOVES)
        raise AssertionError("unreachable: the last move past a change raises")

    async def _run_with_checks(
        self,
        connection: AsyncConnection,
        cursor: AsyncResultCursor,
        statement: str,
        params: Params,
        *,
        single: bool,
        rewrite_check: RewriteCheck | None,
        catalog_check: Statement | None,
        context_check: str | None,
    ) -> tuple[list[str], tuple[Any, ...] | None, list[Any] | None]:
        """Run ``statement``, then the rewrite check, the catalog check and the session
        context check (each if any) — in one round trip (a pipeline) when it is a single
        statement (several go by the simple protocol, which a pipeline refuses). Returns
        the rewritten relations read (and otherwise records the verified ones), the catalog
        check's row and the context check's rows."""
        checks = rewrite_check is not None or catalog_check is not None
        checks = checks or context_check is not None
        rewrite: psycopg.AsyncCursor[Any] | None = None
        catalog: psycopg.AsyncCursor[Any] | None = None
        session: psycopg.AsyncCursor[Any] | None = None
        pipeline = _pipelined(connection) if single and checks else contextlib.nullcontext()
        async with pipeline:
            await cursor.run(statement, params)
            if rewrite_check is not None:
                self.rewrite_checks += 1
                rewrite = await connection.execute(rewrite_check.statement, rewrite_check.params)
            if catalog_check is not None:
                catalog = await connection.execute(*catalog_check)
            if context_check is not None:
                session = await connection.execute(context_check)
        rewritten = []
        if rewrite is not None and rewrite_check is not None:
            rewritten = self._rewritten(rewrite_check, await rewrite.fetchall())
        catalog_row = await catalog.fetchone() if catalog is not None else None
        return rewritten, catalog_row, await session.fetchall() if session is not None else None

    async def _move_past(self, stale: StaleRead, *, last_chance: bool) -> None:
        """The statement's result was dropped (``stale`` says why). Move the database
        transaction to a later snapshot where every query result read so far stays valid —
        a fresh pin (★) if no cached value was used yet, else (or failing that) the newest
        such pin of the set — or raise :class:`SnapshotUnavailable` (always on the unpinned
        fallback: no pin to move to)."""
        if self._may_leave_replica():
            await self._leave_replica(stale.what)
            return
        active, connection = self.snapshot, self._connection
        assert connection is not None
        fresh = await self._fresh_pin() if not self.read_cache else None
        valid = await self._results_valid_around(active, fresh) if active is not None else None
        lo, hi = self._later_window(stale, valid, last_chance=last_chance)
        for pin in self._later_candidates(fresh, lo, hi):
            if await self._import(connection, pin):
                self._moved_past(stale, pin, hi)
                return
            if pin is not fresh:  # ★ is not in the set (a listed pin may share its ts)
                self.pin_set.discard(pin)
        raise stale.error()

    async def _leave_replica(self, why: str, *, failed: bool = False) -> None:
        """Give the standby's connection back and go on on the primary, at the primary's
        pin of the same commit point or, where what was read from the standby stays valid
        (a node's ``TXINTERVAL``), another of the set; with ``failed``, the standby is
        down too, until a probe finds it answering. :class:`SnapshotUnavailable` when no
        pin fits."""
        active = self.snapshot
        assert active is not None
        valid, fresh = None, None
        if self._read_database and active.fallback is None:
            # The primary's pins may all be gone (nobody used them): a fresh one too, while
            # no cached value binds the transaction to the set.
            fresh = await self._fresh_pin() if not self.read_cache else None
            valid = await self._results_valid_around(active, fresh)
        connection, self._connection = self._connection, None
        try:
            self._left_replica(why, failed=failed, valid=valid, fresh=fresh)
        finally:
            if connection is not None:
                await self.cache.release(connection)

    async def _results_valid_around(self, active: Pin, fresh: Pin | None) -> tuple[int, int] | None:
        """The range of commit points at which every query result read so far is valid (a
        node's ``TXINTERVAL``, as for a move), waiting up to :data:`NODE_CATCH_UP` seconds
        for the node to apply the stream up to ``fresh``; ``None`` when it cannot be
        known."""
        if self._results_valid_anywhere():
            return 0, 2**63 - 1
        node = self._interval_node(self.ring)
        if node is None:
            return None
        tags = self._sorted_query_tags()
        known = await node.database_interval(active.ts, tags)
        deadline, delay = time.monotonic() + NODE_CATCH_UP, 0.001
        while self._node_behind(known, fresh) and time.monotonic() < deadline:
            await asyncio.sleep(delay)  # the node applies the stream within milliseconds
            delay = min(2 * delay, 0.05)
            known = await node.database_interval(active.ts, tags)
        return None if known is None else (known.lo, known.hi)

    async def _tags(
        self, statement: str, params: Params
    ) -> tuple[frozenset[str] | None, Catalog | None]:
        """The statement's tags (``None`` if not derived) and the catalog reading they were
        derived from (for a bare query without tags, the current one: it is still
        checked for a schema change after the snapshot)."""
        assert self.snapshot is not None
        try:
            return await self.cache.analyze(statement, params, self.snapshot.ts)
        except UncacheableQuery:
            if not self._may_run_untagged():
                raise
            return None, self.cache.catalog_reading()
        except CatalogUnavailable as unavailable:
            why = f"the catalog changed and cannot be read now: {unavailable}"
            if self.read_cache:
                raise SnapshotUnavailable(f"{why}; retry the transaction") from unavailable
            self._fall_back(why)
            return None, self.cache.catalog_reading()

    async def _database(self) -> AsyncConnection:
        if self._closed:
            raise self._ended_error()
        if self._connection is not None:
            return self._connection
        connection = await self._resumed()
        if connection is None:
            connection = await self._on_replica()
        began = connection is not None  # its database transaction is at a pin already
        if connection is None:
            connection = await self.cache.checkout()
        try:
            if not began:
                self._check_connection(self.cache.connection_context(connection))
                if self.uncached or not await self._begin_pinned(connection):
                    self.database_snapshot = await _begin_unpinned(connection)
            self._note_session(connection)
        except BaseException:
            # Until it is the block's, only this gives the connection back (an interruption
            # too: a Ctrl-C lands between any two steps).
            await self.cache.release(connection)
            raise
        self._connection = connection
        return connection

    async def _resumed(self) -> AsyncConnection | None:
        """The connection of a database transaction parked at the pin the policy chooses,
        which this transaction then runs in (:mod:`txcache._parking`); ``None`` when there
        is none."""
        wanted = self._parked_wanted()
        if wanted is None:
            return None
        parked = await self.cache.take_parked(*wanted)
        if parked is None:
            return None
        self._resume(parked, wanted[0])
        return parked.connection

    async def _on_replica(self) -> AsyncConnection | None:
        """A connection to a hot standby in a read-only transaction at the standby's pin
        the policy chooses; ``None`` when it chooses the primary (or ★). A standby that
        gives no connection, runs another session context, or no longer has the snapshot
        is left: its pin is replaced by the primary's at the same commit point, or
        dropped, and the policy chooses again."""
        if not self.cache.replica_pools:
            return None  # no standbys: not a policy call more on every miss
        while not self.uncached:
            choice = self._choose()
            if choice is None or choice.server is None or self.primary_only:
                return None
            if self._replica_caught_up(choice):
                connection = await self.cache.checkout_replica(choice.server)
                if connection is not None:
                    try:
                        began = await self._began_on_replica(connection, choice)
                    except BaseException:
                        await self.cache.release(connection)  # interrupted while it began
                        raise
                    if began:
                        return connection
                    await self.cache.release(connection)
            if not self._replica_refused(choice):
                return None
        return None

    async def _began_on_replica(self, connection: AsyncConnection, pin: Pin) -> bool:
        """Whether ``connection`` (to ``pin``'s standby) runs this transaction's session
        context and imported ``pin``."""
        assert pin.server is not None
        context = self.cache.session_of(connection)
        assert context is not None, "a connection the cache checked out"
        if self.context is not None and context != self.context:
            changed = ", ".join(context.differences(self.context))
            self.cache.replica_health.failed(pin.server, f"its session differs: {changed}")
            return False
        try:
            imported = await self._import(connection, pin)
        except psycopg.OperationalError as error:
            self.cache.replica_health.failed(pin.server, str(error))
            return False
        if imported:
            self._began_at(pin)
            self.cache.replica_health.served(pin.server)
        else:
            self.cache.replica_health.snapshot_missing(pin.server)
        return imported

    async def _begin_pinned(self, connection: AsyncConnection) -> bool:
        """Start the database transaction on ``connection`` at the policy's choice of pin
        (or ★); ``False`` when the transaction falls back to an unpinned snapshot."""
        while True:
            choice = self._choose()
            if choice is not None and choice.server is not None:
                if not self._replica_refused(choice):  # the primary's connection: not here
                    return False
                continue
            if choice is None:
                choice = self._fresh_or_newest(await self._fresh_pin(connection))
                if choice is None:
                    return False
            if await self._import(connection, choice):
                self._began_at(choice)
                return True
            if not self._import_refused(choice):
                return False

    async def _fresh_pin(self, connection: AsyncConnection | None = None) -> Pin | None:
        """★: a pin the agent takes now, its ``not_before`` checked — on ``connection``, the
        block's own on the primary, when it holds one (else the block's, or the pool's)."""
        agent = self.cache.agent
        fresh = None
        if agent is not None:
            fresh = await agent.pin_now()
            self.cache.latency.record_fresh_pin(fresh is not None)
        if self._predates_token(fresh):
            self._check_token(await self._wal_position(connection or self._primary_connection()))
        return fresh

    def _primary_connection(self) -> AsyncConnection | None:
        """The block's connection, if it holds one on the primary."""
        return None if self._runs_on_replica() else self._connection

    async def _wal_position(self, connection: AsyncConnection | None) -> int:
        """The database's WAL insert position (:meth:`Cache.timestamp`), asked on the
        block's own ``connection`` when it holds one: a block holds one connection from its
        first query to its end, and a second from the pool could wait on a full one until
        ``pool_timeout``, every block holding one and waiting for another."""
        usable = (psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.INTRANS)
        if connection is None or connection.info.transaction_status not in usable:
            return await self.cache.timestamp()
        cursor = await connection.execute(WAL_POSITION)
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    async def _import(self, connection: AsyncConnection, pin: Pin) -> bool:
        """Put ``connection`` in a read-only transaction at ``pin`` (ending the one it was
        in); ``False`` if the snapshot can no longer be imported, or if its id now names
        another snapshot (ids are reused after a PostgreSQL restart: the snapshot's
        contents, read in the same round trip, must equal the pin's)."""
        statement = self._import_sql(pin)
        try:
            if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await connection.execute("ROLLBACK")
            cursor = await connection.execute(statement)
        except psycopg.Error as error:
            if error.sqlstate not in NO_SNAPSHOT:
                raise
            log.info("pin %s is gone (%s); choosing another", pin.ts, error)
            await connection.execute("ROLLBACK")
            return False
        while cursor.nextset():  # past BEGIN and SET TRANSACTION SNAPSHOT
            pass
        row = await cursor.fetchone()
        if self._imported(pin, None if row is None else row[0]):
            return True
        await connection.execute("ROLLBACK")
        return False

    async def _finish(self, *, committing: bool) -> None:
        # Nothing to commit: a failure while giving the connection back closes it (the
        # cache's release), never turning a finished read into an error.
        self._closed = True
        self._report_pin_use()
        self._hand_over_sampled(committing=committing)
        await self._give_back_connection()
        await self._store_verified()

    async def _give_back_connection(self) -> None:
        """Park the database transaction for the next block at its pin, or release the
        connection to the pool."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        parked = self._parkable(connection, time.monotonic())
        if parked is not None:
            await self.cache.park(parked)
        else:
            await self.cache.release(
                connection, reset=SessionReset.FULL if self.session_changed else SessionReset.NONE
            )

    async def _store_verified(self) -> None:
        """Store the values of the cache's transactions that waited for a pin to verify
        their catalog and now have one (an agent without DDL triggers)."""
        ready = self.cache.settle_stores()
        for done, store in enumerate(ready):
            try:
                await store.node.store(store.key, *store.request, store.record)
            except BaseException:
                for left in ready[done:]:
                    left.record("failed")  # an interruption: not stored
                raise


async def _begin_unpinned(connection: AsyncConnection) -> str:
    """A read-only transaction on a snapshot of its own; returns the snapshot."""
    await connection.execute(BEGIN_READ_ONLY)
    cursor = await connection.execute(CURRENT_SNAPSHOT)
    row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


@contextlib.asynccontextmanager
async def _pipelined(connection: AsyncConnection) -> AsyncIterator[None]:
    """``connection.pipeline()`` that raises a failed statement's error as it is, once.
    psycopg's own logs a warning when a block leaves it by an error (the pipeline it then
    ends is aborted: that is what the warning says), and a statement's error reaches the
    block at the next statement sent after it, so every failed query of a block with checks
    would be logged, as if something else had failed."""
    failed: psycopg.Error | None = None
    try:
        async with connection.pipeline():
            try:
                yield
            except psycopg.Error as error:
                failed = error  # the pipeline ends without it: then aborted, as it says
    except psycopg.Error:
        if failed is None:
            raise
    if failed is not None:
        raise failed

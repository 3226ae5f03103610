"""Transactions: read-only ones that read through the cache at one commit point, and
read/write ones that go straight to PostgreSQL.

A :class:`ReadOnlyTransaction` keeps a :class:`~txcache._pinset.PinSet`. Cache lookups ask
for any version valid between its smallest and largest pin; each hit narrows the set. The
database transaction starts lazily, at the first query, on a pin chosen by the pin policy
(or ★: a pin taken now). Query results are valid at that snapshot; when a later hit is not,
the library asks a node over which range the transaction's query results stay valid
(``TXINTERVAL``) and, if some pin lies in both, moves the database transaction there.

Falling back: when no pin can be had (the agent is down), a read-only transaction runs on a
plain ``REPEATABLE READ READ ONLY`` snapshot without the cache from then on — slower, never
wrong.

What a read-only transaction guards against (docs/library.md, "Read-only safety"):

- statements that would end or change the transaction or the session, or write, are
  refused before they reach the database (:mod:`txcache._statements`);
- once a statement failed in the database, the whole block is failed: every later lookup,
  query and cacheable call raises, and nothing more is stored;
- a snapshot taken before a ``TRUNCATE`` (or a table-rewriting ``ALTER TABLE``) that reads
  the table after it committed sees it empty. After a query, the relations it read are
  checked (their file node at the snapshot against the current one; the transaction's lock
  holds off any later rewrite); a rewritten one drops the result, moves the database
  transaction to a later pin and runs the query again, or raises
  :class:`~txcache.SnapshotUnavailable`;
- a pin's snapshot id can name another snapshot after a PostgreSQL restart: an import is
  checked against the pin's snapshot contents in the same round trip.

The read-only transaction's state and decisions live in :mod:`txcache._read_only_core`, and
the read/write transaction's in :class:`CommitRecord` and :func:`end_action`, shared with
the async transactions (:mod:`txcache.aio`); the classes here do the sync round trips.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Self, TypeVar, cast, overload

import psycopg
from psycopg.rows import RowFactory, tuple_row

from txcache import _tokens as tokens
from txcache._lsn import WAL_POSITION
from txcache._nodes import CacheNode, Hit, Interval, Miss
from txcache._pinset import Pin
from txcache._read_only_core import (
    BEGIN_READ_ONLY,
    CURRENT_SNAPSHOT,
    NO_SNAPSHOT,
    NODE_CATCH_UP,
    REWRITE_MOVES,
    REWRITTEN,
    ReadOnlyCore,
    StaleRead,
    Statement,
    lost_while_moving,
)
from txcache._schema import Catalog
from txcache._sql import UncacheableQuery
from txcache.errors import (
    NoTransaction,
    SnapshotUnavailable,
    StatementNotAllowed,
    TransactionError,
)

if TYPE_CHECKING:
    from txcache._connect import Cache
    from txcache.aio._transaction import AsyncTransaction

__all__ = [
    "COMMIT",
    "CommitRecord",
    "Params",
    "ReadOnlyTransaction",
    "ReadWriteTransaction",
    "Row",
    "Transaction",
    "current_transaction",
    "cursor_refusal",
    "end_action",
    "execute",
    "query",
    "query_one",
    "rolled_back_error",
]

log = logging.getLogger("txcache")

Params = Sequence[Any] | Mapping[str, Any] | None
Row = tuple[Any, ...]
R = TypeVar("R")
Connection = psycopg.Connection[Row]

# The current transaction, sync or async: one variable, so that a block of either kind
# sees (and refuses) the other.
_current: contextvars.ContextVar[Transaction | AsyncTransaction | None] = contextvars.ContextVar(
    "txcache_transaction", default=None
)


def current_transaction() -> Transaction | AsyncTransaction | None:
    """The transaction running in this thread or task, if any (an async one inside ``async
    with cache.read_only()`` / ``read_write()`` of an async cache)."""
    return _current.get()


def _require() -> Transaction:
    """The current transaction. Typed as a sync one: an async transaction's ``execute``,
    ``query`` and ``query_one`` take the same arguments and return awaitables, so ``await
    txcache.query(...)`` works in an async block (``txcache.aio.query`` is the typed
    form)."""
    transaction = _current.get()
    if transaction is None:
        raise NoTransaction(
            "no transaction: run queries inside `with cache.read_only(...)` or "
            "`with cache.read_write()`"
        )
    return cast("Transaction", transaction)


@overload
def execute(
    statement: str, params: Params = None, *, row_factory: None = None
) -> psycopg.Cursor[Row]: ...
@overload
def execute(
    statement: str, params: Params = None, *, row_factory: RowFactory[R]
) -> psycopg.Cursor[R]: ...
def execute(
    statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
) -> psycopg.Cursor[Any]:
    """Run ``statement`` in the current transaction; returns the cursor. ``row_factory``
    (psycopg's, e.g. ``psycopg.rows.dict_row``) shapes its rows; tuples by default."""
    return _require().execute(statement, params, row_factory=row_factory)


@overload
def query(statement: str, params: Params = None, *, row_factory: None = None) -> list[Row]: ...
@overload
def query(statement: str, params: Params = None, *, row_factory: RowFactory[R]) -> list[R]: ...
def query(
    statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
) -> list[Any]:
    """Every row of ``statement``, run in the current transaction."""
    return _require().query(statement, params, row_factory=row_factory)


@overload
def query_one(statement: str, params: Params = None, *, row_factory: None = None) -> Row | None: ...
@overload
def query_one(statement: str, params: Params = None, *, row_factory: RowFactory[R]) -> R | None: ...
def query_one(
    statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
) -> Any:
    """The first row of ``statement`` (or ``None``), run in the current transaction."""
    return _require().query_one(statement, params, row_factory=row_factory)


class Transaction:
    """What both kinds of transaction share: a context manager with a database connection
    taken from the cache's pool when first needed. A transaction belongs to the thread that
    began it (its state is not shared between threads, even through a copied context)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._connection: Connection | None = None
        self._token: contextvars.Token[Transaction | AsyncTransaction | None] | None = None
        self.owner = 0
        """The ident of the thread that began it."""
        self.detached = False
        """Begun with :meth:`begin_detached`: its driver serializes its use, from any
        thread."""

    def __enter__(self) -> Self:
        if _current.get() is not None:
            raise TransactionError("a transaction is already running in this context")
        self.owner = threading.get_ident()
        self._token = _current.set(self)
        try:
            self._begin()
        except BaseException:
            _current.reset(self._token)
            self._token = None
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        try:
            if token is not None:
                _current.reset(token)
        finally:
            self._finish(committing=exc_type is None)

    def begin_detached(self) -> Self:
        """Begin the transaction without making it the current one of the thread: for a
        driver that holds it itself, serializes its use and ends it with
        :meth:`end_detached` (the connections of :mod:`txcache.sqlalchemy`, whose sessions
        may move between threads, and flush or close in tasks of their own). Nothing else
        can reach it — ``txcache.query`` and cacheable calls do not see it — so it is not
        bound to a thread."""
        self.owner = threading.get_ident()
        self.detached = True
        self._begin()
        return self

    def end_detached(self, *, commit: bool) -> None:
        """End a transaction begun with :meth:`begin_detached`, as leaving its block would:
        commit (``commit``) or roll back."""
        self._finish(committing=commit)

    def check_owner(self) -> None:
        """Refuse use from a thread other than the one that began the transaction (unless
        it was begun detached)."""
        if threading.get_ident() != self.owner and not self.detached:
            raise TransactionError(
                "a transaction belongs to the thread that began it; begin one per thread"
            )

    def execute(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> psycopg.Cursor[Any]:
        """Run ``statement``; returns the cursor (rows not fetched), its rows made by
        ``row_factory`` (tuples by default; docs/library.md, "Rows")."""
        raise NotImplementedError

    def query(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> list[Any]:
        """Every row of ``statement``."""
        return self.execute(statement, params, row_factory=row_factory).fetchall()

    def query_one(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> Any:
        """The first row of ``statement``, or ``None``."""
        return self.execute(statement, params, row_factory=row_factory).fetchone()

    def _begin(self) -> None:
        """Whatever must happen on entering the block (nothing, by default)."""

    def _finish(self, *, committing: bool) -> None:
        raise NotImplementedError


# Commit in one round trip, learning the transaction id first. SET CONSTRAINTS ALL
# IMMEDIATE fires the pending deferred triggers now rather than inside COMMIT, so a write of
# theirs assigns the id before it is read (their outcome is the same). A held (WITH HOLD)
# cursor is still run to its end by COMMIT, and can write then: the flag says there is one.
# The WAL position after it is at or after the commit record: a token for the commit when
# the stream decodes none (it only locked rows, or wrote nothing published).
COMMIT = (
    "SET CONSTRAINTS ALL IMMEDIATE; "
    "SELECT pg_current_xact_id_if_assigned()::text, "
    "EXISTS (SELECT FROM pg_cursors WHERE is_holdable); "
    f"COMMIT; {WAL_POSITION}"
)


def end_action(
    status: psycopg.pq.TransactionStatus, *, committing: bool
) -> Literal["commit", "rollback", "none"]:
    """What ends a read/write block whose connection is in ``status``: a commit when the
    block ended normally with its transaction open, a rollback of anything else open."""
    if committing and status == psycopg.pq.TransactionStatus.INTRANS:
        return "commit"
    return "none" if status == psycopg.pq.TransactionStatus.IDLE else "rollback"


def rolled_back_error() -> TransactionError:
    """A read/write block caught a failed statement and went on: nothing was written."""
    return TransactionError(
        "a statement failed inside the read/write block, so the transaction was rolled "
        "back: nothing was written"
    )


class CommitRecord:
    """What a read/write transaction knows of its commit, and when its commit timestamp
    must be asked (sync and async transactions alike)."""

    def __init__(self) -> None:
        self.xid: int | None = None
        """The transaction's id (``pg_current_xact_id()``), known after commit; ``None``
        if it wrote nothing before ``COMMIT``."""
        self._committed = False
        self._timestamp: int | None = None
        self._commit_may_write = False  # COMMIT ran a held cursor: it may have written
        self._after: int | None = None  # the WAL position after the commit

    def _record_commit(self, row: tuple[Any, ...] | None, after: tuple[Any, ...] | None) -> None:
        """:data:`COMMIT`'s rows: the transaction id and whether a held cursor ran, and the
        WAL position after the commit. A commit that wrote becomes the context's
        read-your-writes floor (:mod:`txcache._tokens`)."""
        assert row is not None
        assert after is not None
        xid, holds_cursors = row
        self._after = int(after[0])
        self.xid = None if xid is None else int(xid)
        self._committed = True
        self._commit_may_write = self.xid is None and bool(holds_cursors)
        tokens.record(self)

    @property
    def wrote(self) -> bool:
        """Whether it committed and may have written (it has a commit timestamp)."""
        return self._committed and (self.xid is not None or self._commit_may_write)

    def settled_timestamp(self) -> int | None:
        """The commit timestamp if it can be had synchronously (``None`` otherwise: an
        async transaction not asked yet)."""
        raise NotImplementedError

    async def settled_timestamp_async(self) -> int | None:
        """The commit timestamp, from a coroutine."""
        raise NotImplementedError

    def _after_commit(self) -> int:
        """The WAL position read right after the commit: at or after it, so a token for it
        when the agent has no commit LSN (sound, possibly newer than needed)."""
        assert self._after is not None
        return self._after

    def _timestamp_to_ask(self) -> bool:
        """Whether the commit timestamp is still to be asked (it wrote, and it is not known
        yet); raises before the commit."""
        if not self._committed:
            raise TransactionError("commit_timestamp is known only after the commit")
        return self._timestamp is None and (self.xid is not None or self._commit_may_write)


class ReadWriteTransaction(CommitRecord, Transaction):
    """Straight to PostgreSQL, no cache. After commit, :attr:`commit_timestamp` is the
    token a read-only transaction passes as ``not_before`` to see this transaction's
    writes. Its connection goes back to the pool reset (:meth:`Cache.release`)."""

    def __init__(self, cache: Cache, isolation: str | None = None) -> None:
        Transaction.__init__(self, cache)
        CommitRecord.__init__(self)
        self._isolation = isolation

    def _begin(self) -> None:
        connection: Connection = self.cache.checkout()
        isolation = f" ISOLATION LEVEL {self._isolation}" if self._isolation else ""
        try:
            connection.execute(f"BEGIN{isolation}")
        except BaseException:
            self.cache.pool.putconn(connection)
            raise
        self._connection = connection

    def execute(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> psycopg.Cursor[Any]:
        """See :meth:`Transaction.execute`."""
        if self._connection is None:
            raise TransactionError("this read/write transaction has ended")
        self.check_owner()
        cursor = self._connection.cursor(row_factory=row_factory or tuple_row)
        return cursor.execute(statement, params)

    def executemany(
        self, statement: str, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> psycopg.Cursor[Row]:
        """Run ``statement`` once per parameter set (psycopg's ``executemany``: one
        pipeline); returns the cursor. A DBAPI's ``executemany``, which SQLAlchemy's bulk
        writes call (:mod:`txcache.sqlalchemy`)."""
        if self._connection is None:
            raise TransactionError("this read/write transaction has ended")
        self.check_owner()
        cursor = self._connection.cursor()
        cursor.executemany(statement, params_seq)
        return cursor

    def _finish(self, *, committing: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            self._end(connection, committing=committing)
        finally:
            # The block ran the application's SQL: a SET, a temporary table, a lock it left
            # must not change what the connection's next transactions compute.
            self.cache.release(connection, reset=True)

    def _end(self, connection: Connection, *, committing: bool) -> None:
        """Commit (or roll back) the database transaction."""
        try:
            action = end_action(connection.info.transaction_status, committing=committing)
            if action == "commit":
                self._commit(connection)
            elif action == "rollback":
                connection.execute("ROLLBACK")
                if committing:  # the block caught a failed statement and went on
                    raise rolled_back_error()
        except psycopg.Error:
            if committing:
                raise
            log.debug("rollback failed after an error", exc_info=True)  # keep the user's error

    def _commit(self, connection: Connection) -> None:
        """``COMMIT``: fire deferred triggers, read the transaction id, commit."""
        cursor = connection.execute(COMMIT)
        cursor.nextset()  # past SET CONSTRAINTS, to the SELECT
        row = cursor.fetchone()
        cursor.nextset()  # to COMMIT
        cursor.nextset()  # to the WAL position
        self._record_commit(row, cursor.fetchone())

    @property
    def commit_timestamp(self) -> int | None:
        """The commit LSN of this transaction (``None`` if it wrote nothing): pass it as
        ``not_before``. Asks the agent, which answers once its stream decoded the commit;
        if the agent cannot answer, or the commit itself may have written without the
        transaction id being known before (a held cursor ran to its end), a WAL position
        at or after the commit stands in (just as safe, possibly newer than needed)."""
        if self._timestamp_to_ask():
            lsn = self._commit_lsn()
            self._timestamp = lsn if lsn is not None else self._after_commit()
        return self._timestamp

    def settled_timestamp(self) -> int | None:
        """:attr:`commit_timestamp` (:class:`CommitRecord`)."""
        return self.commit_timestamp

    async def settled_timestamp_async(self) -> int | None:
        """:attr:`commit_timestamp`, asked in a worker thread (it may wait on the agent)."""
        return await asyncio.to_thread(lambda: self.commit_timestamp)

    def _commit_lsn(self) -> int | None:
        """The agent's answer for :attr:`xid`; ``None`` without an xid or an answer."""
        agent = self.cache.agent
        if self.xid is None or agent is None:
            return None
        return agent.commit_lsn(self.xid, timeout=1.0, upto=self._after)


class _ResultCursor(psycopg.Cursor[Row]):
    """What a read-only transaction's ``execute`` returns: the statement's results. Its own
    ``execute``, ``executemany``, ``copy`` and ``stream`` refuse — a statement sent through
    them would skip the statement check, the rewrite check and the tags the cache needs."""

    def run(self, statement: str, params: Params) -> None:
        """Run ``statement`` (the transaction's own use)."""
        super().execute(statement, params)

    def execute(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: run statements through the transaction (``txcache.execute``)."""
        raise cursor_refusal()

    def executemany(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()

    def copy(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()

    def stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()


def cursor_refusal() -> StatementNotAllowed:
    """What the cursor a read-only transaction returns raises for a statement of its own."""
    return StatementNotAllowed(
        "the cursor a read-only transaction returns only holds results: run statements "
        "through the transaction (txcache.execute / tx.execute), which checks them"
    )


def _begin_unpinned(connection: Connection) -> str:
    """A read-only transaction on a snapshot of its own; returns the snapshot (its first
    statement takes it)."""
    connection.execute(BEGIN_READ_ONLY)
    row = connection.execute(CURRENT_SNAPSHOT).fetchone()
    assert row is not None
    return str(row[0])


class ReadOnlyTransaction(Transaction, ReadOnlyCore["Cache"]):
    """Reads at one commit point, from the cache where possible (module docstring). The
    state and decisions are :class:`~txcache._read_only_core.ReadOnlyCore`'s; this class
    does the round trips."""

    def __init__(self, cache: Cache, staleness: float, not_before: int | None) -> None:
        Transaction.__init__(self, cache)
        ReadOnlyCore.__init__(self, cache, staleness, not_before)

    def _begin(self) -> None:
        if not self.uncached:
            self._adopt_context(self.cache.transaction_context())
        if not self.uncached:
            self._raise_not_before(tokens.floor(self.cache.settings.dsn, self._written))

    # -- the cache --------------------------------------------------------------------------

    def lookup(self, node: CacheNode, key: bytes) -> Hit | Miss:
        """The cached version of ``key`` this transaction may use, narrowing the pin set; a
        hit no pin of the set can be serialized with is a ``consistency`` miss."""
        if self._failure is not None:
            self.check_usable()
        bounds = self._lookup_bounds()
        if bounds is None:
            bounds = self._bounds_at_fresh(self._fresh_pin())
            if bounds is None:
                return Miss("unavailable")
        started = time.perf_counter()
        found = node.lookup(key, bounds[0], bounds[1], with_tags=bool(self.frames))
        self.cache.latency.record_lookup(time.perf_counter() - started)
        if isinstance(found, Hit):
            try:
                accepted = self._accept_here(found.interval)
                if accepted is None:
                    accepted = self._move(found.interval)
            except (psycopg.Error, SnapshotUnavailable) as error:  # a move failed
                self._fail(error)
                raise
            if not accepted:
                return Miss("consistency")
            self.read_cache = True
        return found

    def _move(self, interval: Interval) -> bool:
        """Move the database transaction to a pin where both ``interval`` and every query
        result read so far are valid, if there is one. The same connection is reused (a
        second one could wait forever on a full pool)."""
        active, connection = self.snapshot, self._connection
        assert active is not None
        assert connection is not None
        node: CacheNode | None = self._interval_node()
        if node is None:
            return False
        known = node.database_interval(active.ts, self._sorted_query_tags())
        targets = self._move_targets(interval, known)
        if targets is None:
            return False
        lo, hi, candidates = targets
        for pin in candidates:
            if self._import(connection, pin):
                self._moved_to(pin)
                self.pin_set.narrow(lo, hi)
                return True
            self.pin_set.discard(pin)
        if not self._import(connection, active):
            raise lost_while_moving()
        return False

    # -- the database -----------------------------------------------------------------------

    def execute(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> psycopg.Cursor[Any]:
        """See :meth:`Transaction.execute`. Only reads run:
        :class:`~txcache.StatementNotAllowed` names what does not (nothing is sent). Inside
        a cacheable function the query must be cacheable: :class:`~txcache.UncacheableQuery`
        names what is not. A database error (or :class:`~txcache.SnapshotUnavailable`)
        fails the block: every later lookup, query and cacheable call raises
        :class:`~txcache.TransactionError`. The cursor returned holds the results only."""
        self.check_owner()
        statements = self._statement_count(statement, params)
        try:
            connection = self._database()
            cursor, tags = self._run(
                connection, statement, params, single=statements == 1, rows=row_factory
            )
        except (psycopg.Error, SnapshotUnavailable) as error:
            replacement = self._failed_by(error)
            if replacement is None:
                raise
            raise replacement from error
        self._check_session(connection)
        self._record_query(tags)
        return cursor

    def _run(
        self,
        connection: Connection,
        statement: str,
        params: Params,
        *,
        single: bool,
        rows: RowFactory[Any] | None,
    ) -> tuple[_ResultCursor, frozenset[str] | None]:
        """Run ``statement`` with its checks: unless every table it reads was verified
        earlier in this database transaction, for a rewrite after the snapshot; if it was
        analysed, for a catalog newer than the snapshot's. Either drops the result: the
        database transaction moves past the change and the statement runs again (or
        :class:`SnapshotUnavailable` is raised). Returns the cursor and the statement's
        tags (``None`` if not derived)."""
        for attempt in range(REWRITE_MOVES + 1):
            tags, analysed = self._tags(statement, params) if not self.uncached else (None, None)
            cursor = _ResultCursor(connection, row_factory=rows or tuple_row)
            started = time.perf_counter()
            rewritten, catalog = self._run_with_checks(
                connection,
                cursor,
                statement,
                params,
                single=single,
                rewrite_check=not self._verified_already(tags),
                catalog_check=self._catalog_check(analysed),
            )
            self.cache.latency.record_query(time.perf_counter() - started)
            stale = self._stale_read(rewritten, analysed, catalog)
            if stale is not None and stale.ask_agent:
                assert self.cache.agent is not None
                self.cache.agent.refresh()
                stale = self._stale_read(rewritten, analysed, catalog, refreshed=True)
            if stale is None:
                return cursor, tags
            self._move_past(stale, last_chance=attempt == REWRITE_MOVES)
        raise AssertionError("unreachable: the last move past a change raises")

    def _run_with_checks(
        self,
        connection: Connection,
        cursor: _ResultCursor,
        statement: str,
        params: Params,
        *,
        single: bool,
        rewrite_check: bool,
        catalog_check: Statement | None,
    ) -> tuple[list[str], tuple[Any, ...] | None]:
        """Run ``statement``, then ``REWRITTEN`` (with ``rewrite_check``) and the catalog
        check (if any) — in one round trip (a pipeline) when it is a single statement
        (several go by the simple protocol, which a pipeline refuses). Returns the
        rewritten relations read (and otherwise records the verified ones) and the catalog
        check's row."""
        checks = rewrite_check or catalog_check is not None
        rewrite: psycopg.Cursor[Any] | None = None
        catalog: psycopg.Cursor[Any] | None = None
        with connection.pipeline() if single and checks else contextlib.nullcontext():
            cursor.run(statement, params)
            if rewrite_check:
                self.rewrite_checks += 1
                rewrite = connection.execute(REWRITTEN)
            if catalog_check is not None:
                catalog = connection.execute(*catalog_check)
        rewritten = self._rewritten(rewrite.fetchall()) if rewrite is not None else []
        return rewritten, catalog.fetchone() if catalog is not None else None

    def _move_past(self, stale: StaleRead, *, last_chance: bool) -> None:
        """The statement's result was dropped (``stale`` says why). Move the database
        transaction to a later snapshot where every query result read so far stays valid —
        a fresh pin (★) if no cached value was used yet, else (or failing that) the newest
        such pin of the set — or raise :class:`SnapshotUnavailable` (always on the unpinned
        fallback: no pin to move to)."""
        active, connection = self.snapshot, self._connection
        assert connection is not None
        fresh = self._fresh_pin() if not self.read_cache else None
        valid = self._results_valid_around(active, fresh) if active is not None else None
        lo, hi = self._later_window(stale, valid, last_chance=last_chance)
        for pin in self._later_candidates(fresh, lo, hi):
            if self._import(connection, pin):
                self._moved_past(stale, pin, hi)
                return
            if pin is not fresh:  # ★ is not in the set (a listed pin may share its ts)
                self.pin_set.discard(pin)
        raise stale.error()

    def _results_valid_around(self, active: Pin, fresh: Pin | None) -> tuple[int, int] | None:
        """The range of commit points at which every query result read so far is valid (a
        node's ``TXINTERVAL``, as for a move), waiting up to :data:`NODE_CATCH_UP` seconds
        for the node to apply the stream up to ``fresh``; ``None`` when it cannot be
        known."""
        if self._results_valid_anywhere():
            return 0, 2**63 - 1
        node: CacheNode | None = self._interval_node()
        if node is None:
            return None
        tags = self._sorted_query_tags()
        known = node.database_interval(active.ts, tags)
        deadline, delay = time.monotonic() + NODE_CATCH_UP, 0.001
        while self._node_behind(known, fresh) and time.monotonic() < deadline:
            time.sleep(delay)  # the node applies the stream within milliseconds
            delay = min(2 * delay, 0.05)
            known = node.database_interval(active.ts, tags)
        return None if known is None else (known.lo, known.hi)

    def _tags(self, statement: str, params: Params) -> tuple[frozenset[str] | None, Catalog | None]:
        """The statement's tags (``None`` if not derived) and the catalog reading they were
        derived from (for a bare query without tags, the current one: it is still
        checked for a schema change after the snapshot)."""
        assert self.snapshot is not None
        try:
            return self.cache.analyze(statement, params, self.snapshot.ts)
        except UncacheableQuery:
            if not self._may_run_untagged():
                raise
            return None, self.cache.catalog_reading()

    def _database(self) -> Connection:
        if self._closed:
            raise self._ended_error()
        if self._connection is not None:
            return self._connection
        connection: Connection = self.cache.checkout()
        try:
            self._check_connection(self.cache.connection_context(connection))
            if self.uncached or not self._begin_pinned(connection):
                self.database_snapshot = _begin_unpinned(connection)
        except BaseException:
            self._release(connection)
            raise
        self._note_session(connection)
        self._connection = connection
        return connection

    def _begin_pinned(self, connection: Connection) -> bool:
        """Start the database transaction on ``connection`` at the policy's choice of pin
        (or ★); ``False`` when the transaction falls back to an unpinned snapshot."""
        while True:
            choice = self._choose()
            if choice is None:
                choice = self._fresh_or_newest(self._fresh_pin())
                if choice is None:
                    return False
            if self._import(connection, choice):
                self._began_at(choice)
                return True
            if not self._import_refused(choice):
                return False

    def _fresh_pin(self) -> Pin | None:
        """★: a pin the agent takes now (``None`` without one), its ``not_before`` checked
        (:meth:`ReadOnlyCore._check_token`)."""
        fresh = self.cache.agent.pin_now() if self.cache.agent is not None else None
        if self._predates_token(fresh):
            self._check_token(self.cache.timestamp())
        return fresh

    def _import(self, connection: Connection, pin: Pin) -> bool:
        """Put ``connection`` in a read-only transaction at ``pin`` (ending the one it was
        in); ``False`` if the snapshot can no longer be imported, or if its id now names
        another snapshot (ids are reused after a PostgreSQL restart: the snapshot's
        contents, read in the same round trip, must equal the pin's)."""
        statement = self._import_sql(pin)
        try:
            if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                connection.execute("ROLLBACK")
            cursor = connection.execute(statement)
        except psycopg.Error as error:
            if error.sqlstate not in NO_SNAPSHOT:
                raise
            log.info("pin %s is gone (%s); choosing another", pin.ts, error)
            connection.execute("ROLLBACK")
            return False
        while cursor.nextset():  # past BEGIN and SET TRANSACTION SNAPSHOT
            pass
        row = cursor.fetchone()
        if self._imported(pin, None if row is None else row[0]):
            return True
        connection.execute("ROLLBACK")
        return False

    def _finish(self, *, committing: bool) -> None:
        # Nothing to commit: everything was read already, so a failure here (PostgreSQL
        # restarting) must not turn a finished read into an error.
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            self._release(connection)

    def _release(self, connection: Connection) -> None:
        try:
            status = connection.info.transaction_status
            if status == psycopg.pq.TransactionStatus.INERROR:
                connection.rollback()  # psycopg's own: it also forgets its prepared statements
            elif status != psycopg.pq.TransactionStatus.IDLE:
                connection.execute("ROLLBACK")
        except psycopg.Error:
            log.debug("rollback of a left snapshot failed", exc_info=True)
        self.cache.release(connection, reset=self.session_changed)

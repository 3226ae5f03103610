# Generated from python/txcache/aio/_transaction.py by tools/async_to_sync.py. Do not edit:
# change the source and run `make generate` (`make lint` fails if this file differs).
"""Transactions: the base both kinds share (a context manager, the thread or task it
belongs to, a pooled connection taken when first needed), the read/write one, and the
module-level ``query``, ``query_one`` and ``execute``.

It is generated from its async twin (``tools/async_to_sync.py``). A transaction belongs to the
thread or task that began it: a task created inside an async block inherits the
current-transaction variable (asyncio copies the context) but is refused when it uses the
transaction, and may begin one of its own. What both drivers share without I/O is in
:mod:`txcache._current` (the variable, parameter and row types) and :mod:`txcache._commit`
(the commit and its token).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast, overload

import psycopg
from psycopg.rows import RowFactory, tuple_row

from txcache._commit import COMMIT, CommitRecord, end_action, rolled_back_error
from txcache._current import Params, Row, Running, current
from txcache._cursor import WriteCursor
from txcache._session import SessionReset
from txcache._session_watch import SessionWatch
from txcache.errors import NoTransaction, TransactionError

if TYPE_CHECKING:
    from txcache._cache import CacheDriver

__all__ = ["ReadWriteTransaction", "Transaction", "execute", "query", "query_one"]

log = logging.getLogger("txcache")

R = TypeVar("R")
Connection = psycopg.Connection[Row]


def _require() -> Transaction:
    """The current transaction."""
    transaction = current.get()
    if transaction is None:
        raise NoTransaction(
            "no transaction: run queries inside a cache.read_only(...) or cache.read_write() block"
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


def _owner() -> object:
    """Who a transaction begun here belongs to: the running task (``None`` outside one: a
    thread, a plain callback), or the thread."""
    return threading.get_ident()


def _already_running(running: Running) -> TransactionError:
    """The error for a block begun inside ``running``: blocks do not nest."""
    kind = "read/write" if isinstance(running, CommitRecord) else "read-only"
    return TransactionError(
        f"a {kind} transaction is already running in this context (under a web framework's "
        "middleware, the request's), and transactions do not nest: do this work in that "
        "one, or outside it (a read/write view for writes, or one txcache does not wrap)"
    )


class Transaction:
    """What both kinds of transaction share: a context manager, a database connection
    taken from the cache's pool when first needed, and the task that began it (its state is
    not shared with another one, even through a copied context)."""

    def __init__(self, cache: CacheDriver) -> None:
        self.cache = cache
        self._connection: Connection | None = None
        self._token: contextvars.Token[Running | None] | None = None
        self.owner: object = None
        """The task that began it."""
        self.detached = False
        """Begun with :meth:`begin_detached`: its driver serializes its use, from any
        task."""

    def __enter__(self) -> Self:
        self._claim()
        self._token = current.set(self)
        try:
            self._begin()
        except BaseException:
            current.reset(self._token)
            self._token = None
            raise
        return self

    def _claim(self) -> None:
        """Refuse a second transaction in this context; this task owns the new one."""
        running = current.get()
        if running is not None:
            raise _already_running(running)
        self.owner = _owner()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        try:
            if token is not None:
                current.reset(token)
        finally:
            self._finish(committing=exc_type is None)

    def begin_detached(self) -> Self:
        """Begin the transaction without making it the current one of the task: for a
        driver that holds it itself, serializes its use and ends it with
        :meth:`end_detached` (the connections of :mod:`txcache.sqlalchemy`, whose sessions
        may move between threads, and flush or close in tasks of their own). Nothing else
        can reach it — ``txcache.query`` and cacheable calls do not see it — so it is not
        bound to a task."""
        self.owner = _owner()
        self.detached = True
        self._begin()
        return self

    def end_detached(self, *, commit: bool) -> None:
        """End a transaction begun with :meth:`begin_detached`, as leaving its block would:
        commit (``commit``) or roll back."""
        self._finish(committing=commit)

    def check_owner(self) -> None:
        """Refuse use from a task other than the one that began the transaction (unless
        it was begun detached)."""
        if self.detached:
            return
        owner = _owner()
        if owner is not None and owner == self.owner:
            return
        raise TransactionError(
            "a transaction belongs to the thread that began it; begin one per thread"
        )

    def execute(
        self,
        statement: str,
        params: Params = None,
        *,
        row_factory: RowFactory[Any] | None = None,
    ) -> psycopg.Cursor[Any]:
        """Run ``statement``; the cursor (rows not fetched), its rows made by
        ``row_factory`` (tuples by default; docs/library.md, "Rows"). The owner is checked
        before anything else."""
        self.check_owner()
        return self._execute(statement, params, row_factory)

    def query(
        self,
        statement: str,
        params: Params = None,
        *,
        row_factory: RowFactory[Any] | None = None,
    ) -> list[Any]:
        """Every row of ``statement``."""
        self.check_owner()
        return self._query(statement, params, row_factory)

    def query_one(
        self,
        statement: str,
        params: Params = None,
        *,
        row_factory: RowFactory[Any] | None = None,
    ) -> Any:
        """The first row of ``statement``, or ``None``."""
        self.check_owner()
        return self._query_one(statement, params, row_factory)

    def _query(
        self, statement: str, params: Params, row_factory: RowFactory[Any] | None
    ) -> list[Any]:
        cursor = self._execute(statement, params, row_factory)
        return cursor.fetchall()

    def _query_one(
        self, statement: str, params: Params, row_factory: RowFactory[Any] | None
    ) -> Any:
        cursor = self._execute(statement, params, row_factory)
        return cursor.fetchone()

    def _execute(
        self, statement: str, params: Params, row_factory: RowFactory[Any] | None
    ) -> psycopg.Cursor[Any]:
        raise NotImplementedError

    def _begin(self) -> None:
        """Whatever must happen on entering the block (nothing, by default)."""

    def _finish(self, *, committing: bool) -> None:
        raise NotImplementedError


class ReadWriteTransaction(CommitRecord, Transaction):
    """Straight to PostgreSQL, no cache. After the commit, :attr:`commit_timestamp` is the
    token a read-only transaction passes as ``not_before`` to see its writes (read-only
    transactions of the same thread or task created later see them without it). Its
    connection goes back to the pool reset (:meth:`txcache.Cache.release`). A block
    interrupted while it commits may or may not have committed, as when a connection is
    lost during ``COMMIT``: ``commit_timestamp`` then raises."""

    def __init__(self, cache: CacheDriver, isolation: str | None = None) -> None:
        Transaction.__init__(self, cache)
        CommitRecord.__init__(self)
        self._isolation = isolation
        self._session: SessionWatch | None = None

    def _begin(self) -> None:
        connection: Connection = self.cache.checkout()
        isolation = f" ISOLATION LEVEL {self._isolation}" if self._isolation else ""
        try:
            connection.execute(f"BEGIN{isolation}")
        except BaseException:
            self.cache.release(connection)
            raise
        self._connection = connection
        self._session = SessionWatch(connection)

    def _cursor(self, row_factory: RowFactory[Any] | None) -> WriteCursor[Any]:
        """A cursor of the block's connection, watched by its session watch."""
        if self._connection is None:
            raise TransactionError("this read/write transaction has ended")
        assert self._session is not None
        cursor: WriteCursor[Any] = WriteCursor(
            self._connection, row_factory=row_factory or tuple_row
        )
        cursor.session = self._session
        return cursor

    def _execute(
        self, statement: str, params: Params, row_factory: RowFactory[Any] | None
    ) -> psycopg.Cursor[Any]:
        return self._cursor(row_factory).execute(statement, params)

    def executemany(
        self, statement: str, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> psycopg.Cursor[Row]:
        """Run ``statement`` once per parameter set (psycopg's ``executemany``: one
        pipeline); returns the cursor. A DBAPI's ``executemany``, which SQLAlchemy's bulk
        writes call (:mod:`txcache.sqlalchemy`). The owner is checked before anything
        else."""
        self.check_owner()
        return self._executemany(statement, params_seq)

    def _executemany(
        self, statement: str, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> psycopg.Cursor[Row]:
        cursor: WriteCursor[Row] = self._cursor(None)
        cursor.executemany(statement, params_seq)
        return cursor

    def _finish(self, *, committing: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        session, self._session = self._session, None
        try:
            self._end(connection, committing=committing)
        finally:
            # The block ran the application's SQL: a SET, a temporary table, a lock it left
            # must not change what the connection's next transactions compute.
            reset = SessionReset.FULL
            if session is not None:
                session.ran(connection)  # a deferred trigger may have run SET
                reset = session.reset
            self.cache.release(connection, reset=reset)

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
        """``COMMIT``: fire deferred triggers, read the transaction id, commit, read the WAL
        position after it (:data:`~txcache._commit.COMMIT`)."""
        cursor = connection.execute(COMMIT)
        cursor.nextset()  # past SET CONSTRAINTS, to the SELECT
        row = cursor.fetchone()
        cursor.nextset()  # to COMMIT
        cursor.nextset()  # to the WAL position
        self._record_commit(row, cursor.fetchone())

    @property
    def commit_timestamp(self) -> int | None:
        """The commit LSN of this transaction (``None`` if it wrote nothing): pass it
        as ``not_before``. Asks the agent, which answers once its stream decoded the
        commit; if the agent cannot answer — or the stream decodes no commit of it (it
        only locked rows), or the commit itself may have written without the
        transaction id being known before (a held cursor ran to its end) — the WAL
        position read right after the commit stands in (just as safe, possibly newer
        than needed)."""
        return self._ask_commit_timestamp()

    def settled_timestamp(self) -> int | None:
        """:attr:`commit_timestamp` (:class:`~txcache._commit.CommitRecord`)."""
        return self.commit_timestamp

    async def settled_timestamp_async(self) -> int | None:
        """:attr:`commit_timestamp`, asked in a worker thread (it may wait on the
        agent)."""
        return await asyncio.to_thread(lambda: self.commit_timestamp)

    def _ask_commit_timestamp(self) -> int | None:
        if self._timestamp_to_ask():
            lsn = None
            if self.xid is not None and self.cache.agent is not None:
                lsn = self.cache.agent.commit_lsn(self.xid, timeout=1.0, upto=self._after)
            self._timestamp = lsn if lsn is not None else self._after_commit()
        return self._timestamp

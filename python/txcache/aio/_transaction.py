"""Async transactions: the base both kinds share (``async with``, the current-transaction
variable, the owning task), the read/write one, and the typed module-level ``query``,
``query_one`` and ``execute``.

A transaction lives in the same context variable as the sync ones, so ``txcache.query``
finds it: its ``execute``, ``query`` and ``query_one`` return awaitables, and ``await
txcache.query(...)`` works; :func:`query` here says so in its type. It belongs to the task
that began it: a task created inside the block inherits the variable (asyncio copies the
context) but is refused when it uses the transaction, and may begin one of its own.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

import psycopg
from psycopg.rows import AsyncRowFactory, tuple_row

from txcache._transaction import (
    COMMIT,
    CommitRecord,
    Params,
    Row,
    Transaction,
    _current,
    end_action,
    rolled_back_error,
)
from txcache.errors import NoTransaction, TransactionError

if TYPE_CHECKING:
    from txcache.aio._connect import AsyncCache

__all__ = ["AsyncReadWriteTransaction", "AsyncTransaction", "execute", "query", "query_one"]

log = logging.getLogger("txcache")

R = TypeVar("R")
AsyncConnection = psycopg.AsyncConnection[Any]
Rows = AsyncRowFactory[Any] | None
"""A psycopg row factory for a statement's rows; ``None``: tuples."""


def _require() -> AsyncTransaction:
    transaction = _current.get()
    if transaction is None:
        raise NoTransaction(
            "no transaction: run queries inside `async with cache.read_only(...)` or "
            "`async with cache.read_write()`"
        )
    if not isinstance(transaction, AsyncTransaction):
        raise TransactionError(
            "txcache.aio's query functions run in an async transaction; this one is sync "
            "(use txcache.query)"
        )
    return transaction


@overload
async def execute(
    statement: str, params: Params = None, *, row_factory: None = None
) -> psycopg.AsyncCursor[Row]: ...
@overload
async def execute(
    statement: str, params: Params = None, *, row_factory: AsyncRowFactory[R]
) -> psycopg.AsyncCursor[R]: ...
async def execute(
    statement: str, params: Params = None, *, row_factory: AsyncRowFactory[Any] | None = None
) -> psycopg.AsyncCursor[Any]:
    """Run ``statement`` in the current async transaction; returns the cursor (``await
    cursor.fetchall()``)."""
    return await _require().execute(statement, params, row_factory=row_factory)


@overload
async def query(
    statement: str, params: Params = None, *, row_factory: None = None
) -> list[Row]: ...
@overload
async def query(
    statement: str, params: Params = None, *, row_factory: AsyncRowFactory[R]
) -> list[R]: ...
async def query(
    statement: str, params: Params = None, *, row_factory: AsyncRowFactory[Any] | None = None
) -> list[Any]:
    """Every row of ``statement``, run in the current async transaction."""
    return await _require().query(statement, params, row_factory=row_factory)


@overload
async def query_one(
    statement: str, params: Params = None, *, row_factory: None = None
) -> Row | None: ...
@overload
async def query_one(
    statement: str, params: Params = None, *, row_factory: AsyncRowFactory[R]
) -> R | None: ...
async def query_one(
    statement: str, params: Params = None, *, row_factory: AsyncRowFactory[Any] | None = None
) -> Any:
    """The first row of ``statement`` (or ``None``), run in the current async
    transaction."""
    return await _require().query_one(statement, params, row_factory=row_factory)


class AsyncTransaction:
    """What both kinds of async transaction share: an async context manager, a database
    connection taken from the cache's pool when first needed, and the task it belongs to."""

    def __init__(self, cache: AsyncCache) -> None:
        self.cache = cache
        self._connection: AsyncConnection | None = None
        self._token: contextvars.Token[Transaction | AsyncTransaction | None] | None = None
        self.owner: asyncio.Task[Any] | None = None
        """The task that began it."""
        self.detached = False
        """Begun with :meth:`begin_detached`: its driver serializes its use, from any
        task."""

    async def __aenter__(self) -> Self:
        running = _current.get()
        # One inherited from another task is not this task's: it may begin its own.
        if running is not None and (
            not isinstance(running, AsyncTransaction) or running.owner is _task()
        ):
            raise TransactionError("a transaction is already running in this context")
        self.owner = _task()
        self._token = _current.set(self)
        try:
            await self._begin()
        except BaseException:
            _current.reset(self._token)
            self._token = None
            raise
        return self

    async def __aexit__(
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
            await self._finish(committing=exc_type is None)

    async def begin_detached(self) -> Self:
        """Begin the transaction without making it the current one of the task: for a
        driver that holds it itself, serializes its use and ends it with
        :meth:`end_detached` (:meth:`txcache.Transaction.begin_detached`; SQLAlchemy 2.1
        flushes and closes sessions in tasks of its own). It is not bound to a task."""
        self.owner = _task()
        self.detached = True
        await self._begin()
        return self

    async def end_detached(self, *, commit: bool) -> None:
        """End a transaction begun with :meth:`begin_detached`: commit (``commit``) or
        roll back, from any task."""
        await self._finish(committing=commit)

    def check_owner(self) -> None:
        """Refuse use from a task (or thread) other than the one that began the
        transaction."""
        if self.detached:
            return
        task = _task()
        if task is None or task is not self.owner:
            raise TransactionError(
                "an async transaction belongs to the task that began it: a task created "
                "inside the block (asyncio.gather, create_task, TaskGroup) or a thread "
                "inherits it but cannot use it; begin one transaction per task"
            )

    def execute(
        self,
        statement: str,
        params: Params = None,
        *,
        row_factory: AsyncRowFactory[Any] | None = None,
    ) -> Coroutine[Any, Any, psycopg.AsyncCursor[Any]]:
        """Run ``statement`` (await it); the cursor, its rows made by ``row_factory``
        (tuples by default). The owner is checked before anything is awaited."""
        self.check_owner()
        return self._execute(statement, params, row_factory)

    def query(
        self,
        statement: str,
        params: Params = None,
        *,
        row_factory: AsyncRowFactory[Any] | None = None,
    ) -> Coroutine[Any, Any, list[Any]]:
        """Every row of ``statement`` (await it)."""
        self.check_owner()
        return self._query(statement, params, row_factory)

    def query_one(
        self,
        statement: str,
        params: Params = None,
        *,
        row_factory: AsyncRowFactory[Any] | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """The first row of ``statement``, or ``None`` (await it)."""
        self.check_owner()
        return self._query_one(statement, params, row_factory)

    async def _query(
        self, statement: str, params: Params, row_factory: AsyncRowFactory[Any] | None
    ) -> list[Any]:
        cursor = await self._execute(statement, params, row_factory)
        return await cursor.fetchall()

    async def _query_one(
        self, statement: str, params: Params, row_factory: AsyncRowFactory[Any] | None
    ) -> Any:
        cursor = await self._execute(statement, params, row_factory)
        return await cursor.fetchone()

    async def _execute(
        self, statement: str, params: Params, row_factory: AsyncRowFactory[Any] | None
    ) -> psycopg.AsyncCursor[Any]:
        raise NotImplementedError

    async def _begin(self) -> None:
        """Whatever must happen on entering the block (nothing, by default)."""

    async def _finish(self, *, committing: bool) -> None:
        raise NotImplementedError


def _task() -> asyncio.Task[Any] | None:
    """The running task; ``None`` outside one (a thread, a plain callback)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        return None


class AsyncReadWriteTransaction(CommitRecord, AsyncTransaction):
    """Straight to PostgreSQL, no cache (:class:`txcache.ReadWriteTransaction`, async).
    After the block, ``await tx.commit_timestamp()`` is the ``not_before`` token. A block
    cancelled while it commits may or may not have committed, as when a connection is lost
    during ``COMMIT``: ``commit_timestamp()`` then raises."""

    def __init__(self, cache: AsyncCache, isolation: str | None = None) -> None:
        AsyncTransaction.__init__(self, cache)
        CommitRecord.__init__(self)
        self._isolation = isolation

    async def _begin(self) -> None:
        connection = await self.cache.checkout()
        isolation = f" ISOLATION LEVEL {self._isolation}" if self._isolation else ""
        try:
            await connection.execute(f"BEGIN{isolation}")
        except BaseException:
            await self.cache.release(connection)
            raise
        self._connection = connection

    async def _execute(
        self, statement: str, params: Params, row_factory: AsyncRowFactory[Any] | None
    ) -> psycopg.AsyncCursor[Any]:
        if self._connection is None:
            raise TransactionError("this read/write transaction has ended")
        cursor = self._connection.cursor(row_factory=row_factory or tuple_row)
        return await cursor.execute(statement, params)

    def executemany(
        self, statement: str, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> Coroutine[Any, Any, psycopg.AsyncCursor[Row]]:
        """Run ``statement`` once per parameter set (await it):
        :meth:`txcache.ReadWriteTransaction.executemany`, async. The owner is checked before
        anything is awaited."""
        self.check_owner()
        return self._executemany(statement, params_seq)

    async def _executemany(
        self, statement: str, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> psycopg.AsyncCursor[Row]:
        if self._connection is None:
            raise TransactionError("this read/write transaction has ended")
        cursor = self._connection.cursor()
        await cursor.executemany(statement, params_seq)
        return cursor

    async def _finish(self, *, committing: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            await self._end(connection, committing=committing)
        finally:
            # The block ran the application's SQL: its session is reset before the
            # connection is shared again (txcache.Cache.release).
            await self.cache.release(connection, reset=True)

    async def _end(self, connection: AsyncConnection, *, committing: bool) -> None:
        """Commit (or roll back) the database transaction."""
        try:
            action = end_action(connection.info.transaction_status, committing=committing)
            if action == "commit":
                cursor = await connection.execute(COMMIT)
                cursor.nextset()  # past SET CONSTRAINTS, to the SELECT
                row = await cursor.fetchone()
                cursor.nextset()  # to COMMIT
                cursor.nextset()  # to the WAL position
                self._record_commit(row, await cursor.fetchone())
            elif action == "rollback":
                await connection.execute("ROLLBACK")
                if committing:  # the block caught a failed statement and went on
                    raise rolled_back_error()
        except psycopg.Error:
            if committing:
                raise
            log.debug("rollback failed after an error", exc_info=True)  # keep the user's error

    def settled_timestamp(self) -> int | None:
        """The commit timestamp if already asked (a sync reader cannot await the agent)."""
        return self._timestamp

    async def settled_timestamp_async(self) -> int | None:
        """:meth:`commit_timestamp`."""
        return await self.commit_timestamp()

    async def commit_timestamp(self) -> int | None:
        """The commit LSN of this transaction (``None`` if it wrote nothing): pass it as
        ``not_before``. As :attr:`txcache.ReadWriteTransaction.commit_timestamp` (a
        method here: it may ask the agent)."""
        if self._timestamp_to_ask():
            lsn = None
            if self.xid is not None and self.cache.agent is not None:
                lsn = await self.cache.agent.commit_lsn(self.xid, timeout=1.0, upto=self._after)
            self._timestamp = lsn if lsn is not None else self._after_commit()
        return self._timestamp

"""The DBAPI connection SQLAlchemy's psycopg dialect drives: every statement goes through a
txcache transaction's ``execute``, so a read-only one checks it, tags it and runs it at the
pinned snapshot exactly as ``txcache.query`` would (one source of truth for the checks).

A :class:`TxcacheConnection` is made per pool checkout (the engine's pool is a
``NullPool``: the facade is cheap, and holds no database connection of its own). Which
txcache transaction its statements run in is decided at the first statement of each
SQLAlchemy transaction, not at checkout, so a connection taken early still follows the
blocks it is used in:

- inside a read-only block: that transaction. ``commit()`` and ``rollback()`` change
  nothing in the database (it wrote nothing; the block ends the database transaction);
- inside a read/write block: that transaction, under a savepoint, as SQLAlchemy's
  ``join_transaction_mode="create_savepoint"`` does — ``commit()`` releases it, and
  ``rollback()`` undoes the session's work and leaves the block's; the block commits;
- outside any block: a read/write transaction of its own (``cache.read_write()``, begun
  detached: it is the connection's, not the current transaction of the thread or task —
  SQLAlchemy 2.1 closes an ``AsyncSession`` in a task of its own, where a context
  variable set by the session's task could not be reset), committed by ``commit()`` —
  the committed transaction, which knows the ``not_before`` token, is handed to the
  SQLAlchemy session that used the connection (``session.info``).

While SQLAlchemy's ``connect`` event runs (the dialect's one-time initialisation:
``select pg_catalog.version()``, ``show standard_conforming_strings``, …) statements go to
a plain autocommit connection of the cache's pool instead: they are the dialect's, not the
application's, and must neither be refused by nor leave untagged reads in a read-only
transaction.

The async facade is the same class driven through SQLAlchemy's greenlet bridge
(``await_only``): SQLAlchemy's asyncio engine runs the dialect's sync code in a greenlet
inside the calling task, whose context variables it shares — so the current txcache
transaction, and the task that owns it, are the caller's.
"""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy.util import await_only

from txcache._transaction import Params, ReadWriteTransaction, Transaction, current_transaction
from txcache.aio._transaction import AsyncReadWriteTransaction, AsyncTransaction
from txcache.errors import TransactionError

if TYPE_CHECKING:
    from txcache._connect import Cache
    from txcache.aio._connect import AsyncCache

__all__ = [
    "COMMITTED",
    "AsyncTxcacheConnection",
    "TxcacheConnection",
    "TxcacheCursor",
    "joined_commit_error",
]

log = logging.getLogger("txcache")

COMMITTED = "txcache_transaction"
"""The key of ``session.info`` under which a session's last own read/write transaction is
kept once committed (its ``commit_timestamp`` is the token); :data:`JOINED` when its last
commit only released a savepoint of a read/write block."""

JOINED = "joined"
"""``session.info[COMMITTED]`` after a commit inside a read/write block: the block's
commit, not the session's, is the one a token names."""

_savepoints = itertools.count(1)

T = TypeVar("T", bound="Transaction | AsyncTransaction")


def joined_commit_error() -> TransactionError:
    """What ``commit_timestamp`` raises for a session whose last commit was inside a
    read/write block."""
    return TransactionError(
        "this session's last commit was inside a `cache.read_write()` block, which commits "
        "it: the block's commit_timestamp is the token"
    )


class _Info:
    """What ``connection.info`` tells SQLAlchemy: only the transaction status is read (by
    the dialect's isolation-level probe during its initialisation)."""

    def __init__(self, status: TransactionStatus) -> None:
        self.transaction_status = status


class _Results:
    """A statement's results held in memory (the dialect's initialisation statements, and
    every result of the async facade: SQLAlchemy's result objects are not async)."""

    def __init__(self, description: Any, rows: list[Any], rowcount: int) -> None:
        self.description = description
        self.rowcount = rowcount
        self._rows = collections.deque(rows)

    def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int = 1) -> list[Any]:
        return [self._rows.popleft() for _ in range(min(size, len(self._rows)))]

    def fetchall(self) -> list[Any]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    def close(self) -> None:
        self._rows.clear()


class TxcacheCursor:
    """A DBAPI cursor over :class:`TxcacheConnection`: ``execute`` runs the statement in the
    connection's txcache transaction and keeps the cursor (or results) it returns."""

    arraysize = 1
    lastrowid = None

    def __init__(self, connection: _Facade[Any]) -> None:
        self._connection = connection
        self._results: Any = None

    @property
    def description(self) -> Any:
        """The result's columns (``None`` for a statement without rows)."""
        return None if self._results is None else self._results.description

    @property
    def rowcount(self) -> int:
        """The rows the last statement returned or changed (``-1`` before one ran)."""
        return -1 if self._results is None else int(self._results.rowcount)

    def execute(self, operation: str, parameters: Params = None) -> TxcacheCursor:
        """Run ``operation`` in the connection's txcache transaction."""
        self._results = self._connection.run(operation, parameters)
        return self

    def executemany(
        self, operation: str, seq_of_parameters: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> None:
        """Run ``operation`` once per parameter set."""
        self._results = self._connection.run_many(operation, seq_of_parameters)

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        return self._require().fetchone()

    def fetchmany(self, size: int | None = None) -> list[Any]:
        """The next ``size`` rows (``arraysize`` by default)."""
        rows: list[Any] = self._require().fetchmany(self.arraysize if size is None else size)
        return rows

    def fetchall(self) -> list[Any]:
        """Every row left."""
        rows: list[Any] = self._require().fetchall()
        return rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchone, None)

    def close(self) -> None:
        """Drop the results."""
        results, self._results = self._results, None
        if results is not None:
            results.close()

    async def _async_soft_close(self) -> None:
        """Nothing to do: SQLAlchemy's asyncio results call this to close a driver cursor
        early, and the async facade's results are already in memory."""

    def setinputsizes(self, sizes: Sequence[Any]) -> None:
        """Ignored (DBAPI)."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """Ignored (DBAPI)."""

    def nextset(self) -> NoReturn:
        """Not supported: one statement's results at a time."""
        raise psycopg.NotSupportedError("nextset() is not supported by txcache's DBAPI facade")

    def _require(self) -> Any:
        if self._results is None:
            raise psycopg.ProgrammingError("no results: execute a statement first")
        return self._results


class _Facade(Generic[T]):
    """What the sync and the async facade share; ``T`` is the kind of txcache transaction
    their statements run in. Subclasses say how a transaction is entered, left and asked
    (directly, or awaited through SQLAlchemy's greenlet bridge)."""

    _kind: type[Transaction] | type[AsyncTransaction]
    _other_kind_error: str

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.connecting = True
        """While SQLAlchemy's ``connect`` event runs: statements go to a plain connection
        (the module docstring)."""
        self.closed = False
        self.broken = False
        self.session_info: MutableMapping[str, Any] | None = None
        """The ``info`` of the session that began its transaction on this connection, where
        an own read/write transaction is handed once committed."""
        self._isolation: str | None = None
        self._joined: T | None = None
        self._owned: T | None = None
        self._savepoint: str | None = None

    # -- the DBAPI connection ---------------------------------------------------------------

    @property
    def autocommit(self) -> bool:
        """Always ``False``: statements run in transactions (txcache's)."""
        return False

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self.set_autocommit(value)

    def set_autocommit(self, value: bool) -> None:
        """Refuses ``True``: every statement runs in a txcache transaction."""
        if value:
            raise TransactionError(
                "txcache's SQLAlchemy connections run every statement in a txcache "
                "transaction: the AUTOCOMMIT isolation level is not supported"
            )

    @property
    def isolation_level(self) -> str | None:
        """The isolation level of the connection's own read/write transactions."""
        return self._isolation

    @isolation_level.setter
    def isolation_level(self, value: Any) -> None:
        self.set_isolation_level(value)

    def set_isolation_level(self, value: Any) -> None:
        """The isolation level (psycopg's ``IsolationLevel``, or ``None``: the database's)
        of the read/write transactions this connection begins itself. Inside a block the
        block's applies (``cache.read_write(isolation=...)``): this one is not used."""
        self._isolation = None if value is None else str(value.name).replace("_", " ")

    @property
    def read_only(self) -> bool:
        """Always ``False``: a read-only transaction is ``cache.read_only()``."""
        return False

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self.set_read_only(value)

    def set_read_only(self, value: bool) -> None:
        """Refuses ``True``: read in a ``cache.read_only()`` block instead."""
        if value:
            raise TransactionError(
                "postgresql_readonly is not supported: run the session inside "
                "`cache.read_only()`, which reads at a pinned snapshot through the cache"
            )

    @property
    def deferrable(self) -> bool:
        """Always ``False``."""
        return False

    @deferrable.setter
    def deferrable(self, value: bool) -> None:
        self.set_deferrable(value)

    def set_deferrable(self, value: bool) -> None:
        """Refuses ``True`` (as :meth:`set_read_only`)."""
        self.set_read_only(value)

    @property
    def info(self) -> _Info:
        """The transaction status, as far as SQLAlchemy asks it."""
        bound = self._owned is not None or self._joined is not None
        return _Info(TransactionStatus.INTRANS if bound else TransactionStatus.IDLE)

    def add_notice_handler(self, handler: Any) -> None:
        """Ignored: the pooled connections are shared, and handlers would pile up on them."""

    def cursor(self, name: str | None = None, *args: Any, **kwargs: Any) -> TxcacheCursor:
        """A cursor. A name (``stream_results``, ``yield_per``) is accepted and ignored: the
        results are fetched whole, since a server-side cursor's ``DECLARE`` would be a
        statement outside the checks."""
        if self.closed:
            raise psycopg.InterfaceError("the connection is closed")
        return TxcacheCursor(self)

    def commit(self) -> None:
        """End the SQLAlchemy transaction: commit an own read/write transaction, release a
        block's savepoint, nothing in a read-only block."""
        owned, joined, savepoint = self._unbind()
        if owned is not None:
            self._exit(owned, committing=True)  # raises if the commit failed
            if self.session_info is not None:
                self.session_info[COMMITTED] = owned
        elif joined is not None and savepoint is not None:
            self._on_savepoint(joined, f"RELEASE SAVEPOINT {savepoint}")
            if self.session_info is not None:
                self.session_info[COMMITTED] = JOINED

    def rollback(self) -> None:
        """End the SQLAlchemy transaction undoing its work: roll back an own read/write
        transaction, roll back to a block's savepoint, nothing in a read-only block."""
        owned, joined, savepoint = self._unbind()
        if owned is not None:
            self._exit(owned, committing=False)
        elif joined is not None and savepoint is not None:
            statement = f"ROLLBACK TO SAVEPOINT {savepoint}; RELEASE SAVEPOINT {savepoint}"
            try:
                self._on_savepoint(joined, statement)
            except TransactionError:
                # The block ended first (it committed or rolled back without the session):
                # there is nothing left to undo here.
                log.debug("the read/write block ended before the session", exc_info=True)

    def close(self) -> None:
        """Roll back what is still open, then refuse further use."""
        if not self.closed:
            try:
                self.rollback()
            finally:
                self.closed = True

    def terminate(self) -> None:
        """As :meth:`close` (SQLAlchemy's asyncio pool terminates connections it cannot
        reset)."""
        self.close()

    # -- statements -------------------------------------------------------------------------

    def run(self, operation: str, parameters: Params) -> Any:
        """Run one statement; its cursor (or results)."""
        if self.connecting:
            return self._run_plain(operation, parameters)
        transaction = self._transaction()
        return self._results(transaction.execute(operation, parameters))

    def run_many(
        self, operation: str, seq_of_parameters: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> Any:
        """Run ``operation`` once per parameter set: one pipeline in a read/write
        transaction; one by one, each checked, in a read-only one."""
        transaction = self._transaction()
        if isinstance(transaction, ReadWriteTransaction | AsyncReadWriteTransaction):
            return self._results(transaction.executemany(operation, seq_of_parameters))
        results = None
        for parameters in seq_of_parameters:
            results = self._results(transaction.execute(operation, parameters))
        return results

    def _transaction(self) -> T:
        """The txcache transaction of this SQLAlchemy transaction, bound at its first
        statement (the module docstring)."""
        if self.closed:
            raise psycopg.InterfaceError("the connection is closed")
        if self._owned is not None:
            return self._owned
        if self._joined is not None:
            return self._joined
        current = current_transaction()
        if current is None:
            owned: T = self._begin_own()
            self._owned = owned
            return owned
        if not isinstance(current, self._kind):
            raise TransactionError(self._other_kind_error)
        if current.cache is not self.cache:
            raise TransactionError(
                "the current transaction belongs to another cache than this engine's "
                "(txcache.sqlalchemy.create_engine(cache))"
            )
        joined: T = current  # type: ignore[assignment]  # checked against _kind above
        if isinstance(joined, ReadWriteTransaction | AsyncReadWriteTransaction):
            savepoint = f"txcache_sqlalchemy_{next(_savepoints)}"
            self._wait(joined.execute(f"SAVEPOINT {savepoint}"))
            self._savepoint = savepoint
        self._joined = joined
        return joined

    def _unbind(self) -> tuple[T | None, T | None, str | None]:
        bound = self._owned, self._joined, self._savepoint
        self._owned = self._joined = None
        self._savepoint = None
        return bound

    # -- what the sync and async facades do differently -------------------------------------

    def _begin_own(self) -> T:
        raise NotImplementedError

    def _exit(self, transaction: T, *, committing: bool) -> None:
        raise NotImplementedError

    def _on_savepoint(self, joined: T, statement: str) -> None:
        raise NotImplementedError

    def _wait(self, value: Any) -> Any:
        raise NotImplementedError

    def _results(self, cursor: Any) -> Any:
        raise NotImplementedError

    def _run_plain(self, operation: str, parameters: Params) -> _Results:
        raise NotImplementedError


class TxcacheConnection(_Facade[Transaction]):
    """The DBAPI connection of :func:`txcache.sqlalchemy.create_engine`'s engine."""

    _kind = Transaction
    _other_kind_error = (
        "this is a sync engine (txcache.sqlalchemy.create_engine) and the current "
        "transaction is async: use create_async_engine and an AsyncSession in it"
    )
    cache: Cache

    def _begin_own(self) -> Transaction:
        return self.cache.read_write(isolation=self._isolation).begin_detached()

    def _exit(self, transaction: Transaction, *, committing: bool) -> None:
        transaction.end_detached(commit=committing)

    def _on_savepoint(self, joined: Transaction, statement: str) -> None:
        joined.execute(statement)

    def _wait(self, value: Any) -> Any:
        return value

    def _results(self, cursor: Any) -> Any:
        return cursor

    def _run_plain(self, operation: str, parameters: Params) -> _Results:
        with self.cache.pool.connection() as connection:
            cursor = connection.execute(operation, parameters)
            rows = cursor.fetchall() if cursor.description is not None else []
            return _Results(cursor.description, rows, cursor.rowcount)


class AsyncTxcacheConnection(_Facade[AsyncTransaction]):
    """The DBAPI connection of :func:`txcache.sqlalchemy.create_async_engine`'s engine:
    :class:`TxcacheConnection`'s behaviour, each round trip awaited through SQLAlchemy's
    greenlet bridge in the calling task."""

    _kind = AsyncTransaction
    _other_kind_error = (
        "this is an async engine (txcache.sqlalchemy.create_async_engine) and the current "
        "transaction is sync: use create_engine and a Session in it"
    )
    cache: AsyncCache

    def _begin_own(self) -> AsyncTransaction:
        transaction = self.cache.read_write(isolation=self._isolation)
        return await_only(transaction.begin_detached())

    def _exit(self, transaction: AsyncTransaction, *, committing: bool) -> None:
        await_only(transaction.end_detached(commit=committing))

    def _on_savepoint(self, joined: AsyncTransaction, statement: str) -> None:
        # Past the task check: SQLAlchemy 2.1 commits (`async with sessionmaker.begin()`)
        # and closes (rolling back what was not committed) sessions in a task of its own,
        # which the block's task waits for — the block's transaction is not used by two
        # tasks at once. The session's statements themselves are checked.
        await_only(joined._execute(statement, None, None))

    def _wait(self, value: Any) -> Any:
        return await_only(value)

    def _results(self, cursor: Any) -> _Results:
        # SQLAlchemy's results are read synchronously: fetch them all now, as its own
        # asyncio adapters do.
        cursor = await_only(cursor)
        rows = await_only(cursor.fetchall()) if cursor.description is not None else []
        return _Results(cursor.description, rows, cursor.rowcount)

    def _run_plain(self, operation: str, parameters: Params) -> _Results:
        return await_only(self._plain(operation, parameters))

    async def _plain(self, operation: str, parameters: Params) -> _Results:
        async with self.cache.pool.connection() as connection:
            cursor = await connection.execute(operation, parameters)
            rows = await cursor.fetchall() if cursor.description is not None else []
            return _Results(cursor.description, rows, cursor.rowcount)

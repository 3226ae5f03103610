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
  SQLAlchemy session and the Core connection that used the facade
  (:mod:`txcache.sqlalchemy._commits`), if it wrote. Until it ends, a statement it gets
  while a txcache block is current is refused: it would run outside the block's snapshot,
  and a cacheable function would cache what it read.

While SQLAlchemy's ``connect`` event runs (the dialect's one-time initialisation:
``select pg_catalog.version()``, ``show standard_conforming_strings``, …) statements go to
a plain autocommit connection of the cache's pool instead: they are the dialect's, not the
application's, and must neither be refused by nor leave untagged reads in a read-only
transaction. The database's hstore type is read there too, once per engine, as the stock
dialect reads it (:mod:`txcache.sqlalchemy._hstore`).

The sync and the async facade (:mod:`txcache.sqlalchemy._drivers`) are one class, the
async one driven through SQLAlchemy's greenlet bridge (``await_only``): SQLAlchemy's
asyncio engine runs the dialect's sync code in a greenlet inside the calling task, whose
context variables it shares — so the current txcache transaction, and the task that owns
it, are the caller's.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from txcache import ReadWriteTransaction, Transaction, current_transaction
from txcache.aio import AsyncReadWriteTransaction, AsyncTransaction
from txcache.errors import StatementNotAllowed, TransactionError
from txcache.integration import Params, leaves_session_alone
from txcache.sqlalchemy._commits import COMMITTED, JOINED
from txcache.sqlalchemy._cursor import Info, Results, TxcacheCursor
from txcache.sqlalchemy._hstore import Hstore

__all__ = ["EngineTypes", "Facade"]

log = logging.getLogger("txcache")

_savepoints = itertools.count(1)

_CONNECT_EVENT_SETTING = (
    "{!r} in SQLAlchemy's connect event: this engine's connections are the cache's pooled "
    "ones, shared by every user of the cache, so a change to the session made here would "
    "not apply to this connection's statements and could reach others'; set it for the "
    "cache instead: in its DSN (options='-c name=value') or on its role (ALTER ROLE … SET), "
    "one cache per tenant"
)

_OWN_TRANSACTION_IN_BLOCK = (
    "this SQLAlchemy session or connection began its transaction outside the txcache "
    "transaction now running, and has not ended it: its statements would run in that other "
    "database transaction, outside this one's snapshot and checks (a cacheable function "
    "would cache what it read, even writes never committed); commit(), rollback() or close() "
    "it before the block, or begin it inside"
)

T = TypeVar("T", bound="Transaction | AsyncTransaction")


@dataclass
class EngineTypes:
    """What an engine's facades learn at its first connection, as the stock dialect's
    ``initialize`` does: the database's hstore type (``None``: no extension)."""

    hstore: Hstore | None = None
    read: bool = False


class Facade(Generic[T]):
    """What the sync and the async facade share; ``T`` is the kind of txcache transaction
    their statements run in. Subclasses say how a transaction is entered, left and asked
    (directly, or awaited through SQLAlchemy's greenlet bridge)."""

    _kind: type[Transaction] | type[AsyncTransaction]
    _other_kind_error: str

    def __init__(self, cache: Any, types: EngineTypes) -> None:
        self.cache = cache
        self.types = types
        self.connecting = True
        """While SQLAlchemy's ``connect`` event runs: statements go to a plain connection
        (the module docstring)."""
        self.closed = False
        self.broken = False
        self.session_info: MutableMapping[str, Any] | None = None
        """The ``info`` of the session that began its transaction on this facade, where
        an own read/write transaction is handed once committed."""
        self.connection_record: MutableMapping[str, Any] | None = None
        """The record of the Core connection that began its transaction on this facade
        (:func:`txcache.sqlalchemy._commits.connection_record`), handed the same."""
        self._isolation: str | None = None
        self._refused: dict[str, str] = {}
        """What SQLAlchemy set that txcache cannot honour, by setting: raised at the next
        statement, not as it is set — set while the Core connection is being made, a
        raise would leave the connection checked out (the async pool cannot end it)."""
        self._joined: T | None = None
        self._owned: T | None = None
        self._savepoint: str | None = None

    def connected(self) -> None:
        """The engine's ``connect`` event is over (the dialect initialised on the first
        connection): read the engine's types if not yet read, then run statements in
        txcache transactions."""
        if not self.types.read:
            self.types.hstore = self._read_hstore()
            self.types.read = True
        self.connecting = False

    # -- the DBAPI connection ---------------------------------------------------------------

    @property
    def autocommit(self) -> bool:
        """Always ``False``: statements run in transactions (txcache's)."""
        return False

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self.set_autocommit(value)

    def set_autocommit(self, value: bool) -> None:
        """Refuses ``True`` (at the next statement): every statement runs in a txcache
        transaction."""
        self._refuse(
            "autocommit",
            value,
            "txcache's SQLAlchemy connections run every statement in a txcache "
            "transaction: the AUTOCOMMIT isolation level is not supported",
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
        """Refuses ``True`` (at the next statement): read in a ``cache.read_only()`` block
        instead."""
        self._refuse(
            "read_only",
            value,
            "postgresql_readonly is not supported: run the session inside "
            "`cache.read_only()`, which reads at a pinned snapshot through the cache",
        )

    def _refuse(self, setting: str, value: bool, refusal: str) -> None:
        if value:
            self._refused[setting] = refusal
        else:
            self._refused.pop(setting, None)

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
    def info(self) -> Info:
        """The transaction status, as far as SQLAlchemy asks it."""
        bound = self._owned is not None or self._joined is not None
        return Info(TransactionStatus.INTRANS if bound else TransactionStatus.IDLE)

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
            if isinstance(owned, ReadWriteTransaction | AsyncReadWriteTransaction) and owned.wrote:
                self._hand(owned)  # one that wrote nothing keeps the last token
        elif joined is not None and savepoint is not None:
            self._on_savepoint(joined, f"RELEASE SAVEPOINT {savepoint}")
            self._hand(JOINED)

    def _hand(self, committed: Any) -> None:
        """Tell the session and the Core connection what they committed last."""
        for record in (self.session_info, self.connection_record):
            if record is not None:
                record[COMMITTED] = committed

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
            if not leaves_session_alone(operation, parameters):
                raise StatementNotAllowed(_CONNECT_EVENT_SETTING.format(operation))
            return self._run_plain(operation, parameters)
        transaction = self._transaction()
        if self.types.hstore is not None:
            operation, parameters = self.types.hstore.statement(operation, parameters)
        return self._execute(transaction, operation, parameters)

    def run_many(
        self, operation: str, seq_of_parameters: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> Any:
        """Run ``operation`` once per parameter set: one pipeline in a read/write
        transaction; one by one, each checked, in a read-only one."""
        transaction = self._transaction()
        if self.types.hstore is not None:
            operation, seq_of_parameters = self.types.hstore.statements(
                operation, seq_of_parameters
            )
        if isinstance(transaction, ReadWriteTransaction | AsyncReadWriteTransaction):
            return self._results(transaction.executemany(operation, seq_of_parameters))
        results = None
        for parameters in seq_of_parameters:
            results = self._execute(transaction, operation, parameters)
        return results

    def _execute(self, transaction: T, operation: str, parameters: Params) -> Any:
        """Run one statement in ``transaction``; its results. With hstore in the database,
        its columns are loaded as the stock dialect's connections load them."""
        hstore = self.types.hstore
        rows = None if hstore is None else hstore.row_factory
        return self._results(transaction.execute(operation, parameters, row_factory=rows))

    def _transaction(self) -> T:
        """The txcache transaction of this SQLAlchemy transaction, bound at its first
        statement (the module docstring)."""
        if self.closed:
            raise psycopg.InterfaceError("the connection is closed")
        for refusal in self._refused.values():
            raise TransactionError(refusal)
        if self._owned is not None:
            if current_transaction() is not None:
                raise TransactionError(_OWN_TRANSACTION_IN_BLOCK)
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

    def _run_plain(self, operation: str, parameters: Params) -> Results:
        raise NotImplementedError

    def _read_hstore(self) -> Hstore | None:
        raise NotImplementedError

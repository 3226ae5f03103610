"""The sync and the async facade: :class:`~txcache.sqlalchemy._dbapi.Facade`'s behaviour,
each round trip made directly or awaited through SQLAlchemy's greenlet bridge
(``await_only``) in the calling task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.util import await_only

from txcache import Transaction
from txcache.aio import AsyncTransaction
from txcache.integration import Params
from txcache.sqlalchemy._cursor import Results
from txcache.sqlalchemy._dbapi import Facade
from txcache.sqlalchemy._hstore import Hstore, read_hstore, read_hstore_async

if TYPE_CHECKING:
    from txcache import Cache
    from txcache.aio import AsyncCache

__all__ = ["AsyncTxcacheConnection", "TxcacheConnection"]


class TxcacheConnection(Facade[Transaction]):
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

    def _run_plain(self, operation: str, parameters: Params) -> Results:
        # Rolled back: whatever a function it calls changed in the session (SET, set_config,
        # SET ROLE, a temporary table) goes with it, not to the pool's next user.
        with (
            self.cache.pooled() as connection,
            connection.transaction(force_rollback=True),
        ):
            cursor = connection.execute(operation, parameters)
            rows = cursor.fetchall() if cursor.description is not None else []
            return Results(cursor.description, rows, cursor.rowcount)

    def _read_hstore(self) -> Hstore | None:
        with self.cache.pooled() as connection:
            return read_hstore(connection)


class AsyncTxcacheConnection(Facade[AsyncTransaction]):
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

    def _results(self, cursor: Any) -> Results:
        # SQLAlchemy's results are read synchronously: fetch them all now, as its own
        # asyncio adapters do.
        cursor = await_only(cursor)
        rows = await_only(cursor.fetchall()) if cursor.description is not None else []
        return Results(cursor.description, rows, cursor.rowcount)

    def _run_plain(self, operation: str, parameters: Params) -> Results:
        return await_only(self._plain(operation, parameters))

    async def _plain(self, operation: str, parameters: Params) -> Results:
        async with (
            self.cache.pooled() as connection,
            connection.transaction(force_rollback=True),
        ):
            cursor = await connection.execute(operation, parameters)
            rows = await cursor.fetchall() if cursor.description is not None else []
            return Results(cursor.description, rows, cursor.rowcount)

    def _read_hstore(self) -> Hstore | None:
        return await_only(self._read_hstore_async())

    async def _read_hstore_async(self) -> Hstore | None:
        async with self.cache.pooled() as connection:
            return await read_hstore_async(connection)

"""Engines and sessions whose statements run in txcache transactions (docs/sqlalchemy.md).

An engine is SQLAlchemy's own, for its psycopg dialect, with a ``NullPool`` whose creator
makes a :class:`~txcache.sqlalchemy._dbapi.TxcacheConnection` per checkout (cheap: it
holds no database connection; the txcache transaction does). The sessions are SQLAlchemy's,
with one addition: the ``not_before`` token of the read/write transaction a session
committed itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy
import sqlalchemy.orm
from sqlalchemy import event
from sqlalchemy.ext import asyncio as sqlalchemy_asyncio
from sqlalchemy.pool import NullPool

from txcache._transaction import ReadWriteTransaction
from txcache.aio._transaction import AsyncReadWriteTransaction
from txcache.sqlalchemy._dbapi import (
    COMMITTED,
    JOINED,
    AsyncTxcacheConnection,
    TxcacheConnection,
    _Facade,
    joined_commit_error,
)

if TYPE_CHECKING:
    from txcache._connect import Cache
    from txcache.aio._connect import AsyncCache

__all__ = [
    "AsyncSession",
    "Session",
    "async_sessionmaker",
    "create_async_engine",
    "create_engine",
    "sessionmaker",
]

_REFUSED = {
    "creator": "txcache makes the connections",
    "async_creator": "txcache makes the connections",
    "pool": "the engine's pool is txcache's (a NullPool over its transactions)",
    "poolclass": "the engine's pool is txcache's (a NullPool over its transactions)",
    "pool_pre_ping": "the connections are txcache's pooled ones, checked by its pool",
    "json_serializer": "the pooled connections are shared: use psycopg's defaults",
    "json_deserializer": "the pooled connections are shared: use psycopg's defaults",
    "use_native_hstore": "hstore is parsed by SQLAlchemy (the pooled connections are shared)",
    "connect_args": "the connections come from txcache's pool (its dsn setting)",
}


def _checked(kwargs: dict[str, Any]) -> dict[str, Any]:
    for name, why in _REFUSED.items():
        if name in kwargs:
            raise TypeError(f"txcache.sqlalchemy engines do not take {name}=: {why}")
    return kwargs


def _connected(dbapi_connection: Any, _record: Any) -> None:
    """The pool's ``connect`` event, last of its listeners: the dialect's initialisation
    (on the first connection) is over, and statements go to txcache transactions."""
    if isinstance(dbapi_connection, _Facade):
        dbapi_connection.connecting = False


def create_engine(cache: Cache, **kwargs: Any) -> sqlalchemy.Engine:
    """An :class:`sqlalchemy.Engine` (dialect ``postgresql+psycopg``) whose statements run
    in txcache transactions of ``cache``: the current block's (read-only: at its pinned
    snapshot, checked and tagged as ``txcache.query`` is), else a read/write transaction
    of the connection's own, committed by ``commit()``. ``kwargs`` go to
    :func:`sqlalchemy.create_engine` (``echo=True``, ``isolation_level=`` for own
    read/write transactions, …); the pool and connection arguments are txcache's."""
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://",
        creator=lambda: TxcacheConnection(cache),
        poolclass=NullPool,
        use_native_hstore=False,
        **_checked(kwargs),
    )
    event.listen(engine.pool, "connect", _connected)
    return engine


def create_async_engine(cache: AsyncCache, **kwargs: Any) -> sqlalchemy_asyncio.AsyncEngine:
    """An :class:`sqlalchemy.ext.asyncio.AsyncEngine` (``postgresql+psycopg_async``) whose
    statements run in txcache transactions of the async ``cache``, as
    :func:`create_engine`'s do."""
    engine = sqlalchemy_asyncio.create_async_engine(
        "postgresql+psycopg_async://",
        creator=lambda: AsyncTxcacheConnection(cache),
        poolclass=NullPool,
        use_native_hstore=False,
        **_checked(kwargs),
    )
    event.listen(engine.sync_engine.pool, "connect", _connected)
    return engine


class Session(sqlalchemy.orm.Session):
    """A :class:`sqlalchemy.orm.Session` that knows the token of its own commits: after
    ``commit()`` outside any txcache block, :attr:`commit_timestamp` is the ``not_before``
    token that makes a read-only transaction see what it wrote."""

    @property
    def commit_timestamp(self) -> int | None:
        """The token of the last read/write transaction this session committed itself
        (``None``: it committed none, or it wrote nothing). Asks the agent, as
        :attr:`txcache.ReadWriteTransaction.commit_timestamp` does. Raises
        :class:`~txcache.TransactionError` when the last commit was inside a
        ``cache.read_write()`` block: the block's token is the one to use."""
        committed = self.info.get(COMMITTED)
        if committed is None:
            return None
        if committed == JOINED or not isinstance(committed, ReadWriteTransaction):
            raise joined_commit_error()
        return committed.commit_timestamp


class AsyncSession(sqlalchemy_asyncio.AsyncSession):
    """A :class:`sqlalchemy.ext.asyncio.AsyncSession` that knows the token of its own
    commits (``await session.commit_timestamp()``), as :class:`Session` does."""

    sync_session_class = Session

    async def commit_timestamp(self) -> int | None:
        """The token of the last read/write transaction this session committed itself:
        :attr:`Session.commit_timestamp`, awaited (it may ask the agent)."""
        committed = self.sync_session.info.get(COMMITTED)
        if committed is None:
            return None
        if committed == JOINED or not isinstance(committed, AsyncReadWriteTransaction):
            raise joined_commit_error()
        return await committed.commit_timestamp()


@event.listens_for(Session, "after_begin")
def _link(session: Session, _transaction: Any, connection: sqlalchemy.Connection) -> None:
    """A session began its transaction on a connection: the facade under it hands its own
    committed read/write transaction to the session."""
    facade = connection.connection.dbapi_connection
    if isinstance(facade, _Facade):
        facade.session_info = session.info


def sessionmaker(engine: sqlalchemy.Engine, **kwargs: Any) -> sqlalchemy.orm.sessionmaker[Session]:
    """``sqlalchemy.orm.sessionmaker(engine, class_=txcache.sqlalchemy.Session, ...)``."""
    return sqlalchemy.orm.sessionmaker(engine, class_=Session, **kwargs)


def async_sessionmaker(
    engine: sqlalchemy_asyncio.AsyncEngine, **kwargs: Any
) -> sqlalchemy_asyncio.async_sessionmaker[AsyncSession]:
    """``sqlalchemy.ext.asyncio.async_sessionmaker(engine, class_=AsyncSession, ...)``."""
    return sqlalchemy_asyncio.async_sessionmaker(engine, class_=AsyncSession, **kwargs)

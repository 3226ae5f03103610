"""Engines and sessions whose statements run in txcache transactions (docs/sqlalchemy.md).

An engine is SQLAlchemy's own, for its psycopg dialect, with a ``NullPool`` whose creator
makes a :class:`~txcache.sqlalchemy._drivers.TxcacheConnection` per checkout (cheap: it
holds no database connection; the txcache transaction does). The sessions are SQLAlchemy's,
with one addition: the ``not_before`` token of the read/write transaction a session
committed itself (:mod:`txcache.sqlalchemy._commits`, which also keeps a Core
connection's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy
import sqlalchemy.orm
from sqlalchemy import event
from sqlalchemy.ext import asyncio as sqlalchemy_asyncio
from sqlalchemy.ext.asyncio.session import _AsyncSessionContextManager
from sqlalchemy.pool import NullPool

import txcache
from txcache import _validate as validate  # the one home of the checks and their messages
from txcache._current import current_transaction
from txcache._read_only_core import ReadOnlyCore
from txcache._sql import UncacheableQuery
from txcache.aio import AsyncReadWriteTransaction
from txcache.integration import tokens
from txcache.sqlalchemy._commits import (
    COMMITTED,
    commit_timestamp,
    commit_timestamp_async,
    connection_record,
    made_by_txcache,
)
from txcache.sqlalchemy._dbapi import EngineTypes, Facade
from txcache.sqlalchemy._drivers import AsyncTxcacheConnection, TxcacheConnection

if TYPE_CHECKING:
    from txcache import Cache
    from txcache.aio import AsyncCache

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
    "native_inet_types": "the pooled connections are shared: use psycopg's defaults",
    "use_native_hstore": "hstore is adapted by txcache as psycopg adapts it for SQLAlchemy",
    "client_encoding": "the connections come from txcache's pool (its dsn setting)",
    "connect_args": "the connections come from txcache's pool (its dsn setting)",
}


def _checked(function: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for SQLAlchemy, refused (``TypeError``) if they name what txcache owns,
    and their isolation level checked now (``ValueError``) rather than at the first
    statement: only the levels ``cache.read_write(isolation=)`` takes."""
    for name, why in _REFUSED.items():
        if name in kwargs:
            raise TypeError(f"txcache.sqlalchemy engines do not take {name}=: {why}")
    options = kwargs.get("execution_options") or {}
    for what, level in (
        (f"{function}: isolation_level", kwargs.get("isolation_level")),
        (f"{function}: execution_options['isolation_level']", options.get("isolation_level")),
    ):
        if level is not None:
            validate.checked_argument(what, level, _isolation)
    return kwargs


def _isolation(value: Any) -> str:
    """SQLAlchemy's spelling (``"REPEATABLE_READ"`` too) of a level txcache runs."""
    if isinstance(value, str):
        value = value.replace("_", " ")
    return validate.isolation(value)


def _require(function: str, cache: Any, kind: type[Any], allowed: str) -> None:
    """``TypeError`` unless ``cache`` is a ``kind``: the other driver's cache would fail
    only at the first statement, far from the mistake."""
    if not isinstance(cache, kind):
        refused = validate.Refused(allowed, wrong_type=True)
        raise TypeError(refused.message(f"{function}: cache", cache))


def _listen(engine: sqlalchemy.Engine) -> None:
    """Hook the engine's facades to SQLAlchemy's events: the end of ``connect`` and a Core
    connection's ``begin``."""
    dialect = engine.dialect
    made_by_txcache(engine)

    def connected(dbapi_connection: Any, _record: Any) -> None:
        # The pool's `connect` event, last of its listeners: the dialect initialised on the
        # first connection. With hstore in the database the dialect leaves hstore values to
        # the driver, as the stock dialect's initialize() decides — here to the facade,
        # which adapts them per statement (txcache.sqlalchemy._hstore).
        if isinstance(dbapi_connection, Facade):
            dbapi_connection.connected()
            dialect._has_native_hstore = dbapi_connection.types.hstore is not None  # type: ignore[attr-defined]

    event.listen(engine.pool, "connect", connected)
    event.listen(engine, "begin", _began)
    event.listen(engine, "before_cursor_execute", _refuse_unkeyed_translation)


def _refuse_unkeyed_translation(
    _connection: Any, _cursor: Any, _statement: str, _parameters: Any, context: Any, _many: bool
) -> None:
    """Refuse a statement whose schemas a ``schema_translate_map`` chose while a cacheable
    function is computed, unless each schema it translates to is one of the call's string
    arguments — hence in its key. A map picked by request state (a tenant in a
    ``ContextVar``) is not: a tenant would be served another's value."""
    translate = context.execution_options.get("schema_translate_map") if context else None
    if not translate:
        return
    current = current_transaction()
    if not isinstance(current, ReadOnlyCore):
        return  # no result being computed: nothing stored under a key
    schemas = {schema for schema in translate.values() if schema is not None}
    for frame in current.frames:
        missing = sorted(schemas - frame.texts)
        if missing:
            raise UncacheableQuery(
                f"{frame.function} runs a query whose schema_translate_map picks the "
                f"schema(s) {', '.join(missing)}, which are not among its arguments: its key "
                "would not name them, and another tenant would be served this value. Pass "
                "the schema name to the function as an argument (and build the map from it)"
            )


def _began(connection: sqlalchemy.Connection) -> None:
    """A Core connection began a transaction: its facade hands what it commits to the
    connection's record (:func:`txcache.sqlalchemy.commit_timestamp`)."""
    facade = connection.connection.dbapi_connection
    if isinstance(facade, Facade):
        facade.connection_record = connection_record(connection)


def create_engine(cache: Cache, **kwargs: Any) -> sqlalchemy.Engine:
    """An :class:`sqlalchemy.Engine` (dialect ``postgresql+psycopg``) whose statements run
    in txcache transactions of ``cache``: the current block's (read-only: at its pinned
    snapshot, checked and tagged as ``txcache.query`` is), else a read/write transaction
    of the connection's own, committed by ``commit()``. ``kwargs`` go to
    :func:`sqlalchemy.create_engine` (``echo=True``, ``isolation_level=`` for own
    read/write transactions, …); the pool and connection arguments are txcache's."""
    checked = _checked("create_engine()", kwargs)
    allowed = "a txcache.Cache (an AsyncCache goes to create_async_engine())"
    _require("create_engine()", cache, txcache.Cache, allowed)
    types = EngineTypes()
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://",
        creator=lambda: TxcacheConnection(cache, types),
        poolclass=NullPool,
        use_native_hstore=False,  # initialize() would register psycopg's adapters on the facade
        **checked,
    )
    _listen(engine)
    return engine


def create_async_engine(cache: AsyncCache, **kwargs: Any) -> sqlalchemy_asyncio.AsyncEngine:
    """An :class:`sqlalchemy.ext.asyncio.AsyncEngine` (``postgresql+psycopg_async``) whose
    statements run in txcache transactions of the async ``cache``, as
    :func:`create_engine`'s do."""
    checked = _checked("create_async_engine()", kwargs)
    allowed = "a txcache.AsyncCache (a Cache goes to create_engine())"
    _require("create_async_engine()", cache, txcache.AsyncCache, allowed)
    types = EngineTypes()
    engine = sqlalchemy_asyncio.create_async_engine(
        "postgresql+psycopg_async://",
        creator=lambda: AsyncTxcacheConnection(cache, types),
        poolclass=NullPool,
        use_native_hstore=False,  # as create_engine
        **checked,
    )
    _listen(engine.sync_engine)
    return engine


class Session(sqlalchemy.orm.Session):
    """A :class:`sqlalchemy.orm.Session` that knows the token of its own commits: after
    ``commit()`` outside any txcache block, :attr:`commit_timestamp` is the ``not_before``
    token that makes a read-only transaction see what it wrote."""

    @property
    def commit_timestamp(self) -> int | None:
        """The token of the last read/write transaction this session committed itself and
        wrote in (``None``: none yet; a commit that wrote nothing keeps the last token).
        :func:`txcache.sqlalchemy.commit_timestamp` of the session."""
        return commit_timestamp(self)


class AsyncSession(sqlalchemy_asyncio.AsyncSession):
    """A :class:`sqlalchemy.ext.asyncio.AsyncSession` that knows the token of its own
    commits (``await session.commit_timestamp()``), as :class:`Session` does."""

    sync_session_class = Session

    async def commit_timestamp(self) -> int | None:
        """:attr:`Session.commit_timestamp`, awaited (it may ask the agent)."""
        return await commit_timestamp_async(self)

    def _maker_context_manager(self) -> _AsyncSessionContextManager[AsyncSession]:
        """What ``async with async_sessionmaker.begin()`` enters: :class:`_Begun`."""
        return _Begun(self)


class _Begun(_AsyncSessionContextManager[AsyncSession]):
    """``async with async_sessionmaker.begin()``: SQLAlchemy commits (and closes) the
    session in a task of its own, whose context is a copy of the caller's — the write is
    recorded for read-your-writes there (:mod:`txcache._tokens`), out of the caller's
    reach. Once that task is over, the commit is recorded again in the caller's task."""

    async def __aexit__(self, type_: Any, value: Any, traceback: Any) -> None:
        await super().__aexit__(type_, value, traceback)
        committed = self.async_session.sync_session.info.get(COMMITTED)
        if isinstance(committed, AsyncReadWriteTransaction):  # a fresh session: its commit
            tokens.record(committed)


@event.listens_for(Session, "after_begin")
def _link(session: Session, _transaction: Any, connection: sqlalchemy.Connection) -> None:
    """A session began its transaction on a connection: the facade under it hands its own
    committed read/write transaction to the session."""
    facade = connection.connection.dbapi_connection
    if isinstance(facade, Facade):
        facade.session_info = session.info


def sessionmaker(engine: sqlalchemy.Engine, **kwargs: Any) -> sqlalchemy.orm.sessionmaker[Session]:
    """``sqlalchemy.orm.sessionmaker(engine, class_=txcache.sqlalchemy.Session, ...)``."""
    return sqlalchemy.orm.sessionmaker(engine, class_=Session, **kwargs)


def async_sessionmaker(
    engine: sqlalchemy_asyncio.AsyncEngine, **kwargs: Any
) -> sqlalchemy_asyncio.async_sessionmaker[AsyncSession]:
    """``sqlalchemy.ext.asyncio.async_sessionmaker(engine, class_=AsyncSession, ...)``."""
    return sqlalchemy_asyncio.async_sessionmaker(engine, class_=AsyncSession, **kwargs)

"""The token of what a session or a Core connection committed itself
(docs/sqlalchemy.md, "Tokens").

A facade that commits a read/write transaction of its own — one that wrote — hands it to
the ``info`` of the session that began it and to a record kept for the Core connection it
served: its ``commit_timestamp`` is the token. A commit that wrote nothing keeps the last
one. A commit that only released a savepoint of a ``cache.read_write()`` block is marked
:data:`JOINED`: the block commits, and its token is the one to use.

Every such commit also advances the read-your-writes token of the thread or task that
committed it (:mod:`txcache._tokens`, which the library's transactions feed themselves):
these per-session tokens are for handing to a client, not for reading one's own writes.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, MutableMapping
from typing import Any

import sqlalchemy
import sqlalchemy.orm
from sqlalchemy.ext import asyncio as sqlalchemy_asyncio

from txcache import ReadWriteTransaction
from txcache.aio import AsyncReadWriteTransaction
from txcache.errors import TransactionError
from txcache.integration import CommitRecord

__all__ = [
    "COMMITTED",
    "JOINED",
    "commit_timestamp",
    "commit_timestamp_async",
    "connection_record",
    "last_commit",
    "made_by_txcache",
]

COMMITTED = "txcache_transaction"
"""The key of ``session.info`` (and of a connection's record) under which the last own
read/write transaction that wrote is kept once committed."""

JOINED = "joined"
"""What :data:`COMMITTED` holds after a commit inside a read/write block: the block's
commit, not the session's, is the one a token names."""

_connections: weakref.WeakKeyDictionary[sqlalchemy.Connection, dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


_engines: weakref.WeakSet[sqlalchemy.Engine] = weakref.WeakSet()


def made_by_txcache(engine: sqlalchemy.Engine) -> None:
    """``engine`` (an async engine's ``sync_engine``) is txcache's: its connections' commits
    have tokens."""
    _engines.add(engine)


def connection_record(connection: sqlalchemy.Connection) -> MutableMapping[str, Any]:
    """Where a Core connection's facade hands its commits (kept as long as the connection
    object lives: after it closed too, as ``session.info`` is)."""
    return _connections.setdefault(connection, {})


def last_commit(info: Mapping[str, Any]) -> CommitRecord | None:
    """The last own read/write transaction that wrote, of a session's ``info`` or a
    connection's record; raises when the last commit was inside a read/write block."""
    committed = info.get(COMMITTED)
    if committed is None:
        return None
    if committed == JOINED or not isinstance(committed, CommitRecord):
        raise TransactionError(
            "the last commit was inside a `cache.read_write()` block, which commits it: "
            "the block's commit_timestamp is the token"
        )
    return committed


def commit_timestamp(target: sqlalchemy.orm.Session | sqlalchemy.Connection) -> int | None:
    """The token of the last read/write transaction ``target`` — a session or a Core
    connection of a sync :func:`~txcache.sqlalchemy.create_engine` engine — committed
    itself and wrote in (``None``: none yet). Asks the agent, as
    :attr:`txcache.ReadWriteTransaction.commit_timestamp` does. Raises
    :class:`~txcache.TransactionError` when its last commit was inside a
    ``cache.read_write()`` block: the block's token is the one to use."""
    committed = last_commit(_info(target))
    if committed is None:
        return None
    if not isinstance(committed, ReadWriteTransaction):
        raise TransactionError("an async engine's commit: await commit_timestamp_async()")
    return committed.commit_timestamp


async def commit_timestamp_async(
    target: sqlalchemy_asyncio.AsyncSession | sqlalchemy_asyncio.AsyncConnection,
) -> int | None:
    """:func:`commit_timestamp` of an ``AsyncSession`` or ``AsyncConnection`` of an
    :func:`~txcache.sqlalchemy.create_async_engine` engine, awaited."""
    if isinstance(target, sqlalchemy_asyncio.AsyncSession):
        committed = last_commit(target.sync_session.info)
    elif isinstance(target, sqlalchemy_asyncio.AsyncConnection):
        _require_txcache_engine("commit_timestamp_async()", target.sync_engine)
        connection = target.sync_connection
        committed = None if connection is None else last_commit(_info(connection))
    elif isinstance(target, sqlalchemy.orm.Session | sqlalchemy.Connection):
        raise TypeError(
            "commit_timestamp_async() of a sync session or connection: call "
            "commit_timestamp() (no await)"
        )
    else:
        raise TypeError(
            "commit_timestamp_async() takes an AsyncSession or an AsyncConnection of a "
            f"txcache.sqlalchemy.create_async_engine() engine, not {type(target).__name__}"
        )
    if committed is None:
        return None
    if not isinstance(committed, AsyncReadWriteTransaction):
        raise TransactionError("a sync engine's commit: use commit_timestamp()")
    return await committed.commit_timestamp()


def _info(target: sqlalchemy.orm.Session | sqlalchemy.Connection) -> Mapping[str, Any]:
    """Where ``target``'s commits are recorded; a ``TypeError`` for what has none."""
    if isinstance(target, sqlalchemy.orm.Session):
        return target.info
    if isinstance(target, sqlalchemy.Connection):
        _require_txcache_engine("commit_timestamp()", target.engine)
        return _connections.get(target, {})
    if isinstance(target, sqlalchemy_asyncio.AsyncSession | sqlalchemy_asyncio.AsyncConnection):
        raise TypeError(
            "commit_timestamp() of an async session or connection: await "
            "commit_timestamp_async() (or the AsyncSession's commit_timestamp())"
        )
    raise TypeError(
        "commit_timestamp() takes a Session or a Connection of a "
        f"txcache.sqlalchemy.create_engine() engine, not {type(target).__name__}"
    )


def _require_txcache_engine(function: str, engine: sqlalchemy.Engine) -> None:
    if engine not in _engines:
        raise TypeError(
            f"{function} of a connection of an engine txcache.sqlalchemy did not make: its "
            "commits are not txcache transactions, and have no token (make the engine "
            "with txcache.sqlalchemy.create_engine() / create_async_engine())"
        )

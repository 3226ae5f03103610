"""Tokens through txcache.sqlalchemy (docs/sqlalchemy.md, "Tokens"): every write committed
through a documented path — a session's commit, ``engine.begin()``, a Core connection's
``commit()``, ``sessionmaker.begin()``, sync and async — advances the read-your-writes
token of the thread or task that asked for it; a session and a Core connection know the
token of their own last commit that wrote, which a later commit that wrote nothing keeps;
and a token ahead of the database reads the newest state, with one warning."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

import txcache
from async_fixtures import AsyncLib
from library_fixtures import LibraryStack, as_another_process
from test_sqlalchemy import Item, User
from txcache import _tokens as tokens
from txcache import sqlalchemy as txsa
from txcache.aio import AsyncCache

engine: sqlalchemy.Engine | None = None
"""The running test's engine (the cacheable function below reads through it)."""


@pytest.fixture
def sync_engine(lib: LibraryStack) -> Iterator[sqlalchemy.Engine]:
    global engine
    engine = txsa.create_engine(lib.cache)
    lib.caught_up()
    lib.fresh_pins()
    yield engine
    engine.dispose()
    engine = None


@txcache.cacheable
def price(item_id: int) -> int | None:
    assert engine is not None
    with txsa.Session(engine) as session:
        return session.scalar(select(Item.price).where(Item.id == item_id))


def read(lib: LibraryStack, item_id: int, not_before: int | None = None) -> tuple[Any, int | None]:
    """``price(item_id)`` in a read-only block, and the ``not_before`` the block ran with."""
    with lib.cache.read_only(staleness=60, not_before=not_before) as tx:
        return price(item_id), tx.not_before


def reprice(item_id: int, value: int) -> Any:
    return update(Item).where(Item.id == item_id).values(price=value)


# -- sync -------------------------------------------------------------------------------------


def test_a_commit_that_wrote_nothing_keeps_the_sessions_token(
    lib: LibraryStack, sync_engine: sqlalchemy.Engine
) -> None:
    with txsa.Session(sync_engine) as session:
        assert session.commit_timestamp is None
        session.add(User(id=70, name="new"))
        session.commit()
        token = session.commit_timestamp
        assert isinstance(token, int)
        assert session.get(User, 1) is not None  # a read: a transaction of its own
        session.commit()  # that wrote nothing
        assert session.commit_timestamp == token
        session.execute(text("SELECT 1"))
        session.rollback()
        assert session.commit_timestamp == token
    assert txsa.commit_timestamp(session) == token


def test_a_core_connection_knows_the_token_of_its_commit(
    lib: LibraryStack, sync_engine: sqlalchemy.Engine
) -> None:
    with sync_engine.begin() as conn:
        assert txsa.commit_timestamp(conn) is None
        conn.execute(reprice(3, 33))
    token = txsa.commit_timestamp(conn)
    assert isinstance(token, int)
    with sync_engine.connect() as conn:
        conn.execute(reprice(4, 44))
        conn.commit()
        first = txsa.commit_timestamp(conn)
        conn.execute(select(Item.id)).all()
        conn.commit()  # wrote nothing: keeps the token
        assert txsa.commit_timestamp(conn) == first
    assert first is not None
    assert first > token
    assert as_another_process(read, lib, 4, first) == (44, first)
    with lib.cache.read_write(), sync_engine.connect() as conn:
        conn.execute(reprice(5, 55))
        conn.commit()  # releases a savepoint: the block commits
        with pytest.raises(txcache.TransactionError, match="block's commit_timestamp"):
            txsa.commit_timestamp(conn)


def _session_write(engine: sqlalchemy.Engine, value: int) -> int | None:
    with txsa.Session(engine) as session:
        session.execute(reprice(3, value))
        session.commit()
    return session.commit_timestamp


def _core_begin(engine: sqlalchemy.Engine, value: int) -> int | None:
    with engine.begin() as conn:
        conn.execute(reprice(3, value))
    return txsa.commit_timestamp(conn)


def _core_commit(engine: sqlalchemy.Engine, value: int) -> int | None:
    with engine.connect() as conn:
        conn.execute(reprice(3, value))
        conn.commit()
    return txsa.commit_timestamp(conn)


def _maker_begin(engine: sqlalchemy.Engine, value: int) -> int | None:
    with txsa.sessionmaker(engine).begin() as session:
        session.execute(reprice(3, value))
    return session.commit_timestamp


WRITES: dict[str, Callable[[sqlalchemy.Engine, int], int | None]] = {
    "session": _session_write,
    "engine.begin()": _core_begin,
    "connection.commit()": _core_commit,
    "sessionmaker.begin()": _maker_begin,
}
"""The documented ways to write through a sync engine; each returns its commit's token."""


@pytest.mark.parametrize("path", WRITES)
def test_every_committed_write_advances_the_threads_token(
    lib: LibraryStack, sync_engine: sqlalchemy.Engine, path: str
) -> None:
    assert read(lib, 3) == (30, None)
    token = WRITES[path](sync_engine, 31)
    assert token is not None
    assert tokens.floor(lib.cache.settings.dsn) == token
    assert read(lib, 3) == (31, token)
    with tokens.scope():  # another request, say: not held to it
        assert read(lib, 3)[1] is None


def test_a_token_ahead_of_the_database_reads_the_newest_state(
    lib: LibraryStack, sync_engine: sqlalchemy.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    lib.write("UPDATE items SET price = 36 WHERE id = 6")
    future = lib.cache.timestamp() + 2**40
    with caplog.at_level("WARNING", logger="txcache"):
        assert read(lib, 6, not_before=future)[0] == 36
        with tokens.scope():
            tokens.advance(lib.cache.settings.dsn, future)  # a client's old cookie
            with lib.cache.read_only(staleness=60), txsa.Session(sync_engine) as session:
                found = session.get(Item, 6)
                assert found is not None
                assert found.price == 36
            with txsa.Session(sync_engine) as session:  # a write, then a read
                session.execute(reprice(6, 37))
                session.commit()
            assert read(lib, 6)[0] == 37
    warnings = [r for r in caplog.records if "lies after everything" in r.getMessage()]
    assert len(warnings) == 1, caplog.text


# -- async ------------------------------------------------------------------------------------


def run(alib: Any, body: Callable[[AsyncCache, AsyncEngine], Awaitable[Any]]) -> Any:
    """``body(cache, engine)`` on a new event loop with an async engine of the stack."""

    async def with_engine(cache: AsyncCache) -> Any:
        made = txsa.create_async_engine(cache)
        try:
            return await body(cache, made)
        finally:
            await made.dispose()

    return alib.run(with_engine)


async def price_in(cache: AsyncCache, made: AsyncEngine, item_id: int) -> tuple[Any, int | None]:
    """The price of ``item_id`` through a session, in a read-only block; its not_before."""
    async with cache.read_only(staleness=60) as tx, txsa.AsyncSession(made) as session:
        found = await session.scalar(select(Item.price).where(Item.id == item_id))
        return found, tx.not_before


def test_an_async_commit_that_wrote_nothing_keeps_the_sessions_token(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache, made: AsyncEngine) -> None:
        async with txsa.AsyncSession(made) as session:
            session.add(User(id=71, name="new"))
            await session.commit()
            token = await session.commit_timestamp()
            assert isinstance(token, int)
            assert await session.get(User, 1) is not None
            await session.commit()  # wrote nothing
            assert await session.commit_timestamp() == token
        async with made.begin() as conn:
            await conn.execute(reprice(2, 22))
        core = await txsa.commit_timestamp_async(conn)
        assert core is not None
        assert core > token
        assert await txsa.commit_timestamp_async(session) == token

    run(alib, body)


async def _async_session_write(made: AsyncEngine, value: int) -> int | None:
    async with txsa.async_sessionmaker(made)() as session:
        await session.execute(reprice(2, value))
        await session.commit()
    return await session.commit_timestamp()


async def _async_core_begin(made: AsyncEngine, value: int) -> int | None:
    async with made.begin() as conn:
        await conn.execute(reprice(2, value))
    return await txsa.commit_timestamp_async(conn)


async def _async_core_commit(made: AsyncEngine, value: int) -> int | None:
    async with made.connect() as conn:
        await conn.execute(reprice(2, value))
        await conn.commit()
    return await txsa.commit_timestamp_async(conn)


async def _async_maker_begin(made: AsyncEngine, value: int) -> int | None:
    # SQLAlchemy commits `async with sessionmaker.begin()` in a task of its own: the write
    # is the caller's all the same.
    async with txsa.async_sessionmaker(made).begin() as session:
        await session.execute(reprice(2, value))
    return await session.commit_timestamp()


ASYNC_WRITES: dict[str, Callable[[AsyncEngine, int], Awaitable[int | None]]] = {
    "session": _async_session_write,
    "engine.begin()": _async_core_begin,
    "connection.commit()": _async_core_commit,
    "sessionmaker.begin()": _async_maker_begin,
}


@pytest.mark.parametrize("path", ASYNC_WRITES)
def test_every_committed_async_write_advances_the_tasks_token(alib: AsyncLib, path: str) -> None:
    async def body(cache: AsyncCache, made: AsyncEngine) -> None:
        token = await ASYNC_WRITES[path](made, 21)
        assert token is not None
        assert await tokens.floor_async(cache.settings.dsn) == token
        assert await price_in(cache, made, 2) == (21, token)

    run(alib, body)


def test_an_async_token_ahead_of_the_database_reads_the_newest_state(
    alib: AsyncLib, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(cache: AsyncCache, made: AsyncEngine) -> None:
        alib.lib.write("UPDATE items SET price = 88 WHERE id = 8")
        future = await cache.timestamp() + 2**40
        with tokens.scope():
            tokens.advance(cache.settings.dsn, future)
            assert (await price_in(cache, made, 8))[0] == 88

    with caplog.at_level("WARNING", logger="txcache"):
        run(alib, body)
    assert "lies after everything" in caplog.text


def test_commit_timestamp_of_what_has_no_token_is_a_type_error(
    lib: LibraryStack, sync_engine: sqlalchemy.Engine, alib: AsyncLib
) -> None:
    """A connection of a stock engine, the other driver's session or connection, or
    anything else: a ``TypeError`` that says what to pass — never a silent ``None``."""
    stock = sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(lib.dsn)
    )
    with stock.connect() as conn, pytest.raises(TypeError, match="did not make"):
        txsa.commit_timestamp(conn)
    stock.dispose()
    with pytest.raises(TypeError, match="not str"):
        txsa.commit_timestamp("a token")  # type: ignore[arg-type]
    with sync_engine.connect() as conn, txsa.Session(sync_engine) as session:
        for sync_target in (conn, session):

            async def ask(cache: AsyncCache, target: Any = sync_target) -> int | None:
                return await txsa.commit_timestamp_async(target)

            with pytest.raises(TypeError, match=r"call commit_timestamp\(\)"):
                alib.run(ask)

    async def body(cache: AsyncCache, made: AsyncEngine) -> None:
        async with made.connect() as conn, txsa.AsyncSession(made) as session:
            for target in (conn, session):
                with pytest.raises(TypeError, match=r"await commit_timestamp_async\(\)"):
                    txsa.commit_timestamp(target)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not int"):
            await txsa.commit_timestamp_async(7)  # type: ignore[arg-type]

    run(alib, body)

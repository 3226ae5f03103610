"""txcache.sqlalchemy with asyncio, against a real stack (docs/sqlalchemy.md, "Async"):
an AsyncSession's ORM statements run in the async txcache transaction of its task — cached
as plain data, a hit equal to the miss; an AsyncSession outside any block commits its own
read/write transaction and hands back the token; many tasks at once, each in a block of its
own, read one commit point while a writer commits; and the refusals."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import async_sessionmaker

import txcache
from async_fixtures import AsyncLib, fresh_pins
from test_sqlalchemy import Item, User
from txcache import sqlalchemy as txsa
from txcache.aio import AsyncCache

sessions: async_sessionmaker[txsa.AsyncSession] | None = None
"""The running test's sessionmaker, whose sessions the cacheable functions below open."""

runs: list[str] = []
"""The runs (misses) of the cacheable functions below."""


def session() -> txsa.AsyncSession:
    assert sessions is not None
    return sessions()


@txcache.cacheable
async def item(item_id: int) -> dict[str, Any] | None:
    runs.append(f"item {item_id}")
    async with session() as s:
        found = await s.get(Item, item_id)
        return None if found is None else txsa.to_dict(found)


@txcache.cacheable
async def price(item_id: int) -> int:
    async with session() as s:
        found = await s.scalar(select(Item.price).where(Item.id == item_id))
        assert found is not None
        return found


def run(alib: AsyncLib, body: Any) -> Any:
    """``body(cache)`` with :data:`sessions` made for the cache of that event loop."""

    async def with_sessions(cache: AsyncCache) -> Any:
        global sessions
        engine = txsa.create_async_engine(cache)
        sessions = txsa.async_sessionmaker(engine, expire_on_commit=False)
        try:
            return await body(cache)
        finally:
            sessions = None
            await engine.dispose()

    return alib.run(with_sessions)


async def read(cache: AsyncCache, function: Any, *args: Any, not_before: int | None = None) -> Any:
    async with cache.read_only(staleness=60, not_before=not_before):
        return await function(*args)


def test_an_async_session_caches_plain_data_and_a_hit_equals_the_miss(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        miss = await read(cache, item, 3)
        assert miss == {"id": 3, "name": "item 3", "price": 30, "category": 0}
        alib.lib.caught_up()
        await fresh_pins(cache)
        assert await read(cache, item, 3) == miss  # stored now, if the first did not
        runs.clear()
        hits = item.stats.hits
        assert await read(cache, item, 3) == miss
        assert runs == []
        assert item.stats.hits == hits + 1
        assert await read(cache, item, 999) is None

    run(alib, body)


def test_an_async_session_outside_a_block_commits_its_own_transaction(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        assert await read(cache, item, 6) is not None
        async with session() as s:
            assert await s.commit_timestamp() is None
            await s.execute(update(Item).where(Item.id == 6).values(price=4321))
            assert txcache.current_transaction() is None  # the session's, not the task's
            await s.commit()
            token = await s.commit_timestamp()
        assert isinstance(token, int)
        assert (await read(cache, item, 6, not_before=token))["price"] == 4321
        async with session() as s:  # closed without commit: nothing written
            s.add(User(id=30, name="gone"))
            await s.flush()
        assert txcache.current_transaction() is None
        assert await s.commit_timestamp() is None  # this session committed nothing

    run(alib, body)
    assert alib.lib.admin.execute("SELECT count(*) FROM users WHERE id = 30").fetchone() == (0,)


def test_many_tasks_read_one_commit_point_each_while_a_writer_commits(alib: AsyncLib) -> None:
    # The writer moves 5 from item 1's price to item 2's, many times, each in one commit:
    # every reader, in a block of its own, reads the two prices through two cacheable calls
    # (two cached values, or queries) and must see them from one commit point.
    total = 10 + 20

    async def writer() -> int:
        token = 0
        for _ in range(15):
            async with session() as s:
                await s.execute(update(Item).where(Item.id == 1).values(price=Item.price - 5))
                await s.execute(update(Item).where(Item.id == 2).values(price=Item.price + 5))
                await s.commit()
                token = await s.commit_timestamp() or token
        return token

    async def reader(index: int) -> int:
        assert cache_of_test is not None
        async with cache_of_test.read_only(staleness=60):
            if index % 2:
                return await price(1) + await price(2)
            return await price(2) + await price(1)

    async def body(cache: AsyncCache) -> None:
        global cache_of_test
        cache_of_test = cache
        readers = [reader(index) for index in range(60)]
        token, *sums = await asyncio.gather(writer(), *readers)
        assert sums == [total] * 60
        async with cache.read_only(staleness=60, not_before=token):
            assert (await price(1), await price(2)) == (10 - 75, 20 + 75)

    run(alib, body)
    assert price.stats.errors == 0


cache_of_test: AsyncCache | None = None


def test_async_sessions_inside_a_read_write_block_work_under_a_savepoint(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> int | None:
        async with cache.read_write() as tx, session() as s:
            s.add(User(id=40, name="kept"))
            s.add(User(id=1, name="duplicate"))
            with pytest.raises(sqlalchemy.exc.IntegrityError):
                await s.flush()
            await s.rollback()
            s.add(User(id=41, name="kept"))
            await s.commit()
            with pytest.raises(txcache.TransactionError, match="block's commit_timestamp"):
                await s.commit_timestamp()
            async with session() as s:
                s.add(User(id=42, name="never committed"))
                await s.flush()  # closed without commit (in a task of SQLAlchemy's): undone
        return await tx.commit_timestamp()

    assert run(alib, body) is not None
    rows = alib.lib.admin.execute("SELECT id FROM users WHERE id >= 40 ORDER BY id").fetchall()
    assert rows == [(41,)]


def test_refusals_and_streamed_results(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60) as tx, session() as s:
            s.add(User(id=50, name="new"))
            with pytest.raises(txcache.StatementNotAllowed, match="INSERT"):
                await s.flush()
            await s.rollback()
            assert not tx.failed
            assert sessions is not None
            engine = sessions.kw["bind"]
            async with engine.connect() as conn:
                streamed = await conn.stream(select(User.id).order_by(User.id))
                assert [row[0] async for row in streamed] == [1, 2, 3, 4, 5]
        with alib.lib.cache.read_only(staleness=60):
            async with session() as s:
                with pytest.raises(txcache.TransactionError, match="current transaction is sync"):
                    await s.get(Item, 1)

    run(alib, body)


def test_a_sessionmaker_begin_block_commits_in_sqlalchemys_own_task(alib: AsyncLib) -> None:
    # SQLAlchemy 2.1 runs the flush and commit of `async with sessionmaker.begin()` in a task
    # of its own: the session's own transaction is the connection's, so that task may use it.
    async def body(cache: AsyncCache) -> int | None:
        assert sessions is not None
        async with sessions.begin() as s:
            await s.get(User, 1)  # begun here, in the test's task
            s.add(User(id=60, name="from begin()"))
        token = await s.commit_timestamp()
        # Inside a block the statements must come from the block's task: a flush that
        # SQLAlchemy runs in a task of its own is refused, and nothing is written.
        async with cache.read_write():
            with pytest.raises(txcache.TransactionError, match="belongs to the task"):
                async with sessions.begin() as s:
                    s.add(User(id=61, name="flushed elsewhere"))
            async with sessions.begin() as s:
                s.add(User(id=62, name="flushed here"))
                await s.flush()  # in the block's task; the commit's RELEASE runs in SQLAlchemy's
        return token

    token = run(alib, body)
    assert token is not None
    rows = alib.lib.admin.execute("SELECT id, name FROM users WHERE id >= 60 ORDER BY id")
    assert rows.fetchall() == [(60, "from begin()"), (62, "flushed here")]


def test_a_refused_connection_option_gives_the_connection_back(
    alib: AsyncLib, caplog: pytest.LogCaptureFixture
) -> None:
    """AUTOCOMMIT and ``postgresql_readonly`` are refused as the connection is checked out;
    the connection goes back (the pool whole, SQLAlchemy's garbage collector finds nothing
    left checked out)."""

    async def body(cache: AsyncCache) -> None:
        engine = txsa.create_async_engine(cache)
        refused = {"isolation_level": "AUTOCOMMIT", "postgresql_readonly": True}
        try:
            for option, value in refused.items():
                optioned = engine.execution_options(**{option: value})
                with pytest.raises(txcache.TransactionError):
                    async with optioned.connect() as conn:
                        await conn.execute(select(Item.id))
        finally:
            await engine.dispose()

    run(alib, body)
    gc.collect()
    assert [record.getMessage() for record in caplog.records if "garbage" in record.msg] == []

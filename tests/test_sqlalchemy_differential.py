"""SQLAlchemy through txcache returns exactly what SQLAlchemy's own psycopg dialect returns
(docs/sqlalchemy.md, "What a query returns"): every query of the corpus
(tests/test_sqlalchemy_corpus_queries.py) runs on a stock
``create_engine("postgresql+psycopg://…")`` and through txcache's engines, sync and async —
in a session's own read/write transaction, as a bare query of a read-only block, and inside
a cacheable function (a miss, then a hit) — and the results are compared exactly: types, a
Decimal's exponent, a float's sign, a datetime's zone, the order of a dict's keys, and the
exceptions raised, if any. The writes of the corpus run in own read/write transactions,
rolled back."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

import txcache
from async_fixtures import fresh_pins
from library_fixtures import wait_for_pin
from postgres_fixtures import fresh_database
from test_sqlalchemy_corpus import SCHEMA, WRITES, exact, plain
from test_sqlalchemy_corpus_queries import CORPUS
from txcache import sqlalchemy as txsa
from txcache.aio import AsyncCache
from txcache.stack import EmbeddedPostgres, Stack, StackOptions

AGENT_ARGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")
EVERY = {**CORPUS, **WRITES}


@dataclass(frozen=True)
class Raised:
    """A query raised: its exception's type and first line (a difference to report, not a
    failure of the comparison)."""

    kind: str
    message: str


def outcome(run: Callable[[], Any]) -> Any:
    """What ``run()`` returns, or the :class:`Raised` it raises."""
    try:
        return run()
    except Exception as error:
        return Raised(type(error).__qualname__, str(error).splitlines()[0])


def in_session(session: Session, name: str) -> Any:
    """The outcome of query ``name`` in ``session`` (closed afterwards: rolled back)."""
    with session:
        return outcome(lambda: EVERY[name](session))


async def in_async_session(session: AsyncSession, name: str) -> Any:
    """The outcome of query ``name`` in ``session``, run in its greenlet (rolled back)."""
    async with session:
        return await session.run_sync(lambda sync: outcome(lambda: EVERY[name](sync)))


def assert_same(expected: dict[str, Any], actual: dict[str, Any], how: str) -> None:
    """Every result of ``actual`` is exactly the one ``expected`` has."""
    problems = [
        f"{name} ({how}):\n    psycopg: {expected[name]!r}\n    txcache: {value!r}"
        for name, value in actual.items()
        if exact(value) != exact(expected[name])
    ]
    assert not problems, "\n".join(problems)


@dataclass
class Corpus:
    """The corpus's database under a stack, a sync cache of it, and what the stock psycopg
    dialect returns for every query (sync: ``expected``; async: ``expected_async``)."""

    stack: Stack
    cache: txcache.Cache
    expected: dict[str, Any] = field(default_factory=dict)
    expected_async: dict[str, Any] = field(default_factory=dict)

    def url(self, driver: str) -> sqlalchemy.URL:
        """The database's URL for SQLAlchemy's ``driver`` (``psycopg``, ``psycopg_async``)."""
        parts = psycopg.conninfo.conninfo_to_dict(self.stack.dsn)
        return sqlalchemy.URL.create(
            f"postgresql+{driver}",
            username=str(parts["user"]),
            host=str(parts["host"]),
            port=int(str(parts["port"])),
            database=str(parts["dbname"]),
        )

    def stock(self) -> dict[str, Any]:
        """Every query's result on SQLAlchemy's own psycopg dialect."""
        engine = sqlalchemy.create_engine(self.url("psycopg"))
        try:
            return {name: in_session(Session(engine), name) for name in EVERY}
        finally:
            engine.dispose()

    async def stock_async(self) -> dict[str, Any]:
        """Every query's result on SQLAlchemy's own psycopg_async dialect."""
        engine = create_async_engine(self.url("psycopg_async"))
        try:
            return {name: await in_async_session(AsyncSession(engine), name) for name in EVERY}
        finally:
            await engine.dispose()

    def settled(self) -> None:
        """Wait until the nodes applied every commit so far and the library knows a pin."""
        self.stack.caught_up()
        wait_for_pin(self.cache)

    def cached(self, read: Callable[[str], Any]) -> list[tuple[str, dict[str, Any]]]:
        """Every read query through ``read`` (a cacheable call in a read-only block), three
        times: misses, then (settled) again, then (settled) hits."""
        passes: list[tuple[str, dict[str, Any]]] = []
        for how in ("miss", "second read", "hit"):
            if passes:
                self.settled()  # the first read of a table may not store: a catalog reading
            passes.append((how, {name: outcome(functools.partial(read, name)) for name in CORPUS}))
        return passes


@pytest.fixture(scope="module")
def corpus(postgres: EmbeddedPostgres) -> Iterator[Corpus]:
    databases = fresh_database(postgres)
    dsn = next(databases)
    options = StackOptions(
        dsn=dsn, nodes=2, max_memory="64mb", schema_sql=SCHEMA, agent_args=AGENT_ARGS
    )
    try:
        with Stack(options) as stack:
            cache = stack.connect(refresh_interval=0.05)
            try:
                made = Corpus(stack, cache)
                made.expected = made.stock()
                made.expected_async = asyncio.run(made.stock_async())
                yield made
            finally:
                cache.close()
    finally:
        next(databases, None)


def test_the_stock_dialects_agree_and_raise_nothing(corpus: Corpus) -> None:
    raised = {name: value for name, value in corpus.expected.items() if isinstance(value, Raised)}
    assert raised == {}
    assert_same(corpus.expected, corpus.expected_async, "async stock")


# -- sync -------------------------------------------------------------------------------------

sessions: sessionmaker[txsa.Session] | None = None
"""The sessions the cacheable function below opens (the running test's)."""


@txcache.cacheable
def cached(name: str) -> Any:
    """A read of the corpus, as a cacheable function returns it: plain data."""
    assert sessions is not None
    with sessions() as session:
        return plain(CORPUS[name](session))


@pytest.fixture
def sync_sessions(corpus: Corpus) -> Iterator[sessionmaker[txsa.Session]]:
    global sessions
    engine = txsa.create_engine(corpus.cache)
    sessions = txsa.sessionmaker(engine)
    yield sessions
    sessions = None
    engine.dispose()


def test_own_read_write_transactions_return_what_psycopg_returns(
    corpus: Corpus, sync_sessions: sessionmaker[txsa.Session]
) -> None:
    actual = {name: in_session(sync_sessions(), name) for name in EVERY}
    assert_same(corpus.expected, actual, "own read/write")


def test_bare_queries_of_a_read_only_block_return_what_psycopg_returns(
    corpus: Corpus, sync_sessions: sessionmaker[txsa.Session]
) -> None:
    actual = {}
    for name in CORPUS:
        with corpus.cache.read_only(staleness=60):
            actual[name] = in_session(sync_sessions(), name)
    assert_same(corpus.expected, actual, "read-only block")


def test_cached_reads_return_what_psycopg_returns_on_a_miss_and_a_hit(
    corpus: Corpus, sync_sessions: sessionmaker[txsa.Session]
) -> None:
    def read(name: str) -> Any:
        with corpus.cache.read_only(staleness=60):
            return cached(name)

    expected = {name: plain(value) for name, value in corpus.expected.items()}
    hits = cached.stats.hits
    for how, actual in corpus.cached(read):
        assert_same(expected, actual, how)
    assert cached.stats.hits - hits >= len(CORPUS)  # the last pass, at least, hit


# -- async ------------------------------------------------------------------------------------

async_sessions: async_sessionmaker[txsa.AsyncSession] | None = None
"""The sessions the async cacheable function below opens (the running test's)."""


@txcache.cacheable
async def cached_async(name: str) -> Any:
    """:func:`cached`, async."""
    assert async_sessions is not None
    async with async_sessions() as session:
        return plain(await session.run_sync(CORPUS[name]))


def with_async_sessions(corpus: Corpus, body: Callable[[AsyncCache], Awaitable[Any]]) -> Any:
    """``body(cache)`` on a new event loop, with :data:`async_sessions` of an async cache
    of the corpus's stack."""

    async def main() -> Any:
        global async_sessions
        stack = corpus.stack
        cache = await txcache.connect_async(
            dsn=stack.dsn,
            nodes=stack.node_addresses,
            agent=stack.agent_address,
            refresh_interval=0.05,
        )
        engine = txsa.create_async_engine(cache)
        async_sessions = txsa.async_sessionmaker(engine)
        try:
            return await body(cache)
        finally:
            async_sessions = None
            await engine.dispose()
            await cache.close()

    return asyncio.run(main())


def test_async_sessions_return_what_psycopg_async_returns(corpus: Corpus) -> None:
    async def body(cache: AsyncCache) -> None:
        assert async_sessions is not None
        own = {name: await in_async_session(async_sessions(), name) for name in EVERY}
        assert_same(corpus.expected_async, own, "async own read/write")
        bare = {}
        for name in CORPUS:
            async with cache.read_only(staleness=60):
                bare[name] = await in_async_session(async_sessions(), name)
        assert_same(corpus.expected_async, bare, "async read-only block")

    with_async_sessions(corpus, body)


def test_async_cached_reads_return_what_psycopg_async_returns(corpus: Corpus) -> None:
    expected = {name: plain(value) for name, value in corpus.expected_async.items()}

    async def body(cache: AsyncCache) -> list[tuple[str, dict[str, Any]]]:
        passes: list[tuple[str, dict[str, Any]]] = []
        for how in ("miss", "second read", "hit"):
            if passes:  # as Corpus.cached
                await asyncio.to_thread(corpus.stack.caught_up)
                await fresh_pins(cache)
            found = {}
            for name in CORPUS:
                async with cache.read_only(staleness=60):
                    found[name] = await outcome_async(cached_async(name))
            passes.append((how, found))
        return passes

    hits = cached_async.stats.hits
    for how, actual in with_async_sessions(corpus, body):
        assert_same(expected, actual, f"async {how}")
    assert cached_async.stats.hits - hits >= len(CORPUS)


async def outcome_async(call: Awaitable[Any]) -> Any:
    """:func:`outcome` of an awaitable."""
    try:
        return await call
    except Exception as error:
        return Raised(type(error).__qualname__, str(error).splitlines()[0])

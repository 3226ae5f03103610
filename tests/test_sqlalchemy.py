"""txcache.sqlalchemy, sync, against a real stack (docs/sqlalchemy.md): ORM and Core
statements run in txcache transactions — checked, tagged from the SQL SQLAlchemy compiles,
and cached as plain data — a session outside any block commits a read/write transaction of
its own and knows its token, a session inside a read/write block works under a savepoint,
and the dialect's own statements stay out of the application's transactions."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import event, func, insert, select, text, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import txcache
from async_fixtures import AsyncLib
from library_fixtures import LibraryStack
from txcache import sqlalchemy as txsa
from txcache._columns import split_tag
from txcache.stack import wait_until


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str]
    price: Mapped[int]
    category: Mapped[int]


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str]


class Shop:
    """The ``lib`` stack with an engine and a sessionmaker of its cache."""

    def __init__(self, lib: LibraryStack) -> None:
        self.lib = lib
        self.engine = txsa.create_engine(lib.cache)
        self.Session = txsa.sessionmaker(self.engine)
        self.statements: list[tuple[str, Any]] = []
        event.listen(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        self.statements.append((statement, params))

    def settled(self, after: int = 0) -> None:
        """Wait until the nodes applied every commit and a pin after ``after`` is known."""
        self.lib.caught_up()
        self.lib.fresh_pins(after=after)


current_shop: Shop | None = None
"""The shop of the running test, whose sessions the cacheable functions below open."""

runs: list[str] = []
"""The runs (misses) of the cacheable functions below."""


@pytest.fixture
def shop(lib: LibraryStack) -> Iterator[Shop]:
    global current_shop
    made = Shop(lib)
    made.settled()
    current_shop = made
    yield made
    current_shop = None
    made.engine.dispose()


def session() -> txsa.Session:
    """A session of the running test's engine: the cacheable functions open their own, and
    it joins the current txcache transaction."""
    assert current_shop is not None
    return current_shop.Session()


@txcache.cacheable
def item(item_id: int) -> dict[str, Any] | None:
    runs.append(f"item {item_id}")
    with session() as s:
        found = s.get(Item, item_id)
        return None if found is None else txsa.to_dict(found)


@txcache.cacheable
def names_in(category: int) -> list[tuple[Any, ...]]:
    runs.append(f"names_in {category}")
    with session() as s:
        statement = select(Item.id, Item.name).where(Item.category == category)
        return txsa.rows(s.execute(statement.order_by(Item.id)))


@txcache.cacheable
def cheapest(limit: int) -> list[dict[str, Any]]:
    with session() as s:
        statement = select(Item.id, Item.price).order_by(Item.price, Item.id).limit(limit)
        return txsa.dicts(s.execute(statement))


@txcache.cacheable
def orm_instance(item_id: int) -> Item | None:
    with session() as s:
        return s.get(Item, item_id)


def read(shop: Shop, function: Any, *args: Any, not_before: int | None = None) -> Any:
    with shop.lib.cache.read_only(staleness=60, not_before=not_before):
        return function(*args)


def warm(shop: Shop, function: Any, *args: Any) -> Any:
    """Read until a read is a hit (the first may not store: it read the catalog anew)."""
    first = read(shop, function, *args)
    shop.settled()
    assert read(shop, function, *args) == first
    runs.clear()
    assert read(shop, function, *args) == first
    assert runs == [], "the last read should have been a hit"
    return first


def test_a_cached_orm_query_returns_the_same_plain_data_on_a_hit(shop: Shop) -> None:
    before: dict[str, Any] = item.stats.as_dict()
    miss = read(shop, item, 3)
    assert miss == {"id": 3, "name": "item 3", "price": 30, "category": 0}
    hit = warm(shop, item, 3)
    assert hit == miss
    assert list(hit) == ["id", "name", "price", "category"]  # the mapper's order, both ways
    assert item.stats.hits > before["hits"]
    assert read(shop, item, 999) is None
    rows = warm(shop, names_in, 1)
    assert rows == [(1, "item 1"), (4, "item 4"), (7, "item 7"), (10, "item 10"), (13, "item 13"),
                    (16, "item 16"), (19, "item 19")]  # fmt: skip
    assert all(type(row) is tuple for row in rows)
    assert warm(shop, cheapest, 2) == [{"id": 1, "price": 10}, {"id": 2, "price": 20}]


def test_tags_come_from_the_sql_sqlalchemy_compiles(shop: Shop) -> None:
    cache = shop.lib.cache
    statements = {
        "pk": select(Item).where(Item.id == 5),
        "in": select(Item).where(Item.id.in_([1, 2])),
        "index": select(func.count()).select_from(Item).where(Item.category == 2),
        "limit": select(Item.name).where(Item.id == 7).limit(1),
        "no index": select(Item.id).where(Item.name == "item 3"),
    }
    seen: dict[str, tuple[str, Any]] = {}
    with cache.read_only(staleness=60) as tx, shop.Session() as s:
        for name, statement in statements.items():
            shop.statements.clear()
            s.execute(statement).all()
            [seen[name]] = shop.statements
        assert tx.snapshot is not None
        at = tx.snapshot.ts
    tags = {
        name: {split_tag(tag)[0] for tag in cache.analyze(sql, params, at)[0]}
        for name, (sql, params) in seen.items()
    }
    assert "%(" in seen["pk"][0]  # SQLAlchemy's psycopg dialect: pyformat, with bind casts
    assert "::INTEGER" in seen["pk"][0]
    assert tags == {
        "pk": {"public.items:id=5"},
        "in": {"public.items:id=1", "public.items:id=2"},
        "index": {"public.items:category=2"},
        "limit": {"public.items:id=7"},
        "no index": {"public.items"},
    }


def test_a_write_elsewhere_invalidates_exactly_the_cached_queries_it_touched(shop: Shop) -> None:
    lib = shop.lib
    warm(shop, names_in, 1)
    warm(shop, item, 5)
    lib.write("UPDATE items SET name = 'renamed' WHERE id = 4")  # category 1, not item 5
    token = lib.cache.timestamp()  # a token for a write made outside the library
    runs.clear()
    assert read(shop, item, 5, not_before=token)["name"] == "item 5"
    assert runs == []  # a fine tag: item 5 was not touched
    assert (4, "renamed") in read(shop, names_in, 1, not_before=token)
    assert runs == ["names_in 1"]


def test_the_dialect_initialises_on_a_plain_connection(shop: Shop) -> None:
    # A new engine whose very first statement is a cacheable function's: the dialect's
    # `select pg_catalog.version()` and the like would be refused there (UncacheableQuery)
    # and are not the application's reads, so they run beside the transaction.
    shop.engine = txsa.create_engine(shop.lib.cache)
    shop.Session = txsa.sessionmaker(shop.engine)
    with shop.lib.cache.read_only(staleness=60) as tx:
        assert item(2) == {"id": 2, "name": "item 2", "price": 20, "category": 2}
        assert not tx.failed
        assert tx.rewrite_checks == 1  # the function's one query went through it, alone
    assert shop.engine.dialect.server_version_info is not None
    assert shop.engine.dialect.server_version_info >= (15,)


def test_a_read_only_block_refuses_writes_and_transaction_control_and_goes_on(shop: Shop) -> None:
    with shop.lib.cache.read_only(staleness=60) as tx, shop.Session() as s:
        s.add(Item(id=100, name="new", price=1, category=1))
        with pytest.raises(txcache.StatementNotAllowed, match="INSERT"):
            s.flush()
        s.rollback()
        s.begin_nested()  # sent with the next statement
        with pytest.raises(txcache.StatementNotAllowed, match="SAVEPOINT"):
            s.scalar(select(Item.id))
        s.rollback()
        with pytest.raises(txcache.StatementNotAllowed, match="SET"):
            s.execute(text("SET search_path TO other"))
        s.rollback()
        assert s.scalar(select(func.count()).select_from(Item)) == 20  # nothing was sent
        assert not tx.failed
    assert shop.lib.admin.execute("SELECT count(*) FROM items").fetchone() == (20,)


def test_storing_an_orm_instance_names_what_to_return_instead(shop: Shop) -> None:
    with (
        shop.lib.cache.read_only(staleness=60),
        pytest.raises(txcache.UnsupportedValue, match=r"to_dict\(instance\)"),
    ):
        orm_instance(1)
    with shop.lib.cache.read_only(staleness=60), shop.Session() as s:
        row = s.execute(select(Item.id)).first()
        with pytest.raises(txcache.UnsupportedValue, match=r"rows\(result\)"):
            shop.lib.cache.serializer.dumps(row)


def test_a_session_outside_a_block_commits_its_own_transaction_and_knows_the_token(
    shop: Shop,
) -> None:
    warm(shop, item, 6)
    with shop.Session() as s:
        assert s.commit_timestamp is None
        found = s.get(Item, 6)
        assert found is not None
        found.price = 1234
        s.flush()
        # The session's transaction is its own, not the thread's: a cacheable call meanwhile
        # runs in an implicit read-only transaction, at a pin, without the flushed write.
        assert txcache.current_transaction() is None
        cached = item(6)
        assert cached is not None
        assert cached["price"] == 60
        s.commit()
        token = s.commit_timestamp
    assert isinstance(token, int)
    assert read(shop, item, 6, not_before=token)["price"] == 1234
    assert shop.lib.admin.execute("SELECT price FROM items WHERE id = 6").fetchone() == (1234,)


def test_a_session_that_does_not_commit_writes_nothing(shop: Shop) -> None:
    with shop.Session() as s:
        s.add(Item(id=101, name="gone", price=1, category=1))
        s.flush()
        s.rollback()
        s.add(Item(id=102, name="gone too", price=1, category=1))
        s.flush()
    assert s.commit_timestamp is None
    assert shop.lib.admin.execute("SELECT count(*) FROM items WHERE id > 100").fetchone() == (0,)


def test_sessions_inside_a_read_write_block_work_under_a_savepoint(shop: Shop) -> None:
    lib = shop.lib
    with lib.cache.read_write() as tx:
        with shop.Session() as s:
            s.add(Item(id=110, name="undone", price=1, category=1))
            s.flush()
            s.rollback()  # undoes the session's work, not the block's
        tx.execute("INSERT INTO users VALUES (10, 'kept')")
        with shop.Session() as s:
            s.add(Item(id=111, name="kept", price=1, category=1))
            s.add(Item(id=1, name="duplicate", price=1, category=1))
            with pytest.raises(sqlalchemy.exc.IntegrityError):
                s.flush()
            s.rollback()  # back to the savepoint: the block goes on
            s.add(Item(id=112, name="kept", price=2, category=1))
            s.commit()
            with pytest.raises(txcache.TransactionError, match="block's commit_timestamp"):
                _ = s.commit_timestamp
        with shop.Session() as s:
            s.add(Item(id=113, name="never committed", price=1, category=1))
            s.flush()  # closed without commit: rolled back to its savepoint
    token = tx.commit_timestamp
    assert token is not None
    rows = lib.admin.execute("SELECT id FROM items WHERE id > 100 ORDER BY id").fetchall()
    assert rows == [(112,)]
    assert lib.admin.execute("SELECT name FROM users WHERE id = 10").fetchone() == ("kept",)
    shop.settled(after=token - 1)
    assert read(shop, item, 112, not_before=token)["price"] == 2


def test_bulk_writes_and_core_connections(shop: Shop) -> None:
    with shop.Session() as s:
        s.execute(update(Item), [{"id": 1, "price": 11}, {"id": 2, "price": 22}])  # executemany
        s.execute(insert(User), [{"id": 20, "name": "a"}, {"id": 21, "name": "b"}])
        s.commit()
        token = s.commit_timestamp
    assert token is not None
    with shop.engine.begin() as conn:  # Core, outside a block: its own transaction
        conn.execute(update(User).where(User.id == 20).values(name="core"))
    with shop.lib.cache.read_only(staleness=60, not_before=token), shop.engine.connect() as conn:
        prices = conn.execute(select(Item.price).where(Item.id.in_([1, 2])).order_by(Item.id))
        assert prices.scalars().all() == [11, 22]
        streamed = conn.execution_options(stream_results=True, yield_per=3)  # no DECLARE
        ids = streamed.execute(select(Item.id).order_by(Item.id)).scalars()
        assert [len(part) for part in ids.partitions()] == [3, 3, 3, 3, 3, 3, 2]
    assert shop.lib.admin.execute("SELECT name FROM users WHERE id = 20").fetchone() == ("core",)


def test_isolation_levels_apply_to_a_sessions_own_transactions(shop: Shop) -> None:
    serializable = shop.engine.execution_options(isolation_level="SERIALIZABLE")
    with serializable.connect() as conn:
        level = conn.execute(text("SHOW transaction_isolation")).scalar()
        assert level == "serializable"
        conn.rollback()
    with shop.lib.cache.read_write(), serializable.connect() as conn:
        level = conn.execute(text("SHOW transaction_isolation")).scalar()
        assert level == "read committed"  # inside a block, the block's
    with (
        pytest.raises(txcache.TransactionError, match="AUTOCOMMIT"),
        shop.engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn,
    ):
        conn.execute(text("SELECT 1"))


def test_what_txcache_owns_is_refused_and_the_apis_do_not_mix(shop: Shop, alib: AsyncLib) -> None:
    for argument in ("poolclass", "creator", "json_serializer", "use_native_hstore"):
        with pytest.raises(TypeError, match=argument):
            txsa.create_engine(shop.lib.cache, **{argument: None})

    async def body(cache: txcache.AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            with shop.Session() as s, pytest.raises(txcache.TransactionError, match="async"):
                s.get(Item, 1)

    alib.run(body)
    other = shop.lib.connect()
    # Closed only once its nodes answered the start-up question it asks in the background
    # (a close before that answer leaves that thread's socket open).
    wait_until(lambda: other.nodes_max_staleness is not None, "the nodes' max staleness")
    try:
        with (
            other.read_only(),
            shop.Session() as s,
            pytest.raises(txcache.TransactionError, match="another cache"),
        ):
            s.get(Item, 1)
    finally:
        other.close()


def test_errors_of_the_database_reach_sqlalchemy_as_its_own(shop: Shop) -> None:
    with shop.lib.cache.read_only(staleness=60) as tx, shop.Session() as s:
        with pytest.raises(sqlalchemy.exc.DataError) as caught:
            s.execute(text("SELECT 1 / 0"))
        assert isinstance(caught.value.orig, psycopg.errors.DivisionByZero)
        assert tx.failed  # txcache's rule: a failed statement fails the read-only block


def test_the_plain_data_helpers_say_what_they_take(shop: Shop) -> None:
    """Rows to ``to_dict``, instances to ``dicts``/``rows``: a ``TypeError`` naming the
    helper to use, not SQLAlchemy's own error from deep inside."""
    with shop.lib.cache.read_only(staleness=60), shop.Session() as s:
        row = s.execute(select(Item.id, Item.name).where(Item.id == 1)).one()
        with pytest.raises(TypeError, match=r"to_dict\(\) takes an ORM instance.*dicts"):
            txsa.to_dict(row)
        with pytest.raises(TypeError, match="mapped class"):
            txsa.to_dict(Item)
        instances = s.scalars(select(Item).where(Item.id == 1)).all()
        for helper in (txsa.dicts, txsa.rows):
            with pytest.raises(TypeError, match=r"got a Item: to_dict\(\) each instance"):
                helper(instances)  # type: ignore[arg-type]
        assert txsa.dicts([row]) == [{"id": 1, "name": "item 1"}]
        assert txsa.to_dict(instances[0])["id"] == 1


def test_the_public_names() -> None:
    assert sorted(txsa.__all__) == [
        "AsyncSession",
        "Session",
        "async_sessionmaker",
        "commit_timestamp",
        "commit_timestamp_async",
        "create_async_engine",
        "create_engine",
        "dicts",
        "rows",
        "sessionmaker",
        "to_dict",
    ]
    assert all(hasattr(txsa, name) for name in txsa.__all__)


# -- tenants by schema_translate_map -----------------------------------------------------

TENANTS = """
CREATE SCHEMA tenant_a;
CREATE SCHEMA tenant_b;
CREATE TABLE tenant_a.items (LIKE public.items INCLUDING ALL);
CREATE TABLE tenant_b.items (LIKE public.items INCLUDING ALL);
INSERT INTO tenant_a.items VALUES (1, 'a secret', 1, 1);
INSERT INTO tenant_b.items VALUES (1, 'b secret', 1, 1);
"""

request_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("request_tenant")
"""A web framework's request state: the schema of the request's tenant."""


def tenant_session(schema: str) -> txsa.Session:
    """A session whose unqualified tables are ``schema``'s."""
    assert current_shop is not None
    engine = current_shop.engine.execution_options(schema_translate_map={None: schema})
    return txsa.Session(engine)


@txcache.cacheable
def tenant_item_name(schema: str, item_id: int) -> str:
    with tenant_session(schema) as s:
        return s.get_one(Item, item_id).name


@txcache.cacheable
def tenant_item_name_in(tenant: dict[str, str], item_id: int) -> str:
    with tenant_session(tenant["schema"]) as s:
        return s.get_one(Item, item_id).name


@txcache.cacheable
def request_tenant_item_name(item_id: int) -> str:
    with tenant_session(request_tenant.get()) as s:
        return s.get_one(Item, item_id).name


def test_a_schema_translate_map_must_be_named_by_the_arguments(shop: Shop) -> None:
    """A translated schema that is an argument is in the key: each tenant gets its own
    value, hits included. One a request's state picked is not: the query is refused, not
    cached under a key another tenant shares."""
    shop.lib.write(TENANTS)
    txcache.setup_database(shop.lib.dsn, schemas=("public", "tenant_a", "tenant_b"))
    shop.settled()
    for _ in range(3):
        with shop.lib.cache.read_only(staleness=60):
            assert tenant_item_name("tenant_a", 1) == "a secret"
            assert tenant_item_name("tenant_b", 1) == "b secret"
    assert tenant_item_name.stats.hits > 0, "both stored, then served to their own tenant"
    with shop.lib.cache.read_only(staleness=60):  # a string inside an argument is in the key
        assert tenant_item_name_in({"schema": "tenant_b"}, 1) == "b secret"
    request_tenant.set("tenant_a")
    refused = pytest.raises(txcache.UncacheableQuery, match="tenant_a, which are not among")
    with shop.lib.cache.read_only(staleness=60), refused:
        request_tenant_item_name(1)


global_session: txsa.Session | None = None
"""A session kept across blocks, as a Flask-style ``scoped_session`` is."""


@txcache.cacheable
def price_in_global_session(item_id: int) -> int | None:
    assert global_session is not None
    return global_session.scalar(select(Item.price).where(Item.id == item_id))


def test_a_session_in_its_own_transaction_is_refused_inside_a_block(shop: Shop) -> None:
    """A session whose transaction began outside the block would read in that transaction:
    outside the block's snapshot, and a cacheable function would store its write that is
    never committed. Refused; once the session ended its transaction, it joins the block."""
    global global_session
    global_session = shop.Session()
    try:
        global_session.execute(update(Item).where(Item.id == 3).values(price=-999))
        refused = pytest.raises(txcache.TransactionError, match="began its transaction outside")
        with shop.lib.cache.read_only(staleness=60), refused:
            price_in_global_session(3)
        global_session.rollback()
        for _ in range(2):
            with shop.lib.cache.read_only(staleness=60):
                assert price_in_global_session(3) == 30
    finally:
        global_session.close()
        global_session = None
    assert shop.lib.admin.execute("SELECT price FROM items WHERE id = 3").fetchone() == (30,)


def test_a_session_used_after_its_read_only_block_says_the_block_ended(shop: Shop) -> None:
    with shop.Session() as s:
        with shop.lib.cache.read_only(staleness=60):
            assert s.scalar(select(Item.price).where(Item.id == 3)) == 30
        with pytest.raises(txcache.TransactionError, match="read-only transaction has ended"):
            s.execute(update(Item).where(Item.id == 3).values(price=1))


def test_the_connect_event_cannot_change_the_cache_s_shared_sessions(shop: Shop) -> None:
    """A ``SET`` in a ``connect`` listener would not apply to the connection's statements
    (they run on the cache's pooled connections) and could reach other users: refused. What
    a function changes unseen is rolled back with the statement."""
    shop.lib.write(
        "CREATE FUNCTION set_tokyo() RETURNS text LANGUAGE plpgsql AS $$ "
        "BEGIN SET TimeZone = 'Asia/Tokyo'; RETURN current_setting('TimeZone'); END $$"
    )
    with txcache.connect(shop.lib.dsn, nodes=(), mode="bypass", pool_size=1) as cache:
        refused = txsa.create_engine(cache)
        event.listen(
            refused,
            "connect",
            lambda connection, _: connection.cursor().execute("SET search_path TO pg_catalog"),
            insert=True,  # before txcache's own: as a listener on the Engine class runs
        )
        with pytest.raises(txcache.StatementNotAllowed, match="connect event"), refused.connect():
            pass
        refused.dispose()
        seen: list[str] = []

        def unseen(connection: Any, _: Any) -> None:
            cursor = connection.cursor()
            cursor.execute("SELECT set_tokyo()")
            seen.append(cursor.fetchone()[0])

        engine = txsa.create_engine(cache)
        event.listen(engine, "connect", unseen, insert=True)
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT 1")) == 1
        engine.dispose()
        assert seen == ["Asia/Tokyo"]
        with cache.read_only():
            assert txcache.query_one("SELECT current_setting('TimeZone')") != ("Asia/Tokyo",)

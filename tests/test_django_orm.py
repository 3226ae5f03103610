"""The Django ORM in txcache transactions, on a real stack (docs/django.md, "The database
backend"): inside a read-only transaction its queries run at the pinned snapshot, checked
and tagged from the SQL Django compiles, so a cacheable function may use querysets,
``select_related`` and aggregates; inside a read/write one its writes run in the
transaction and ``commit_timestamp`` covers them; outside any, Django is Django."""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import IntegrityError, connections, transaction
from django.db.models import Count, Sum
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import txcache
import txcache.django
from django_fixtures import CHANGED, Category, DjangoShop, Item, start_shop
from txcache._columns import ROWS, column_bit, split_tag, with_columns
from txcache.django import conf
from txcache.django.db.cursor import TransactionCursor
from txcache.stack import EmbeddedPostgres, wait_until

runs: list[str] = []
"""The runs (misses) of the cacheable functions below."""


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    yield from start_shop(postgres)


@pytest.fixture(autouse=True)
def no_runs() -> None:
    runs.clear()


@txcache.cacheable
def items_in(category_id: int) -> list[dict[str, Any]]:
    runs.append(f"items_in {category_id}")
    found = Item.objects.filter(category_id=category_id).order_by("id")
    return list(found.values("id", "name", "price", "details", "changed"))


@txcache.cacheable
def with_category(item_id: int) -> tuple[str, str, int]:
    runs.append(f"with_category {item_id}")
    item = Item.objects.select_related("category").get(id=item_id)
    return item.name, item.category.name, item.price


@txcache.cacheable
def totals() -> list[tuple[str, int, int]]:
    runs.append("totals")
    per_category = Category.objects.annotate(count=Count("items"), total=Sum("items__price"))
    return list(per_category.order_by("name").values_list("name", "count", "total"))


@txcache.cacheable
def raw_names(category_id: int) -> list[str]:
    runs.append(f"raw_names {category_id}")
    found = Item.objects.raw(
        "SELECT id, name FROM shop_item WHERE category_id = %s ORDER BY id", [category_id]
    )
    return [item.name for item in found]


@txcache.cacheable
def an_instance(item_id: int) -> object:  # an Item (Django's models are untyped)
    return Item.objects.get(id=item_id)


@txcache.cacheable
def price_of(item_id: int) -> int:
    runs.append(f"price_of {item_id}")
    return int(Item.objects.get(id=item_id).price)


@txcache.cacheable
def plain_price(item_id: int) -> int:
    runs.append(f"plain_price {item_id}")
    return int(Item.objects.using("plain").get(id=item_id).price)


@txcache.cacheable
def routed_price(item_id: int) -> int:
    runs.append(f"routed_price {item_id}")
    return int(Item.objects.get(id=item_id).price)  # where the routers say


class ToPlain:
    """A database router that sends every read to the ``plain`` alias."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "plain"


def read(shop: DjangoShop, function: Any, *args: Any, not_before: int | None = None) -> Any:
    with txcache.django.read_only(staleness=60, not_before=not_before):
        return function(*args)


def warm(shop: DjangoShop, function: Any, *args: Any) -> Any:
    """Read until a read is a hit (the first read of a table may not store: it read the
    catalog anew, and a result is stored only once the agent's stream passed that)."""
    first = read(shop, function, *args)

    def hit() -> bool:
        runs.clear()
        assert read(shop, function, *args) == first
        return not runs

    wait_until(hit, f"a hit of {function.__name__}{args}", timeout=20)
    return first


def test_orm_reads_in_a_cacheable_function_hit_on_the_second_call(shop: DjangoShop) -> None:
    before = items_in.stats.hits
    rows = warm(shop, items_in, 1)
    assert [row["id"] for row in rows] == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    first = rows[0]
    # Loaded as Django's own connection loads them: jsonb parsed by the field, timestamptz
    # in UTC — and a hit returns exactly what the miss returned.
    assert first["details"] == {"size": 3, "tags": ["a"]}
    assert first["changed"] == datetime.datetime.fromisoformat(CHANGED + ":00")
    assert first["changed"].tzinfo == datetime.UTC
    assert items_in.stats.hits > before
    assert warm(shop, with_category, 4) == ("item 4", "desks", 40)
    assert warm(shop, totals) == [("chairs", 10, 1550), ("desks", 10, 1450), ("lamps", 10, 1650)]


def test_raw_queries_and_iterator_run_in_the_transaction(shop: DjangoShop) -> None:
    names = warm(shop, raw_names, 1)
    assert names[:2] == ["item 3", "item 6"]
    with txcache.django.read_only():
        ids = [item.id for item in Item.objects.filter(category_id=1).iterator(chunk_size=4)]
    assert ids == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]


def test_queries_are_tagged_from_the_sql_django_compiles(shop: DjangoShop) -> None:
    cache = shop.cache
    shop.settled()
    with txcache.django.read_only() as tx:
        Item.objects.filter(id=1).exists()  # the transaction's snapshot: a pin
        assert tx.snapshot is not None
        snapshot = tx.snapshot.ts
    query = Item.objects.filter(category_id=2).values("id").query
    statement, params = query.sql_with_params()
    tags, _catalog = cache.analyze(statement, params, snapshot)
    read = ROWS | column_bit("id") | column_bit("category_id")  # the columns the SQL names
    assert tags == frozenset({with_columns("public.shop_item:category_id=2", read)})
    statement, params = Item.objects.filter(id__in=[4, 5]).query.sql_with_params()
    tags = cache.analyze(statement, params, snapshot)[0]
    assert {split_tag(tag)[0] for tag in tags} == {"public.shop_item:id=4", "public.shop_item:id=5"}


def test_a_write_by_another_program_invalidates_a_cached_orm_read(shop: DjangoShop) -> None:
    warm(shop, items_in, 2)
    warm(shop, with_category, 7)
    untouched = warm(shop, items_in, 3)
    shop.admin.execute("UPDATE shop_item SET price = 777 WHERE id = 7")
    token = shop.cache.timestamp()  # the token of a write made outside the library
    runs.clear()
    rows = read(shop, items_in, 2, not_before=token)
    assert {row["id"]: row["price"] for row in rows}[7] == 777
    assert read(shop, with_category, 7, not_before=token) == ("item 7", "desks", 777)
    assert runs == ["items_in 2", "with_category 7"]  # both recomputed
    runs.clear()
    # The write's tags name category 2 and item 7: category 3's result is still a hit.
    assert read(shop, items_in, 3, not_before=token) == untouched
    assert runs == []


def test_orm_writes_in_read_write_are_covered_by_its_token(shop: DjangoShop) -> None:
    warm(shop, items_in, 3)  # category 3: items 2, 5, 8, … 29
    with txcache.django.read_write() as tx:
        Item.objects.filter(id=11).update(price=1111)
        item = Item.objects.get(id=14)
        item.price = 1414
        item.save()
        Item.objects.bulk_create(
            [Item(id=500, name="new", price=5, category_id=3, changed=item.changed)]
        )
        Item.objects.filter(id=17).delete()
        assert Item.objects.get(id=11).price == 1111  # it reads its own writes
    token = tx.commit_timestamp
    assert token is not None
    rows = {row["id"]: row["price"] for row in read(shop, items_in, 3, not_before=token)}
    assert rows[11] == 1111
    assert rows[14] == 1414
    assert rows[500] == 5
    assert 17 not in rows
    assert runs == ["items_in 3"]


def test_atomic_inside_read_write_is_a_savepoint(shop: DjangoShop) -> None:
    with txcache.django.read_write() as tx:
        Item.objects.filter(id=19).update(price=1919)
        with pytest.raises(IntegrityError):
            create_categories("extra", "lamps")  # a unique name: the atomic block fails
        assert not Category.objects.filter(name="extra").exists()
        with transaction.atomic():
            Category.objects.create(name="sofas")
    assert tx.commit_timestamp is not None
    with txcache.django.read_only(not_before=tx.commit_timestamp):
        assert Item.objects.get(id=19).price == 1919
        assert Category.objects.filter(name="sofas").exists()
        assert not Category.objects.filter(name="extra").exists()


def test_an_atomic_block_left_after_its_txcache_transaction_is_refused_once(
    shop: DjangoShop,
) -> None:
    """A generator's ``atomic()`` block begun inside ``read_write()`` and left after it: its
    end is refused (its savepoint committed with the txcache transaction), and the thread
    goes on — Django's and the route's state agree again."""

    def rename() -> Iterator[None]:
        with transaction.atomic():
            Category.objects.filter(name="chairs").update(name="stools")
            yield

    steps = rename()
    with txcache.django.read_write() as tx:
        next(steps)
    with pytest.raises(txcache.TransactionError, match="which ended before it"):
        next(steps)
    assert Category.objects.filter(name="stools").exists()  # Django's own connection works
    with txcache.django.read_only(not_before=tx.commit_timestamp):
        assert Category.objects.filter(name="stools").exists()
    with txcache.django.read_write():
        Category.objects.filter(name="stools").update(name="chairs")


def create_categories(*names: str) -> None:
    with transaction.atomic():
        for name in names:
            Category.objects.create(name=name)


def test_a_read_only_transaction_refuses_writes_and_goes_on(shop: DjangoShop) -> None:
    with txcache.django.read_only():
        with pytest.raises(txcache.StatementNotAllowed):
            Item.objects.filter(id=1).update(price=0)
        with transaction.atomic():  # nothing to do in the database: one snapshot
            assert Item.objects.get(id=1).price == 10
            with transaction.atomic():
                assert Item.objects.count() >= 30


def test_statements_run_in_the_current_transaction_and_django_is_django_outside(
    shop: DjangoShop,
) -> None:
    connections["default"].close()
    with txcache.django.read_only():
        with connections["default"].cursor() as cursor:
            assert isinstance(cursor.cursor, TransactionCursor)
            cursor.execute("SELECT count(*) FROM shop_category")
            assert cursor.fetchone()[0] >= 3
        assert connections["default"].connection is None  # Django's own never opened
    assert Item.objects.filter(id=1).exists()  # outside: Django's own connection
    assert connections["default"].connection is not None
    with connections["default"].cursor() as cursor:
        assert not isinstance(cursor.cursor, TransactionCursor)
    with transaction.atomic():
        Category.objects.create(name="outside")
        assert Category.objects.filter(name="outside").exists()
        transaction.set_rollback(True)
    assert not Category.objects.filter(name="outside").exists()
    assert Item.objects.get(id=2).details == {"size": 2, "tags": ["a"]}


def test_sql_with_parameters_merged_in_is_django_s_inside_and_outside(shop: DjangoShop) -> None:
    statement, params = "SELECT %s, %s, %s, '%%'", ["it's", 5, None]
    outside = connections["default"].ops.compose_sql(statement, params)
    assert outside == "SELECT 'it''s', 5, NULL, '%'"
    with txcache.django.read_only(), CaptureQueriesContext(connections["default"]) as seen:
        assert connections["default"].ops.compose_sql(statement, params) == outside
        assert Item.objects.filter(name="item 5").exists()
    assert '"shop_item"."name" = \'item 5\'' in seen.captured_queries[0]["sql"]


def test_a_txcache_transaction_cannot_begin_inside_a_django_transaction(shop: DjangoShop) -> None:
    warm(shop, price_of, 4)
    refused = "cannot begin inside a Django transaction"
    with transaction.atomic():  # on Django's own connection
        assert Item.objects.filter(id=22).exists()
        for begin in (txcache.django.read_only, txcache.django.read_write, shop.cache.read_only):
            with pytest.raises(txcache.TransactionError, match=refused), begin():
                price_of(4)  # a hit, had the block begun
        assert Item.objects.filter(id=22).exists()  # the atomic() block goes on
    with txcache.django.read_only(), transaction.atomic():  # the other way round
        assert price_of(4) == 40


def test_in_a_django_transaction_cacheable_calls_run_uncached_on_its_connection(
    shop: DjangoShop,
) -> None:
    warm(shop, price_of, 2)  # a hit would return 20
    uncached = price_of.stats.uncached
    with transaction.atomic():  # on Django's own connection
        Item.objects.filter(id=2).update(price=222)
        runs.clear()
        assert price_of(2) == 222  # its uncommitted write: the call ran there, hit or not
        assert price_of(3) == 30  # and so does a miss
        assert runs == ["price_of 2", "price_of 3"]
        transaction.set_rollback(True)
    transaction.set_autocommit(False)  # a Django transaction too
    try:
        Item.objects.filter(id=2).update(price=2222)
        assert price_of(2) == 2222
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)
    assert price_of.stats.uncached == uncached + 3
    runs.clear()
    assert price_of(2) == 20  # outside: an implicit read-only transaction again, a hit
    assert runs == []
    with transaction.atomic():  # its connection closed inside: that transaction is over
        connections["default"].close()
    with txcache.django.read_only():
        assert price_of(2) == 20
    assert runs == []


def test_on_commit_callbacks_run_after_the_read_write_commit(shop: DjangoShop) -> None:
    ran: list[str] = []
    with txcache.django.read_write():
        transaction.on_commit(lambda: ran.append("outside atomic"))
        with transaction.atomic():
            transaction.on_commit(lambda: ran.append("in atomic"))
        with pytest.raises(RuntimeError):
            register_then_fail(transaction.atomic(), lambda: ran.append("rolled back"))
        assert ran == []
    assert ran == ["outside atomic", "in atomic"]
    ran.clear()
    with pytest.raises(RuntimeError):
        register_then_fail(txcache.django.read_write(), lambda: ran.append("never"))
    assert ran == []
    with shop.cache.read_write(), pytest.raises(txcache.TransactionError, match="on_commit"):
        transaction.on_commit(lambda: ran.append("nobody runs it"))


def test_the_rollback_flag_rolls_a_read_write_transaction_back(shop: DjangoShop) -> None:
    ran: list[str] = []
    with txcache.django.read_write() as tx:
        Item.objects.filter(id=25).update(price=2525)
        transaction.on_commit(lambda: ran.append("committed"))
        assert transaction.get_rollback() is False
        transaction.set_rollback(True)  # outside any atomic() block: the whole transaction
        assert transaction.get_rollback() is True
    with pytest.raises(txcache.TransactionError, match="after the commit"):
        _ = tx.commit_timestamp  # never committed
    assert ran == []
    assert Item.objects.get(id=25).price == 250
    with shop.cache.read_write(), pytest.raises(txcache.TransactionError, match="set_rollback"):
        transaction.set_rollback(True)  # a bare block: nobody would read the flag


def test_durability_cannot_be_promised_inside_a_read_write_transaction(shop: DjangoShop) -> None:
    with txcache.django.read_write():
        durable = transaction.atomic(durable=True)
        with pytest.raises(txcache.TransactionError, match="durable=True"), durable:
            Category.objects.create(name="durable")  # it would commit with the transaction
        with pytest.raises(txcache.TransactionError, match="set_autocommit"):
            transaction.set_autocommit(False)  # a transaction.commit() would commit nothing
        Category.objects.create(name="after durable")  # the transaction goes on
    with transaction.atomic(durable=True):  # outside: Django's own, durable indeed
        Category.objects.create(name="durable outside")
    names = set(Category.objects.values_list("name", flat=True))
    assert {"after durable", "durable outside"} <= names
    assert "durable" not in names


def register_then_fail(block: Any, callback: Any) -> None:
    with block:
        transaction.on_commit(callback)
        raise RuntimeError("the block fails")


def test_a_model_instance_is_refused_as_a_cached_value(shop: DjangoShop) -> None:
    with (
        txcache.django.read_only(),
        pytest.raises(txcache.UnsupportedValue, match=r"\.txcache\(\)"),
    ):
        an_instance(1)


def test_another_database_inside_a_cacheable_function_is_refused(shop: DjangoShop) -> None:
    refused = r"database 'plain' inside a cacheable function"
    with txcache.django.read_only():
        with pytest.raises(txcache.TransactionError, match=refused):
            plain_price(1)  # its result would be cached without the query's tags
        with override_settings(DATABASE_ROUTERS=[f"{__name__}.ToPlain"]):
            with pytest.raises(txcache.TransactionError, match=refused):
                routed_price(1)
            assert Item.objects.get(id=1).price == 10  # outside a function: plain Django
    assert plain_price.stats.errors == 1
    assert sum(plain_price.stats.inserts.values()) == 0
    with txcache.django.read_write():  # cacheable functions run uncached: nothing to refuse
        assert plain_price(1) == 10


def test_a_cacheable_call_before_any_cache_connects_the_process_s_cache(
    shop: DjangoShop,
) -> None:
    """A worker or a management command that never asked for the cache: its first
    cacheable call outside any transaction connects the process's cache, and is cached."""
    conf.close()
    assert txcache.default_cache() is None
    assert price_of(2) == 20  # an implicit transaction
    assert isinstance(txcache.default_cache(), conf.DjangoCache)

    def hit() -> bool:
        runs.clear()
        assert price_of(2) == 20
        return not runs

    wait_until(hit, "an implicit cacheable call that hits", timeout=20)


def test_a_cursor_made_before_a_txcache_transaction_is_refused_inside_it(shop: DjangoShop) -> None:
    with connections["default"].cursor() as cursor:  # Django's own connection
        with txcache.django.read_write(), pytest.raises(txcache.TransactionError, match="before"):
            cursor.execute("UPDATE shop_item SET price = 0 WHERE id = 24")
        with txcache.django.read_only(), pytest.raises(txcache.TransactionError, match="before"):
            cursor.execute("SELECT price FROM shop_item WHERE id = 24")
        cursor.execute("SELECT price FROM shop_item WHERE id = 24")  # outside again: Django's
        assert cursor.fetchone() == (240,)


def test_a_forked_worker_connects_a_cache_of_its_own(shop: DjangoShop) -> None:
    """A pre-forking server whose parent connected before the fork (gunicorn
    ``--preload``): the worker's ``get_cache()`` is a new cache, which works, and the
    parent's stays the parent's."""
    parent = txcache.django.get_cache()
    assert warm(shop, price_of, 1) == 10
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the worker: report, and leave at once
        status = 1
        try:
            mine = txcache.django.get_cache()
            with txcache.django.read_only():
                fresh = mine is not parent and price_of(1) == 10
            status = 0 if fresh else 2
        finally:
            os.write(write, bytes([status]))
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"\x00", "the worker's own cache, working"
    os.close(read)
    os.waitpid(child, 0)
    assert txcache.django.get_cache() is parent
    assert warm(shop, price_of, 1) == 10


@pytest.mark.parametrize(
    "change",
    [
        "SET search_path TO pg_catalog, public",
        # Seen by what PostgreSQL reports (search_path from version 18), not in the SQL.
        "DO $$ BEGIN PERFORM set_config('search_path', 'pg_catalog, public', false); END $$",
    ],
)
def test_a_setting_changed_on_django_s_own_connection_refuses_txcache_transactions(
    shop: DjangoShop, change: str
) -> None:
    """A tenant middleware's ``SET search_path`` on Django's own connection would not reach
    the txcache transactions (the cache's pooled connections): refused as they begin — a
    hit would be served in the cache's schemas as surely as a miss — not ignored."""
    assert warm(shop, price_of, 1) == 10  # a hit waits in the cache
    own = connections["default"]
    with own.cursor() as cursor:
        cursor.execute(change)
    try:
        assert Item.objects.get(id=1).price == 10  # Django's own connection: as set
        refused = pytest.raises(txcache.TransactionError, match=r"ran ['\"](SET|DO)")
        with refused:
            txcache.django.read_only()
        with refused:
            price_of(1)  # an implicit transaction of the cache
        with refused, txcache.django.read_write():
            pass
    finally:
        own.close()  # a new connection has the configured settings again
    with txcache.django.read_only():
        assert Item.objects.get(id=1).price == 10
    assert price_of(1) == 10


@pytest.mark.parametrize("sets", [1, 3])
def test_executemany_on_django_s_own_connection_is_a_write_seen_next(
    shop: DjangoShop, sets: int
) -> None:
    """``executemany`` on Django's own connection, outside any txcache transaction (a
    management command, a ``@bypass`` view): a write the next read sees, not a session
    change, however many parameter sets it has — and nothing about its text is remembered
    wrongly for the next ``execute`` of it."""
    assert warm(shop, price_of, 9) == 90  # a hit waits in the cache
    update = "UPDATE shop_item SET price = %s WHERE id = %s"
    own = connections["default"]
    try:
        with own.cursor() as cursor:
            cursor.executemany(update, [(990 + n, 9) for n in range(sets)])
        assert price_of(9) == 990 + sets - 1  # read-your-writes: not the cached 90
        with own.cursor() as cursor:
            cursor.execute(update, [90, 9])
        assert price_of(9) == 90
    finally:
        own.close()


def test_a_setting_changed_past_django_s_cursors_refuses_txcache_transactions(
    shop: DjangoShop,
) -> None:
    """A middleware that sets its tenant on the psycopg connection itself
    (``connection.connection.execute``), where Django's cursors do not see it: what
    PostgreSQL reports shows the change, and txcache transactions are refused as they
    begin, as after a ``SET`` through a cursor (the time zone here: reported by every
    version; ``search_path`` from PostgreSQL 18)."""
    own = connections["default"]
    own.ensure_connection()
    own.connection.execute("SET TimeZone = 'Asia/Tokyo'")
    try:
        with pytest.raises(txcache.TransactionError, match="changed past Django's cursors"):
            txcache.django.read_only()
    finally:
        own.close()
    with txcache.django.read_only():
        assert Item.objects.get(id=1).price == 10

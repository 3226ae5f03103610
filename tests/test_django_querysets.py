"""Cached querysets on a real stack (docs/django.md, "Cached querysets"):
``Item.objects.filter(...).txcache()`` reads through the cache — a hit runs no SQL and
rebuilds the same instances — and every kind of write invalidates it: ``.update()``,
``bulk_update``, ``bulk_create``, raw SQL through Django and another program's writes."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.db.models import Max, Prefetch, Sum
from django.test import override_settings

import txcache
import txcache.django
from django_fixtures import Category, DjangoShop, Item, start_shop
from txcache.django.queryset import rows_function
from txcache.stack import EmbeddedPostgres, wait_until

STATS = rows_function(Item).stats
"""The statistics of Item's cached querysets."""


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    yield from start_shop(postgres)


@contextlib.contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL statements Django runs on the default connection inside the block."""
    seen: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connections["default"].execute_wrapper(record):
        yield seen


def shown(items: list[Item]) -> list[tuple[Any, ...]]:
    """What the instances hold, loaded fields and the related category alike."""
    return [
        (item.id, item.name, item.price, item.details, item.changed, item.category.name)
        for item in items
    ]


def in_category(category_id: int) -> list[Item]:
    found = Item.objects.filter(category_id=category_id).select_related("category")
    return list(found.order_by("id").txcache())


def read(function: Callable[[], Any], *, not_before: int | None = None) -> Any:
    with txcache.django.read_only(staleness=60, not_before=not_before):
        return function()


def warm(function: Callable[[], Any]) -> Any:
    """Read until a read is a hit, which runs no SQL (the first read of a table may not
    store: it read the catalog anew)."""
    first = read(function)

    def hit() -> bool:
        hits = STATS.hits
        with statements() as seen:
            assert read(function) == first
        return STATS.hits > hits and not seen

    wait_until(hit, "a hit of a cached queryset", timeout=20)
    return first


def test_a_hit_runs_no_sql_and_rebuilds_the_same_instances(shop: DjangoShop) -> None:
    miss = shown(read(lambda: in_category(1)))
    assert [row[0] for row in miss] == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    items = warm(lambda: in_category(1))
    assert shown(items) == miss
    assert all(type(item) is Item and item._state.db == "default" for item in items)
    assert not any(item._state.adding for item in items)
    cached = Item.objects.filter(category_id=2).txcache()
    assert warm(cached.count) == 10
    assert warm(lambda: cached.filter(price__gt=200).exists()) is True
    assert warm(lambda: cached.get(id=4).name) == "item 4"
    assert warm(lambda: cached.order_by("-price").first().id) == 28
    assert warm(lambda: cached.aggregate(Sum("price"), Max("id"))) == {
        "price__sum": 1450,
        "id__max": 28,
    }
    names = cached.order_by("id").values_list("name", flat=True)
    assert warm(lambda: list(names.all()[:2])) == ["item 1", "item 4"]
    with statements() as seen:  # nothing to ask: neither the cache nor the database
        assert read(lambda: list(Item.objects.none().txcache())) == []
    assert seen == []


def test_the_rows_keep_the_shape_values_and_values_list_give_them(shop: DjangoShop) -> None:
    found = Item.objects.filter(id__in=[16, 17]).order_by("id")
    assert read(lambda: list(found.values_list("name", flat=True).txcache())) == [
        "item 16",
        "item 17",
    ]
    assert read(lambda: found.values_list("id", "price").txcache().first()) == (16, 160)
    assert read(lambda: found.values("id").txcache().last()) == {"id": 17}
    with txcache.django.read_write(), transaction.atomic():  # a read for a write
        locked = found.values_list("id", flat=True).txcache().select_for_update()
        assert list(locked) == [16, 17]


def test_a_count_over_a_subquery_reads_the_database(shop: DjangoShop) -> None:
    cached = Item.objects.filter(category_id=2).order_by("id").txcache()
    assert warm(cached.count) == 10  # in the queryset's own query: cached
    lookups = STATS.hits + STATS.miss_count
    assert read(lambda: cached[:4].count()) == 4  # Django counts over a subquery
    assert read(lambda: cached.values("price").distinct().count()) == 10
    assert STATS.hits + STATS.miss_count == lookups


def test_prefetch_reads_through_the_cache_when_its_queryset_does(shop: DjangoShop) -> None:
    def categories() -> list[tuple[str, list[str]]]:
        cheap = Item.objects.filter(price__lt=50).order_by("id").txcache()
        found = Category.objects.filter(id__in=[1, 2]).order_by("id")
        found = found.prefetch_related(Prefetch("items", queryset=cheap))
        return [(category.name, [item.name for item in category.items.all()]) for category in found]

    expected = [("lamps", ["item 3"]), ("desks", ["item 1", "item 4"])]
    assert read(categories) == expected

    def hit() -> bool:  # the categories' own query is not cached: only the prefetch hits
        hits = STATS.hits
        assert read(categories) == expected
        return STATS.hits > hits

    wait_until(hit, "a hit of the prefetch", timeout=20)


def changed_by(shop: DjangoShop, write: Callable[[], int | None], check: Callable[[], Any]) -> Any:
    """Warm ``check``, run ``write`` (it returns a token, or ``None`` for "take one now"),
    then read ``check`` at a pin at or after the token: a miss, whose value is returned."""
    before = warm(check)
    token = write()
    if token is None:
        token = shop.cache.timestamp()
    misses = STATS.miss_count
    after = read(check, not_before=token)
    assert STATS.miss_count == misses + 1, "the write should have invalidated the cached rows"
    assert after != before
    return after


def prices(ids: list[int]) -> Callable[[], dict[int, int]]:
    return lambda: dict(Item.objects.filter(id__in=ids).txcache().values_list("id", "price"))


def in_read_write(work: Callable[[], Any]) -> int | None:
    with txcache.django.read_write() as tx:
        work()
    return tx.commit_timestamp


def test_an_update_invalidates_the_cached_rows(shop: DjangoShop) -> None:
    update = lambda: Item.objects.filter(id=5).update(price=555)  # noqa: E731
    assert changed_by(shop, lambda: in_read_write(update), prices([5, 8])) == {5: 555, 8: 80}


def test_a_bulk_update_invalidates_the_cached_rows(shop: DjangoShop) -> None:
    def bulk_update() -> None:
        items = list(Item.objects.filter(id__in=[11, 14]))
        for item in items:
            item.price += 1
        Item.objects.bulk_update(items, ["price"])

    after = changed_by(shop, lambda: in_read_write(bulk_update), prices([11, 14]))
    assert after == {11: 111, 14: 141}


def test_a_bulk_create_invalidates_the_cached_rows(shop: DjangoShop) -> None:
    def bulk_create() -> None:
        template = Item.objects.get(id=2)
        Item.objects.bulk_create(
            [
                Item(name="new lamp", price=1, category_id=1, changed=template.changed),
                Item(name="new desk", price=2, category_id=2, changed=template.changed),
            ]
        )

    after = changed_by(shop, lambda: in_read_write(bulk_create), lambda: in_category(1))
    assert [item.name for item in after][-1] == "new lamp"


def test_raw_sql_through_django_invalidates_the_cached_rows(shop: DjangoShop) -> None:
    def raw() -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute("UPDATE shop_item SET price = price * 2 WHERE id = %s", [20])

    assert changed_by(shop, lambda: in_read_write(raw), prices([20])) == {20: 400}


def test_another_programs_write_invalidates_the_cached_rows(shop: DjangoShop) -> None:
    def elsewhere() -> None:
        shop.admin.execute("UPDATE shop_item SET name = 'renamed' WHERE id = 23")

    def names() -> dict[int, str]:
        return dict(Item.objects.filter(id=23).txcache().values_list("id", "name"))

    assert changed_by(shop, elsewhere, names) == {23: "renamed"}


def test_outside_any_transaction_it_reads_in_one_of_its_own(shop: DjangoShop) -> None:
    cached = Item.objects.filter(category_id=3).order_by("id").txcache(staleness=60)
    first = [item.price for item in cached]

    def hit() -> bool:
        hits = STATS.hits
        assert [item.price for item in cached.all()] == first
        return STATS.hits > hits

    wait_until(hit, "a hit outside any transaction", timeout=20)
    assert txcache.current_transaction() is None
    with transaction.atomic():  # Django's own transaction: its writes are seen, uncached
        Item.objects.filter(id=26).update(price=2626)
        hits = STATS.hits
        assert {item.id: item.price for item in cached.all()}[26] == 2626
        assert STATS.hits == hits
        transaction.set_rollback(True)
    with pytest.raises(ValueError, match="staleness"):
        Item.objects.txcache(staleness=-1)


def test_writes_on_django_s_own_connection_are_seen_by_later_reads_of_the_context(
    shop: DjangoShop,
) -> None:
    cached = Item.objects.filter(id=13).txcache(staleness=60)

    def hit() -> bool:
        hits = STATS.hits
        assert cached.get().price == 130
        return STATS.hits > hits

    wait_until(hit, "a hit outside any transaction", timeout=20)
    Item.objects.filter(id=13).update(price=1313)  # autocommit: committed at once
    assert cached.get().price == 1313  # not the cached 130: not before the write
    with transaction.atomic():
        Item.objects.filter(id=13).update(price=1314)
    with txcache.django.read_only(staleness=60) as tx:  # an explicit block too
        assert cached.get().price == 1314
    assert tx.not_before is not None
    with transaction.atomic():
        Item.objects.filter(id=13).update(price=1315)
        transaction.set_rollback(True)
    with txcache.django.read_only(staleness=60) as after_rollback:
        assert cached.get().price == 1314
    assert after_rollback.not_before == tx.not_before  # nothing committed: no new token


def test_rows_are_keyed_by_how_django_loads_them(shop: DjangoShop) -> None:
    changed = Item.objects.filter(id=16).values_list("changed", flat=True).txcache()
    aware = warm(lambda: changed.get())
    assert aware == datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.UTC)
    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):  # naive, in Paris
        naive = warm(lambda: changed.get())
    assert naive == datetime.datetime(2024, 5, 6, 9, 8, 9, 123456)
    assert warm(lambda: changed.get()) == aware  # the first rows, still cached


def test_reads_for_a_write_never_use_the_cache(shop: DjangoShop) -> None:
    cached = Item.objects.filter(name="made elsewhere").txcache()
    assert warm(lambda: list(cached.all())) == []
    shop.admin.execute(
        "INSERT INTO shop_item (name, price, category_id, details, changed) "
        "SELECT 'made elsewhere', 7, 1, '{}', now()"
    )
    hits = STATS.hits
    item, created = cached.get_or_create(name="made elsewhere", defaults={"price": 8})
    assert (item.price, created) == (7, False)
    assert cached.filter(price=7).delete()[0] == 1
    with txcache.django.read_write(), transaction.atomic():  # as Django wants for a lock
        assert Item.objects.filter(id=29).txcache().select_for_update().get().price == 290
    assert STATS.hits == hits


def test_a_database_without_the_engine_is_refused(shop: DjangoShop) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"txcache\.django\.db"):
        list(Item.objects.using("plain").filter(id=1).txcache())


@contextlib.contextmanager
def another_alias(name: str) -> Iterator[str]:
    """``name``: another alias of the test database on the txcache engine, for the block."""
    connections.settings[name] = dict(connections.settings["default"])
    try:
        yield name
    finally:
        connections[name].close()
        del connections[name]
        del connections.settings[name]


@txcache.cacheable
def price_on(alias: str, item_id: int) -> int:
    return cast(int, Item.objects.using(alias).get(id=item_id).price)  # Django is untyped


def test_another_alias_on_the_engine_is_refused(shop: DjangoShop) -> None:
    with another_alias("second") as second:
        with pytest.raises(ImproperlyConfigured, match=r"not TXCACHE\['DATABASE'\]"):
            list(Item.objects.using(second).filter(id=1).txcache())
        refused = "'second' inside a cacheable function"
        with txcache.django.read_only(), pytest.raises(txcache.TransactionError, match=refused):
            price_on(second, 1)


def test_arguments_without_a_canonical_form_are_refused(shop: DjangoShop) -> None:
    with txcache.django.read_only(), pytest.raises(txcache.UnsupportedArgument):
        list(Item.objects.filter(details__contains={"size": 3}).txcache())

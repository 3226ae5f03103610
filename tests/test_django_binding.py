"""The route binds parameters as Django's own backend does (docs/django.md, "The database
backend"): a differential test. Each query of a corpus — arithmetic with floats, decimals,
dates and datetimes under ``USE_TZ``, JSON, arrays, ranges, ``Func()``s, window functions,
aggregates, subqueries, string functions — runs on Django's own connection (the ``plain``
alias: Django's stock PostgreSQL engine on the same database) and through txcache: a bare
query in a read-only and in a read/write transaction, in a cacheable function (a miss, then
a hit) and as a cached queryset where its rows can be stored. Every result must equal
Django's exactly: the same values of the same types (``3.3``, not ``3.3000000000000003``;
``Decimal('3.30')``, not ``Decimal('3.3')``)."""

from __future__ import annotations

import datetime
import decimal
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.postgres.fields import ArrayField, DateTimeRangeField, IntegerRangeField
from django.db import connections, models
from django.db.models import (
    Avg,
    Case,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Func,
    Max,
    OuterRef,
    Q,
    StdDev,
    Subquery,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models import functions as fn
from django.db.models.fields.json import KT
from django.utils import timezone
from psycopg.types.range import Range

import txcache
import txcache.django
import txcache.django.queryset
from django_fixtures import DjangoShop, start_shop
from txcache.django import CachedManager
from txcache.stack import EmbeddedPostgres, wait_until

D = decimal.Decimal
UTC = datetime.UTC
TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")


class Measure(models.Model):  # type: ignore[misc]  # Django ships no types
    """A row of every kind of value the corpus computes with."""

    name = models.CharField(max_length=50)
    qty = models.IntegerField()
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    ratio = models.FloatField(null=True)
    day = models.DateField()
    at = models.DateTimeField()
    data = models.JSONField()
    nums = ArrayField(models.IntegerField())
    span = IntegerRangeField()
    period = DateTimeRangeField()

    objects = CachedManager()

    class Meta:
        app_label = "django_fixtures"
        db_table = "binding_measure"


ROWS = [
    Measure(id=1, name="Lamp", qty=3, amount=D("3.30"), ratio=0.1, day=datetime.date(2024, 3, 10),
            at=datetime.datetime(2024, 3, 10, 23, 30, tzinfo=UTC),
            data={"size": 3, "price": 1.1, "tags": ["a", "b"], "name": "x"}, nums=[1, 2, 3],
            span=Range(1, 5), period=Range(datetime.datetime(2024, 3, 1, tzinfo=UTC),
                                           datetime.datetime(2024, 4, 1, tzinfo=UTC))),
    Measure(id=2, name="desk", qty=3, amount=D("3.30"), ratio=0.2, day=datetime.date(2024, 3, 11),
            at=datetime.datetime(2024, 3, 11, 14, 0, tzinfo=UTC),
            data={"size": 7, "price": 3.3, "tags": ["b"], "name": "today"}, nums=[3, 4],
            span=Range(4, 9), period=Range(datetime.datetime(2024, 3, 20, tzinfo=UTC), None)),
    Measure(id=3, name="Chair", qty=7, amount=D("0.10"), ratio=None,
            day=datetime.date(2024, 2, 29), at=datetime.datetime(2024, 2, 29, 15, 5, tzinfo=UTC),
            data={"size": 1, "price": 0.3, "tags": [], "name": None}, nums=[],
            span=Range(10, 20), period=Range(None, datetime.datetime(2024, 1, 1, tzinfo=UTC))),
    Measure(id=4, name="ötzi's %s shelf", qty=30000, amount=D("1234.56"), ratio=-0.0,
            day=datetime.date(2023, 12, 31), at=datetime.datetime(2023, 12, 31, 20, 0, tzinfo=UTC),
            data={"size": 2.5, "price": 10, "tags": ["a"], "name": "o'brien"}, nums=[7],
            span=Range(0, 1), period=Range(datetime.datetime(2023, 12, 31, tzinfo=UTC),
                                           datetime.datetime(2024, 1, 2, tzinfo=UTC))),
]  # fmt: skip

Query = Callable[[str], Any]
"""A corpus entry: its result on the database alias it is given."""


def on(db: str) -> models.QuerySet[Measure]:
    return Measure.objects.using(db).order_by("id")


def float_times(db: str) -> Any:
    return on(db).annotate(x=F("qty") * 1.1).values_list("id", "x")


def float_filter(db: str) -> Any:
    return on(db).filter(amount__gte=F("qty") * 1.1).values_list("id", flat=True)


def float_sum(db: str) -> Any:
    return on(db).filter(ratio__lt=0.1 + 0.2).values_list("id", "ratio")


def float_literal(db: str) -> Any:
    return on(db).annotate(x=Value(0.1) + Value(0.2)).values_list("x", flat=True)


def float_in_json(db: str) -> Any:
    return on(db).filter(data__price__gt=1.1).values_list("id", flat=True)


def decimal_times(db: str) -> Any:
    return on(db).annotate(x=F("amount") * D("1.10"), y=F("amount") / 3).values_list("x", "y")


def decimal_filter(db: str) -> Any:
    return on(db).filter(amount__lte=D("3.300")).values_list("id", "amount")


def int_arithmetic(db: str) -> Any:
    return (
        on(db)
        .annotate(x=F("qty") / 2, y=Value(200) * Value(200), z=F("qty") % 4)
        .values_list("x", "y", "z")
    )


def numbers(db: str) -> Any:
    # Literals PostgreSQL types by their value: bigint, numeric beyond it; floats as
    # numeric, but for the special values, which are float8 literals.
    return (
        on(db)
        .annotate(
            big=Value(2**40) + F("qty"),
            least=Value(-(2**31)) + F("qty"),
            huge=Value(10**20, models.DecimalField()) + F("qty"),
            infinite=Value(float("inf")) + F("qty"),
            negative_zero=Value(-0.0) * F("qty"),
            large=Value(1e16) * F("qty"),
            small=Value(1e-7) * F("qty"),
        )
        .values_list("big", "least", "huge", "infinite", "negative_zero", "large", "small")
    )


def int_overflow(db: str) -> Any:
    return on(db).annotate(x=F("qty") * Value(100000)).values_list("x", flat=True)


def dates(db: str) -> Any:
    later = ExpressionWrapper(F("day") + datetime.timedelta(days=1), models.DateField())
    return (
        on(db).filter(day__gte=datetime.date(2024, 2, 29)).annotate(n=later).values_list("day", "n")
    )


def datetimes(db: str) -> Any:
    later = ExpressionWrapper(F("at") + datetime.timedelta(hours=1), models.DateTimeField())
    since = datetime.datetime(2024, 3, 10, 23, 0, tzinfo=UTC)
    return on(db).filter(at__gte=since).annotate(n=later).values_list("at", "n")


def datetime_in_zone(db: str) -> Any:
    tokyo = datetime.datetime(2024, 3, 11, 8, 30, tzinfo=TOKYO)
    return on(db).filter(at__lte=tokyo).values_list("id", flat=True)


def date_lookups(db: str) -> Any:
    return on(db).filter(at__date=datetime.date(2024, 3, 10)).values_list("id", flat=True)


def date_lookups_in_tokyo(db: str) -> Any:
    with timezone.override(TOKYO):
        return list(date_lookups(db)) + list(on(db).filter(at__hour=0).values_list("id"))


def truncs_and_extracts(db: str) -> Any:
    return (
        on(db)
        .annotate(
            d=fn.TruncDay("at"),
            m=fn.TruncMonth("at", tzinfo=TOKYO),
            h=fn.ExtractHour("at"),
            w=fn.ExtractIsoWeekDay("day"),
            e=fn.Extract("at", "epoch"),
        )
        .values_list("d", "m", "h", "w", "e")
    )


def json_values(db: str) -> Any:
    return on(db).annotate(t=KT("data__name"), p=F("data__price")).values_list("data", "t", "p")


def json_lookups(db: str) -> Any:
    found = on(db).filter(
        Q(data__contains={"tags": ["a"]}) | Q(data__size__lt=2.6) | Q(data__has_key="nothing")
    )
    return found.values_list("id", flat=True)


def json_float_contains(db: str) -> Any:
    return on(db).filter(data__contains={"price": 1.1}).values_list("id", flat=True)


def arrays(db: str) -> Any:
    return (
        on(db)
        .annotate(first=F("nums__0"), n=fn.Coalesce(F("nums__len"), 0))
        .values_list("nums", "first", "n")
    )


def array_lookups(db: str) -> Any:
    found = on(db).filter(Q(nums__contains=[3]) | Q(nums__overlap=[7, 8]) | Q(nums__len=0))
    return found.values_list("id", flat=True)


def ranges(db: str) -> Any:
    return on(db).values_list("span", "period")


def range_lookups(db: str) -> Any:
    at = datetime.datetime(2024, 3, 25, tzinfo=UTC)
    found = on(db).filter(Q(span__contains=4) | Q(span__overlap=Range(15, 30)))
    return list(found.values_list("id", flat=True)) + list(
        on(db).filter(period__contains=at).values_list("id", flat=True)
    )


def functions(db: str) -> Any:
    return (
        on(db)
        .annotate(
            g=fn.Greatest("ratio", Value(0.15)),
            r=fn.Round("amount", 1),
            p=fn.Power("qty", 0.5),
            c=fn.Cast("qty", models.FloatField()),
            k=fn.Coalesce("ratio", 0.05),
            a=fn.Abs("ratio"),
            s=Func(F("amount"), Value(2.5), function="GREATEST", output_field=models.FloatField()),
        )
        .values_list("g", "r", "p", "c", "k", "a", "s")
    )


def case_when(db: str) -> Any:
    return (
        on(db)
        .annotate(x=Case(When(qty__gt=3, then=Value(1.5)), default=Value(0.1) * F("qty")))
        .values_list("x", flat=True)
    )


def windows(db: str) -> Any:
    return (
        on(db)
        .annotate(
            rank=Window(fn.Rank(), order_by=F("amount").desc()),
            running=Window(Sum(F("qty") * 1.1), order_by=F("id").asc()),
            before=Window(fn.Lag("ratio", default=0.5), order_by=F("id").asc()),
        )
        .values_list("rank", "running", "before")
    )


def aggregates(db: str) -> Any:
    return Measure.objects.using(db).aggregate(
        avg=Avg("qty"),
        weighted=Sum(F("qty") * 1.1),
        spread=StdDev("ratio"),
        high=Count("id", filter=Q(ratio__gt=0.15)),
        latest=Max("at"),
    )


def grouped(db: str) -> Any:
    shifted = Measure.objects.using(db).values(y=F("qty") + 1).annotate(n=Count("id"))
    return shifted.order_by("y").values_list("y", "n")


def grouped_by_function(db: str) -> Any:
    # The same parameter selected and grouped by (Django ticket #34255): two placeholders
    # PostgreSQL cannot tell equal when they are bound on the server.
    initials = Measure.objects.using(db).annotate(k=fn.Left("name", 1)).values("k")
    return initials.annotate(n=Count("id")).order_by("k").values_list("k", "n")


def subqueries(db: str) -> Any:
    bigger = Measure.objects.using(db).filter(qty__gt=OuterRef("qty") * 1.5)
    return (
        on(db)
        .annotate(
            bigger=Exists(bigger),
            next_amount=Subquery(bigger.order_by("qty").values("amount")[:1]),
        )
        .values_list("bigger", "next_amount")
    )


def strings(db: str) -> Any:
    return (
        on(db)
        .annotate(
            c=fn.Concat("name", Value(" x"), output_field=models.CharField()),
            l=fn.Lower("name"),
            s=fn.Substr("name", 2, 3),
            r=fn.Replace("name", Value("%s"), Value("50%")),
            n=fn.Length("name"),
            p=fn.LPad("name", 12, Value("*")),
        )
        .values_list("c", "l", "s", "r", "n", "p")
    )


def string_lookups(db: str) -> Any:
    found = on(db).filter(
        Q(name__icontains="%s")
        | Q(name__startswith="La")
        | Q(name__regex=r"^[cC]h")
        | Q(data__name="x")
    )
    return found.values_list("id", flat=True)


def time_words(db: str) -> Any:
    # Text the query compares as text, however it reads: no clock is involved.
    return on(db).filter(name__in=["today", "desk"]).values_list("id", "name")


def nulls(db: str) -> Any:
    return (
        on(db)
        .annotate(n=Value(None, models.FloatField()))
        .filter(ratio__isnull=True)
        .values_list("id", "n")
    )


CORPUS: dict[str, tuple[Query, bool]] = {
    # name: (the query, whether it is a queryset whose reads a cached queryset can hold:
    # rows and parameters with a canonical form — no ranges, no JSON containment)
    "float_times": (float_times, True),
    "float_filter": (float_filter, True),
    "float_sum": (float_sum, True),
    "float_literal": (float_literal, True),
    "float_in_json": (float_in_json, False),
    "decimal_times": (decimal_times, True),
    "decimal_filter": (decimal_filter, True),
    "int_arithmetic": (int_arithmetic, True),
    "numbers": (numbers, True),
    "int_overflow": (int_overflow, True),
    "dates": (dates, True),
    "datetimes": (datetimes, True),
    "datetime_in_zone": (datetime_in_zone, True),
    "date_lookups": (date_lookups, True),
    "date_lookups_in_tokyo": (date_lookups_in_tokyo, False),
    "truncs_and_extracts": (truncs_and_extracts, True),
    "json_values": (json_values, True),
    "json_lookups": (json_lookups, False),
    "json_float_contains": (json_float_contains, False),
    "arrays": (arrays, True),
    "array_lookups": (array_lookups, True),
    "ranges": (ranges, False),
    "range_lookups": (range_lookups, False),
    "functions": (functions, True),
    "case_when": (case_when, True),
    "windows": (windows, True),
    "aggregates": (aggregates, False),
    "grouped": (grouped, True),
    "grouped_by_function": (grouped_by_function, True),
    "subqueries": (subqueries, True),
    "strings": (strings, True),
    "string_lookups": (string_lookups, False),
    "time_words": (time_words, True),
    "nulls": (nulls, True),
}


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    for shop in start_shop(postgres):
        with connections["plain"].schema_editor() as editor:
            editor.create_model(Measure)
        with txcache.django.read_write() as seeded:
            Measure.objects.bulk_create(ROWS)
        shop.settled(seeded.commit_timestamp or 0)  # every read sees the rows
        yield shop


def canonical(value: Any) -> Any:
    """``value`` as plain text at every depth, exactly: each leaf as its type and ``repr``
    (so ``3.3`` and ``3.3000000000000003``, ``Decimal('3.3')`` and ``Decimal('3.30')``, a
    UTC and a Tokyo datetime differ); a cacheable function can store it."""
    if isinstance(value, models.QuerySet | list | tuple):
        return [canonical(each) for each in value]
    if isinstance(value, dict):
        return [[key, canonical(each)] for key, each in value.items()]
    if isinstance(value, Range):
        return ["Range", canonical(value.lower), canonical(value.upper), value.bounds]
    return f"{type(value).__name__}:{value!r}"


def outcome(run: Callable[[], Any]) -> Any:
    """What ``run()`` returns, or the class of the error it raised (Django's:
    ``DataError``, ``ProgrammingError`` …)."""
    try:
        return run()
    except Exception as error:
        return ["raised", type(error).__qualname__]


def within(transaction: Any, run: Callable[[], Any]) -> Any:
    """``run()`` inside ``transaction`` (a failed statement fails the block too)."""
    with transaction:
        return run()


@txcache.cacheable
def computed(name: str) -> object:  # not Any, which the overload for an async def matches
    """A corpus entry's result, through the cache."""
    return canonical(CORPUS[name][0]("default"))


def djangos(name: str) -> Any:
    """What Django's own connection gives."""
    return outcome(lambda: canonical(CORPUS[name][0]("plain")))


@pytest.mark.parametrize("name", list(CORPUS))
def test_a_query_through_txcache_gives_what_django_s_own_connection_gives(
    shop: DjangoShop, name: str
) -> None:
    query, _storable = CORPUS[name]
    expected = djangos(name)
    bare = lambda: canonical(query("default"))  # noqa: E731
    assert outcome(lambda: within(txcache.django.read_only(), bare)) == expected, "read-only"
    assert outcome(lambda: within(txcache.django.read_write(), bare)) == expected, "read/write"
    cached = lambda: within(txcache.django.read_only(), lambda: computed(name))  # noqa: E731
    assert outcome(cached) == expected, "a cacheable function"
    if expected[:1] == ["raised"]:
        return
    hits = computed.stats.hits

    def hit() -> bool:
        assert outcome(cached) == expected, "a cacheable function"
        return computed.stats.hits > hits

    wait_until(hit, f"a hit of {name}", timeout=20)


@pytest.mark.parametrize("name", [name for name, (_, storable) in CORPUS.items() if storable])
def test_a_cached_queryset_gives_what_django_s_own_connection_gives(
    shop: DjangoShop, name: str
) -> None:
    query, _storable = CORPUS[name]
    expected = djangos(name)
    rows = txcache.django.queryset.rows_function(Measure)
    hits = rows.stats.hits

    def hit() -> bool:
        read = lambda: canonical(query("default").txcache())  # noqa: E731
        assert outcome(lambda: within(txcache.django.read_only(), read)) == expected
        return expected[:1] == ["raised"] or rows.stats.hits > hits

    wait_until(hit, f"a hit of the cached queryset {name}", timeout=20)


@pytest.fixture
def server_side_binding(shop: DjangoShop) -> Iterator[None]:
    """Both aliases with ``OPTIONS["server_side_binding"]``: psycopg's server-side cursor."""
    options = [connections[alias].settings_dict["OPTIONS"] for alias in ("default", "plain")]
    for each in options:
        each["server_side_binding"] = True
    connections["plain"].close()  # its cursor class is chosen when it connects
    yield
    for each in options:
        del each["server_side_binding"]
    connections["plain"].close()


@pytest.mark.parametrize("name", ["float_times", "float_filter", "ranges", "strings"])
def test_with_server_side_binding_the_route_binds_on_the_server_as_django_does(
    server_side_binding: None, name: str
) -> None:
    query, _storable = CORPUS[name]
    expected = djangos(name)
    if name == "float_times":  # a float8 parameter: what Django's server-side cursor sends
        assert expected[0] == ["int:1", "float:3.3000000000000003"]
    bare = lambda: canonical(query("default"))  # noqa: E731
    assert outcome(lambda: within(txcache.django.read_only(), bare)) == expected
    assert outcome(lambda: within(txcache.django.read_write(), bare)) == expected

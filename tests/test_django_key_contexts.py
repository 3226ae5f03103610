"""Django's active time zone and language are part of cacheable calls' keys (docs/django.md,
"Time zones, languages and other request state"), over HTTP through the middleware: a
view that computes under ``timezone.override(user_zone)`` or ``translation.override(lang)``
never serves one user's result to another; a function declared independent of them shares
its values, and one whose query the ORM converts to the active time zone while declared
independent of it is refused; cached querysets are keyed by their SQL, which names the
zone where it matters."""

from __future__ import annotations

import datetime
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from django.db.models.functions import TruncDay
from django.http import HttpRequest, JsonResponse
from django.test import Client, override_settings
from django.urls import path
from django.utils import timezone, translation
from django.utils.translation import gettext

import txcache
import txcache.django
from django_fixtures import DjangoShop, Item, start_shop
from txcache import CacheableFunction, UncacheableQuery
from txcache.django.queryset import rows_function
from txcache.stack import EmbeddedPostgres, wait_until

TOKYO, LOS_ANGELES = "Asia/Tokyo", "America/Los_Angeles"
# 20:00 UTC: the 7th of May in Tokyo, still the 6th in Los Angeles.
EVENING = "2024-05-06 20:00:00+00:00"


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    with override_settings(ROOT_URLCONF=__name__):
        for shop in start_shop(postgres):
            with txcache.django.read_write() as evening:
                Item.objects.filter(id__in=(3, 6)).update(
                    changed=datetime.datetime.fromisoformat(EVENING)
                )
            shop.settled(evening.commit_timestamp or 0)  # pages read after it
            yield shop


@txcache.cacheable
def items_on_day(day: datetime.date, category_id: int) -> list[int]:
    """The category's items changed on ``day``, in the active time zone."""
    found = Item.objects.filter(category_id=category_id, changed__date=day).order_by("id")
    return list(found.values_list("id", flat=True))


@txcache.cacheable
def labelled(item_id: int) -> str:
    """An item's name after a word in the active language."""
    return f"{gettext('Yes')}: {Item.objects.get(id=item_id).name}"


@txcache.cacheable(independent_of={"timezone", "language"})
def price(item_id: int) -> int:
    """Depends on neither: one value for every zone and language."""
    return cast(int, Item.objects.get(id=item_id).price)  # Django is untyped


@txcache.cacheable(independent_of={"timezone"})
def days_wrongly_independent(category_id: int) -> list[datetime.date]:
    """Declared independent of the time zone, but ``__date`` converts to it."""
    found = Item.objects.filter(category_id=category_id, changed__date__gte="2024-01-01")
    return list(found.values_list("changed__date", flat=True))


@txcache.cacheable(independent_of={"timezone"})
def days_in(category_id: int, zone: str) -> list[datetime.datetime]:
    """Independent of the active zone: the zone is an argument, given to ``TruncDay``."""
    day = TruncDay("changed", tzinfo=zoneinfo.ZoneInfo(zone))
    found = Item.objects.filter(category_id=category_id).annotate(day=day).order_by("id")
    return list(found.values_list("day", flat=True)[:2])


@txcache.cacheable(independent_of={"timezone", "language"})
def changed_at(item_id: int) -> datetime.datetime:
    """Aware under ``USE_TZ``, naive without: as Django loads the row."""
    return cast(datetime.datetime, Item.objects.values_list("changed", flat=True).get(id=item_id))


def in_zone(request: HttpRequest) -> JsonResponse:
    """``?tz=&day=&category=``: the items changed that day where the user lives."""
    day = datetime.date.fromisoformat(request.GET["day"])
    with timezone.override(zoneinfo.ZoneInfo(request.GET["tz"])):
        return JsonResponse({"ids": items_on_day(day, int(request.GET["category"]))})


def in_language(request: HttpRequest, item_id: int) -> JsonResponse:
    """``?lang=``: the item's label in the user's language."""
    with translation.override(request.GET["lang"]):
        return JsonResponse({"label": labelled(item_id)})


def priced(request: HttpRequest, item_id: int) -> JsonResponse:
    with timezone.override(zoneinfo.ZoneInfo(request.GET["tz"])):
        return JsonResponse({"price": price(item_id)})


def wrongly_independent(request: HttpRequest, category_id: int) -> JsonResponse:
    with timezone.override(zoneinfo.ZoneInfo(TOKYO)):
        return JsonResponse({"days": days_wrongly_independent(category_id)})


def zone_given(request: HttpRequest, category_id: int) -> JsonResponse:
    """The zone as an argument, equal to the active one: no undeclared dependency."""
    zone = request.GET["tz"]
    with timezone.override(zoneinfo.ZoneInfo(zone)):
        return JsonResponse({"days": days_in(category_id, zone)})


def cached_on_day(request: HttpRequest) -> JsonResponse:
    """A cached queryset of the items changed that day, in the user's zone."""
    day = datetime.date.fromisoformat(request.GET["day"])
    with timezone.override(zoneinfo.ZoneInfo(request.GET["tz"])):
        found = Item.objects.filter(category_id=1, changed__date=day).order_by("id").txcache()
        return JsonResponse({"ids": [item.id for item in found]})


urlpatterns = [
    path("in-zone", in_zone),
    path("items/<int:item_id>/label", in_language),
    path("items/<int:item_id>/price", priced),
    path("categories/<int:category_id>/days", wrongly_independent),
    path("categories/<int:category_id>/days-in", zone_given),
    path("cached-on-day", cached_on_day),
]


def until_hit(function: CacheableFunction[..., Any], get: Callable[[], Any]) -> Any:
    """``get()`` until ``function`` had a hit during it; what it returned then (equal every
    time)."""
    seen: list[Any] = []

    def hit() -> bool:
        hits = function.stats.hits
        seen.append(get())
        return function.stats.hits > hits

    wait_until(hit, f"a hit of {function.keys.name}", timeout=20)
    assert all(each == seen[0] for each in seen)
    return seen[-1]


def test_the_active_time_zone_is_part_of_the_key(shop: DjangoShop) -> None:
    client = Client()

    def on_the_7th(zone: str) -> Any:
        query = {"tz": zone, "day": "2024-05-07", "category": 1}
        return client.get("/in-zone", query).json()["ids"]

    assert until_hit(items_on_day, lambda: on_the_7th(TOKYO)) == [3, 6]
    assert on_the_7th(LOS_ANGELES) == []  # not Tokyo's cached result
    assert until_hit(items_on_day, lambda: on_the_7th(LOS_ANGELES)) == []
    assert on_the_7th(TOKYO) == [3, 6]


def test_the_active_language_is_part_of_the_key(shop: DjangoShop) -> None:
    client = Client()

    def label(language: str) -> str:
        return str(client.get("/items/4/label", {"lang": language}).json()["label"])

    assert until_hit(labelled, lambda: label("fr")) == "Oui: item 4"
    assert label("de") == "Ja: item 4"  # not the French one
    assert until_hit(labelled, lambda: label("de")) == "Ja: item 4"


def test_a_function_independent_of_them_shares_its_values(shop: DjangoShop) -> None:
    client = Client()
    assert until_hit(price, lambda: client.get("/items/5/price", {"tz": TOKYO}).json()) == {
        "price": 50
    }
    hits = price.stats.hits
    assert client.get("/items/5/price", {"tz": LOS_ANGELES}).json() == {"price": 50}
    assert price.stats.hits == hits + 1  # Tokyo's value


def test_an_undeclared_dependency_on_the_time_zone_is_refused(shop: DjangoShop) -> None:
    with pytest.raises(UncacheableQuery, match=r"days_wrongly_independent is declared "
                       r"independent of the key context 'timezone'.*\(Asia/Tokyo\)"):  # fmt: skip
        Client().get("/categories/1/days")


def test_a_zone_given_explicitly_is_not_a_dependency(shop: DjangoShop) -> None:
    client = Client()
    tokyo = until_hit(days_in, lambda: client.get("/categories/1/days-in", {"tz": TOKYO}).json())
    assert tokyo["days"][0] == "2024-05-07T00:00:00+09:00"
    assert client.get("/categories/1/days-in", {"tz": "UTC"}).json()["days"][0] == (
        "2024-05-06T00:00:00Z"
    )


def test_cached_querysets_are_keyed_by_the_sql_which_names_the_zone(shop: DjangoShop) -> None:
    client = Client()
    rows = rows_function(Item)

    def on_the_7th(zone: str) -> Any:
        return client.get("/cached-on-day", {"tz": zone, "day": "2024-05-07"}).json()["ids"]

    assert until_hit(rows, lambda: on_the_7th(TOKYO)) == [3, 6]
    assert on_the_7th(LOS_ANGELES) == []

    def names_in(language: str) -> list[str]:
        with translation.override(language), txcache.django.read_only():
            return [item.name for item in Item.objects.filter(id=7).txcache()]

    assert until_hit(rows, lambda: names_in("fr")) == ["item 7"]
    hits = rows.stats.hits
    assert names_in("de") == ["item 7"]
    assert rows.stats.hits == hits + 1  # the French read's rows: no language in the key


def test_use_tz_is_part_of_the_key(shop: DjangoShop) -> None:
    """Two processes that differ in ``USE_TZ`` alone (``TIME_ZONE = "UTC"`` in both, so the
    connection's time zone is the same) never share a function's values: one loads a
    ``timestamptz`` aware, the other naive, as Django's own connection does."""

    def read() -> datetime.datetime:
        with txcache.django.read_only(staleness=60):
            return changed_at(3)

    evening = datetime.datetime.fromisoformat(EVENING)
    with override_settings(USE_TZ=True, TIME_ZONE="UTC"):
        assert until_hit(changed_at, read) == evening
    with override_settings(USE_TZ=False, TIME_ZONE="UTC"):
        assert read() == evening.replace(tzinfo=None)  # not the aware value cached
        assert until_hit(changed_at, read) == evening.replace(tzinfo=None)

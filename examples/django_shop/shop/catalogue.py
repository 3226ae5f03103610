"""The cached reads of the shop's pages that are not plain querysets: ``@txcache.cacheable``
functions running ORM queries in the request's read-only transaction and returning plain
data (dicts, lists, numbers, dates), which the cache stores exactly. Their keys name the
active time zone and language too (``txcache.django`` registers both): a result computed
for one time zone is never served in another."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Sum
from django.db.models.functions import TruncDate

import txcache

from .models import Item, Order

ITEM_FIELDS = ("id", "name", "category", "price_cents", "stock")


@txcache.cacheable
def items_in(category: str) -> list[dict[str, Any]]:
    """A category's items by id; tagged ``public.shop_item:category=<category>``."""
    return list(Item.objects.filter(category=category).order_by("id").values(*ITEM_FIELDS))


@txcache.cacheable
def sales_of(item_id: int) -> dict[str, int]:
    """How many orders and units of an item were sold (an aggregate)."""
    totals = Order.objects.filter(item_id=item_id).aggregate(
        orders=Count("id"), units=Sum("quantity")
    )
    return {"orders": totals["orders"], "units": totals["units"] or 0}


@txcache.cacheable
def orders_of(customer: str) -> list[dict[str, Any]]:
    """A customer's orders, oldest first, with their item's name (a join)."""
    found = Order.objects.filter(customer=customer).order_by("id")
    return list(found.values("id", "item_id", "item__name", "quantity", "total_cents"))


@txcache.cacheable
def orders_by_day(customer: str) -> list[dict[str, Any]]:
    """A customer's orders and units per day, the days in the active time zone (the view's
    ``timezone.override``): ``TruncDate`` converts to it, and the key names it."""
    days = Order.objects.filter(customer=customer).annotate(day=TruncDate("created"))
    totals = days.values("day").annotate(orders=Count("id"), units=Sum("quantity"))
    return list(totals.order_by("day"))

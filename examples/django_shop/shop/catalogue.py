"""The cached reads of the shop's pages that are not plain querysets: ``@txcache.cacheable``
functions running ORM queries in the request's read-only transaction and returning plain
data (dicts, lists, numbers), which the cache stores exactly."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Sum

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

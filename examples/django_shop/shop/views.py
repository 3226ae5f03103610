"""The shop's pages, as JSON. A ``GET`` runs in the request's read-only transaction (the
txcache middleware): its cached querysets and cacheable functions hit, all at one commit
point. A ``POST`` runs in the request's read/write transaction, which hands its token back
(cookie and header): the client's next page shows the write."""

from __future__ import annotations

import json
import zoneinfo
from typing import Any

from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from txcache import metrics as txcache_metrics
from txcache.django import decorators as txcache_views

from . import catalogue
from .models import Item, Order


def _item(item: Item) -> dict[str, Any]:
    return {field: getattr(item, field) for field in catalogue.ITEM_FIELDS}


@require_GET
def item_list(request: HttpRequest) -> JsonResponse:
    """Every item, by id (a cached queryset)."""
    return JsonResponse({"items": [_item(item) for item in Item.objects.order_by("id").txcache()]})


@require_GET
def item_detail(request: HttpRequest, item_id: int) -> JsonResponse:
    """One item (a cached queryset) and its sales (a cacheable aggregate)."""
    try:
        item = Item.objects.txcache().get(id=item_id)
    except Item.DoesNotExist:
        raise Http404("no such item") from None
    return JsonResponse({**_item(item), **catalogue.sales_of(item_id)})


@require_GET
def category(request: HttpRequest, category: str) -> JsonResponse:
    """A category's items (a cacheable function)."""
    return JsonResponse({"items": catalogue.items_in(category)})


@require_GET
def customer_orders(request: HttpRequest, customer: str) -> JsonResponse:
    """A customer's orders (a cacheable function)."""
    return JsonResponse({"orders": catalogue.orders_of(customer)})


@require_GET
def customer_days(request: HttpRequest, customer: str) -> JsonResponse:
    """A customer's orders per day, the days in the time zone ``?tz=`` names (default UTC;
    a cacheable function, its results kept per time zone)."""
    try:
        zone = zoneinfo.ZoneInfo(request.GET.get("tz", "UTC"))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return JsonResponse({"error": "no such time zone"}, status=400)
    with timezone.override(zone):
        return JsonResponse({"days": catalogue.orders_by_day(customer)})


@csrf_exempt  # a JSON API for scripts; the admin's forms keep Django's CSRF protection
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Order ``quantity`` of an item for ``customer``: 201, or 409 if the stock is short."""
    body = json.loads(request.body)
    quantity = int(body["quantity"])
    # A savepoint of the request's transaction; the row lock holds until it commits.
    with transaction.atomic():
        item = Item.objects.select_for_update().get(id=int(body["item_id"]))
        if item.stock < quantity:
            return JsonResponse({"error": "not enough stock"}, status=409)
        item.stock -= quantity
        item.save(update_fields=["stock"])
        order = Order.objects.create(
            item=item,
            customer=str(body["customer"]),
            quantity=quantity,
            total_cents=quantity * item.price_cents,
        )
    return JsonResponse({"id": order.id, "total_cents": order.total_cents}, status=201)


@csrf_exempt
@require_POST
def reprice(request: HttpRequest) -> JsonResponse:
    """Change a category's prices by ``percent`` (one ``bulk_update``)."""
    body = json.loads(request.body)
    items = list(Item.objects.filter(category=str(body["category"])))
    for item in items:
        item.price_cents = item.price_cents * (100 + int(body["percent"])) // 100
    Item.objects.bulk_update(items, ["price_cents"])
    return JsonResponse({"repriced": len(items)})


@txcache_views.bypass
def metrics(request: HttpRequest) -> HttpResponse:
    """This process's cacheable functions and cached querysets, for Prometheus."""
    return HttpResponse(txcache_metrics.render(), content_type="text/plain; version=0.0.4")

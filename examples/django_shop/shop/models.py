"""Items and orders. Their managers are ``CachedManager``s: ``.txcache()`` querysets read
through the cache."""

from __future__ import annotations

from django.db import models

from txcache.django import CachedManager


class Item(models.Model):
    """Something for sale."""

    name = models.CharField(max_length=200, db_index=True)
    category = models.CharField(max_length=50, db_index=True)
    price_cents = models.IntegerField()
    stock = models.IntegerField()

    objects = CachedManager()

    def __str__(self) -> str:
        return self.name


class Order(models.Model):
    """``quantity`` of an item, bought by a customer."""

    item = models.ForeignKey(Item, on_delete=models.PROTECT, related_name="orders")
    customer = models.CharField(max_length=50, db_index=True)
    quantity = models.IntegerField()
    total_cents = models.IntegerField()
    created = models.DateTimeField(auto_now_add=True)

    objects = CachedManager()

    def __str__(self) -> str:
        return f"{self.quantity} x {self.item_id} for {self.customer}"

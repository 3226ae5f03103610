"""The admin: items and orders. Its pages run in the request's transaction like any view:
a change is a read/write request whose token the next page honours."""

from django.contrib import admin

from .models import Item, Order


@admin.register(Item)
class ItemAdmin(admin.ModelAdmin):
    """Items, by category."""

    list_display = ("id", "name", "category", "price_cents", "stock")
    list_filter = ("category",)


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    """Orders, newest first."""

    list_display = ("id", "item", "customer", "quantity", "total_cents", "created")
    ordering = ("-id",)

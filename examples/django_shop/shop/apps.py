"""The shop app's config."""

from django.apps import AppConfig


class ShopConfig(AppConfig):
    """Items and orders."""

    name = "shop"

"""The cached reads: ``@txcache.cacheable`` async functions that run ORM queries in the
current read-only transaction (the request's) and return plain data — dicts and lists,
which the cache stores exactly, so a hit returns what the miss returned. A function opens a
session of its own (its arguments are its cache key: a session cannot be one); that session
joins the request's transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker

import txcache
from txcache import sqlalchemy as txsa

from .models import Order, Product

_sessions: async_sessionmaker[txsa.AsyncSession] | None = None


def use(sessions: async_sessionmaker[txsa.AsyncSession] | None) -> None:
    """Open the functions' sessions from ``sessions`` (at start; ``None`` at shutdown)."""
    global _sessions
    _sessions = sessions


def session() -> txsa.AsyncSession:
    """A new session; its statements run in the current txcache transaction."""
    if _sessions is None:
        raise RuntimeError("the shop has not started")
    return _sessions()


@txcache.cacheable
async def product(product_id: int) -> dict[str, Any] | None:
    """One product, or ``None``; tagged ``public.products:id=<id>``."""
    async with session() as s:
        found = await s.get(Product, product_id)
        return None if found is None else txsa.to_dict(found)


@txcache.cacheable
async def products_in(category: str) -> list[dict[str, Any]]:
    """A category's products by id; tagged ``public.products:category=<category>``."""
    async with session() as s:
        statement = select(Product).where(Product.category == category).order_by(Product.id)
        return [txsa.to_dict(found) for found in await s.scalars(statement)]


@txcache.cacheable
async def orders_of(customer: str) -> list[dict[str, Any]]:
    """A customer's orders, oldest first; tagged ``public.orders:customer=<customer>``."""
    async with session() as s:
        statement = (
            select(Order.id, Order.product_id, Order.quantity, Order.total_cents)
            .where(Order.customer == customer)
            .order_by(Order.id)
        )
        return txsa.dicts(await s.execute(statement))

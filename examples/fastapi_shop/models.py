"""The shop's tables, as SQLAlchemy 2 declarative models. Nothing txcache-specific: the
invalidation tags come from the SQL SQLAlchemy compiles. The columns a page is looked up by
are indexed (``category``, ``customer``), so their pages get fine tags
(``public.products:category=lamps``) and a write invalidates only the pages it touches."""

from __future__ import annotations

from sqlalchemy import ForeignKey
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """The shop's declarative base."""


class Product(Base):
    """A product of the catalogue; prices in cents."""

    __tablename__ = "products"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str]
    category: Mapped[str] = mapped_column(index=True)
    price_cents: Mapped[int]
    stock: Mapped[int]


class Order(Base):
    """An order of one product; its total is fixed when it is placed."""

    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(index=True)
    product_id: Mapped[int] = mapped_column(ForeignKey("products.id"))
    quantity: Mapped[int]
    total_cents: Mapped[int]


SEED: tuple[dict[str, str | int], ...] = (
    {"name": "desk lamp", "category": "lamps", "price_cents": 2500, "stock": 40},
    {"name": "floor lamp", "category": "lamps", "price_cents": 8900, "stock": 12},
    {"name": "oak desk", "category": "desks", "price_cents": 32000, "stock": 5},
    {"name": "standing desk", "category": "desks", "price_cents": 54000, "stock": 3},
    {"name": "office chair", "category": "chairs", "price_cents": 19900, "stock": 20},
)
"""What an empty catalogue starts with."""

"""The shop's HTTP API: FastAPI with SQLAlchemy's AsyncSession on txcache.

- **GETs run in a read-only transaction** (the :func:`read_only` dependency): one commit
  point for the whole request, at most ``SHOP_STALENESS`` seconds old, whose cacheable
  reads (``catalogue``) come from the cache when they can.
- **Writes run in transactions of their own**: a session's (most endpoints) or a Core
  connection's (``restock``); the endpoint commits.
- **Read-your-writes across requests** (:class:`~.tokens.TokenMiddleware`): a response to
  a request that wrote carries the newest token, in the ``X-Txcache-Token`` header and the
  ``txcache_token`` cookie; a request that hands it back (either way; the newer if both)
  reads at a commit point no older than it, so it sees that write — even from a page cached
  before the write, which the write invalidated.

``uvicorn --factory fastapi_shop.app:create_app`` with the ``TXCACHE_*`` settings of
``txcache up`` in the environment (README.md).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from starlette.types import Scope

import txcache
from txcache import metrics
from txcache import sqlalchemy as txsa
from txcache.aio import AsyncCache, AsyncReadOnlyTransaction

from . import catalogue
from .models import SEED, Base, Order, Product
from .tokens import TokenMiddleware

DEFAULT_STALENESS = 5.0
"""Seconds of staleness of a GET unless ``SHOP_STALENESS`` says otherwise."""


@dataclass(frozen=True)
class Shop:
    """What the running app holds: the cache, the engine and its sessions, the staleness
    of GETs."""

    cache: AsyncCache
    engine: AsyncEngine
    sessions: async_sessionmaker[txsa.AsyncSession]
    staleness: float


def create_app(*, staleness: float | None = None) -> FastAPI:
    """The app. ``staleness``: seconds a GET may be behind the database (default
    ``$SHOP_STALENESS``, else 5); a request with a token is never behind that write."""
    if staleness is None:
        staleness = float(os.environ.get("SHOP_STALENESS", DEFAULT_STALENESS))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        cache = await txcache.connect_async()  # TXCACHE_DSN, TXCACHE_NODES, TXCACHE_AGENT
        engine = txsa.create_async_engine(cache)
        sessions = txsa.async_sessionmaker(engine, expire_on_commit=False)
        try:
            await prepare(sessions)
            catalogue.use(sessions)
            app.state.shop = Shop(cache, engine, sessions, staleness)
            yield
        finally:
            catalogue.use(None)
            await engine.dispose()
            await cache.close()

    app = FastAPI(title="txcache shop", lifespan=lifespan)
    app.add_middleware(TokenMiddleware, cache=_cache)
    app.include_router(router)
    app.add_exception_handler(txcache.SnapshotUnavailable, _retry_later)
    return app


async def prepare(sessions: async_sessionmaker[txsa.AsyncSession]) -> None:
    """Create the tables if they are missing, and seed an empty catalogue."""
    async with sessions() as session:
        connection = await session.connection()
        await connection.run_sync(Base.metadata.create_all)
        if await session.scalar(select(func.count()).select_from(Product)) == 0:
            session.add_all(Product(**product) for product in SEED)
        await session.commit()


def _cache(scope: Scope) -> AsyncCache:
    """The app's cache, for the tokens."""
    shop: Shop = scope["app"].state.shop
    return shop.cache


async def _retry_later(_request: Request, error: Exception) -> JSONResponse:
    """``SnapshotUnavailable``: the one retryable error (the snapshot the request's cached
    data is valid at is gone); the client retries, as after a serialization failure."""
    return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": "0"})


# -- dependencies ------------------------------------------------------------------------


def shop_of(request: Request) -> Shop:
    """The running app's :class:`Shop`."""
    shop: Shop = request.app.state.shop
    return shop


async def read_only(request: Request) -> AsyncIterator[AsyncReadOnlyTransaction]:
    """The request's read-only transaction: at most the shop's staleness old, and no older
    than the client's token (the request's own: :mod:`.tokens`). Cacheable calls and
    sessions of the request join it."""
    shop = shop_of(request)
    async with shop.cache.read_only(staleness=shop.staleness) as tx:
        yield tx


ReadOnly = Annotated[AsyncReadOnlyTransaction, Depends(read_only)]


async def read_session(request: Request, _tx: ReadOnly) -> AsyncIterator[txsa.AsyncSession]:
    """A session in the request's read-only transaction."""
    async with shop_of(request).sessions() as session:
        yield session


async def write_session(request: Request) -> AsyncIterator[txsa.AsyncSession]:
    """A session whose statements run in its own read/write transaction; the endpoint
    commits it, or leaves it to be rolled back. What it commits, the response's token
    covers (:mod:`.tokens`)."""
    async with shop_of(request).sessions() as session:
        yield session


ReadSession = Annotated[txsa.AsyncSession, Depends(read_session)]
WriteSession = Annotated[txsa.AsyncSession, Depends(write_session)]


# -- the API -----------------------------------------------------------------------------

router = APIRouter()


class NewProduct(BaseModel):
    """A product to add."""

    name: str = Field(min_length=1)
    category: str = Field(min_length=1)
    price_cents: int = Field(ge=0)
    stock: int = Field(ge=0)


class ProductChange(BaseModel):
    """What to change of a product."""

    name: str | None = Field(default=None, min_length=1)
    price_cents: int | None = Field(default=None, ge=0)
    stock: int | None = Field(default=None, ge=0)


class NewOrder(BaseModel):
    """An order of ``quantity`` of one product."""

    customer: str = Field(min_length=1)
    product_id: int
    quantity: int = Field(gt=0)


@router.get("/products/{product_id}", dependencies=[Depends(read_only)])
async def get_product(product_id: int) -> dict[str, Any]:
    """One product (cached)."""
    found = await catalogue.product(product_id)
    if found is None:
        raise HTTPException(404, "no such product")
    return found


@router.get("/categories/{category}/products", dependencies=[Depends(read_only)])
async def get_category(category: str) -> list[dict[str, Any]]:
    """A category's products (cached)."""
    return await catalogue.products_in(category)


@router.get("/customers/{customer}/orders", dependencies=[Depends(read_only)])
async def get_orders(customer: str) -> list[dict[str, Any]]:
    """A customer's orders (cached)."""
    return await catalogue.orders_of(customer)


@router.get("/orders/{order_id}")
async def get_order(order_id: int, session: ReadSession) -> dict[str, Any]:
    """One order, read through the request's session at its snapshot (not cached: a bare
    query of the read-only transaction)."""
    found = await session.get(Order, order_id)
    if found is None:
        raise HTTPException(404, "no such order")
    return txsa.to_dict(found)


@router.post("/products", status_code=201)
async def add_product(new: NewProduct, session: WriteSession) -> dict[str, Any]:
    """Add a product; the answer says how many its category has now, read in a second
    transaction of the session (committed too: it wrote nothing)."""
    product = Product(**new.model_dump())
    session.add(product)
    await session.commit()
    count = select(func.count()).select_from(Product).where(Product.category == new.category)
    in_category = await session.scalar(count)
    await session.commit()
    return {**txsa.to_dict(product), "in_category": in_category}


class Restock(BaseModel):
    """Items of a product received."""

    quantity: int = Field(gt=0)


@router.post("/products/{product_id}/restock")
async def restock(product_id: int, received: Restock, request: Request) -> dict[str, Any]:
    """Add to a product's stock: one Core statement, in a transaction of the engine's own
    (its commit is the request's write as a session's is)."""
    statement = (
        update(Product)
        .where(Product.id == product_id)
        .values(stock=Product.stock + received.quantity)
        .returning(Product.stock)
    )
    async with shop_of(request).engine.begin() as conn:
        stock = await conn.scalar(statement)
    if stock is None:
        raise HTTPException(404, "no such product")
    return {"id": product_id, "stock": stock}


@router.put("/products/{product_id}")
async def change_product(
    product_id: int, change: ProductChange, session: WriteSession
) -> dict[str, Any]:
    """Change a product's name, price or stock."""
    product = await session.get(Product, product_id, with_for_update=True)
    if product is None:
        raise HTTPException(404, "no such product")
    for field, value in change.model_dump(exclude_none=True).items():
        setattr(product, field, value)
    await session.commit()
    return txsa.to_dict(product)


@router.post("/orders", status_code=201)
async def place_order(new: NewOrder, session: WriteSession) -> dict[str, Any]:
    """Place an order: the product's stock goes down by the quantity (409 if too low). The
    product row is locked first, so concurrent orders never oversell."""
    product = await session.get(Product, new.product_id, with_for_update=True)
    if product is None:
        raise HTTPException(404, "no such product")
    if product.stock < new.quantity:
        raise HTTPException(409, f"only {product.stock} left")
    product.stock -= new.quantity
    order = Order(
        customer=new.customer,
        product_id=product.id,
        quantity=new.quantity,
        total_cents=new.quantity * product.price_cents,
    )
    session.add(order)
    await session.commit()
    return txsa.to_dict(order)


@router.get("/metrics", response_class=PlainTextResponse)
async def get_metrics() -> str:
    """This process's cache statistics, for Prometheus (hits and misses per function)."""
    return metrics.render()

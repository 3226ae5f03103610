"""The shop's HTTP API: FastAPI with SQLAlchemy's AsyncSession on txcache.

- **GETs run in a read-only transaction** (the :func:`read_only` dependency): one commit
  point for the whole request, at most ``SHOP_STALENESS`` seconds old, whose cacheable
  reads (``catalogue``) come from the cache when they can.
- **Writes run in the session's own read/write transaction**: the endpoint commits, and the
  commit's ``not_before`` token goes back to the client in the ``X-Txcache-Token`` header
  and the ``txcache_token`` cookie.
- **Read-your-writes across requests**: a request that carries the token (either way; the
  newer if both) reads at a commit point no older than it, so it sees that write — even
  from a page cached before the write, which the write invalidated.

``uvicorn --factory fastapi_shop.app:create_app`` with the ``TXCACHE_*`` settings of
``txcache up`` in the environment (README.md).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

import txcache
from txcache import metrics
from txcache import sqlalchemy as txsa
from txcache.aio import AsyncCache, AsyncReadOnlyTransaction

from . import catalogue
from .models import SEED, Base, Order, Product

TOKEN_HEADER = "X-Txcache-Token"
"""The response header that carries a write's token, and the request header that hands it
back."""

TOKEN_COOKIE = "txcache_token"
"""The cookie that carries the newest token a client got, for browsers."""

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


async def _retry_later(_request: Request, error: Exception) -> JSONResponse:
    """``SnapshotUnavailable``: the one retryable error (the snapshot the request's cached
    data is valid at is gone); the client retries, as after a serialization failure."""
    return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": "0"})


# -- dependencies ------------------------------------------------------------------------


def shop_of(request: Request) -> Shop:
    """The running app's :class:`Shop`."""
    shop: Shop = request.app.state.shop
    return shop


def token_of(request: Request) -> int | None:
    """The newest token the request carries (header or cookie), if any."""
    tokens: list[int] = []
    for raw in (request.headers.get(TOKEN_HEADER), request.cookies.get(TOKEN_COOKIE)):
        if raw is None:
            continue
        if not raw.isdigit():
            raise HTTPException(400, f"{TOKEN_HEADER} must be a txcache token (digits)")
        tokens.append(int(raw))
    return max(tokens, default=None)


async def read_only(request: Request) -> AsyncIterator[AsyncReadOnlyTransaction]:
    """The request's read-only transaction: at most the shop's staleness old, no older
    than the request's token. Cacheable calls and sessions of the request join it."""
    shop = shop_of(request)
    async with shop.cache.read_only(staleness=shop.staleness, not_before=token_of(request)) as tx:
        yield tx


ReadOnly = Annotated[AsyncReadOnlyTransaction, Depends(read_only)]


async def read_session(request: Request, _tx: ReadOnly) -> AsyncIterator[txsa.AsyncSession]:
    """A session in the request's read-only transaction."""
    async with shop_of(request).sessions() as session:
        yield session


async def write_session(request: Request) -> AsyncIterator[txsa.AsyncSession]:
    """A session whose statements run in its own read/write transaction; the endpoint
    commits it with :func:`commit`, or leaves it to be rolled back."""
    async with shop_of(request).sessions() as session:
        yield session


ReadSession = Annotated[txsa.AsyncSession, Depends(read_session)]
WriteSession = Annotated[txsa.AsyncSession, Depends(write_session)]


async def commit(session: txsa.AsyncSession, response: Response) -> None:
    """Commit the session's transaction and hand its token to the client."""
    await session.commit()
    token = await session.commit_timestamp()
    if token is not None:
        response.headers[TOKEN_HEADER] = str(token)
        response.set_cookie(TOKEN_COOKIE, str(token), httponly=True, samesite="lax")


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
async def add_product(new: NewProduct, session: WriteSession, response: Response) -> dict[str, Any]:
    """Add a product."""
    product = Product(**new.model_dump())
    session.add(product)
    await session.flush()
    await commit(session, response)
    return txsa.to_dict(product)


@router.put("/products/{product_id}")
async def change_product(
    product_id: int, change: ProductChange, session: WriteSession, response: Response
) -> dict[str, Any]:
    """Change a product's name, price or stock."""
    product = await session.get(Product, product_id, with_for_update=True)
    if product is None:
        raise HTTPException(404, "no such product")
    for field, value in change.model_dump(exclude_none=True).items():
        setattr(product, field, value)
    await session.flush()
    await commit(session, response)
    return txsa.to_dict(product)


@router.post("/orders", status_code=201)
async def place_order(new: NewOrder, session: WriteSession, response: Response) -> dict[str, Any]:
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
    await session.flush()
    await commit(session, response)
    return txsa.to_dict(order)


@router.get("/metrics", response_class=PlainTextResponse)
async def get_metrics() -> str:
    """This process's cache statistics, for Prometheus (hits and misses per function)."""
    return metrics.render()

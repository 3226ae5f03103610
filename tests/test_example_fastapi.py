"""examples/fastapi_shop over HTTP: the app under uvicorn in a subprocess, against a real
stack (PostgreSQL, two nodes, the agent), driven with httpx — cached GETs (the hits in the
app's /metrics), read-your-writes across requests through the token header and the cookie
(whatever the request's writes went through: a session, a Core connection, two commits),
a token ahead of the database, a write made by another connection invalidating a cached
page, and concurrent requests: orders racing for the last items while pages are read.

The tests share one stack and one server (the module's fixture); each works on rows of its
own: product 2; product 1, the lamps and customer ann; the desks; product 5 and the c*
customers; the products it adds, in a category of its own."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from fastapi_shop.server import ShopServer
from postgres_fixtures import fresh_database
from txcache.stack import EmbeddedPostgres, Stack, StackOptions, wait_until

TOKEN_HEADER = "X-Txcache-Token"
AGENT_ARGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")


class Shop(ShopServer):
    """The example's server, with what its tests ask of it."""

    def client(self) -> httpx.Client:
        """A client with a cookie jar of its own, as a browser would have."""
        return httpx.Client(base_url=self.url, timeout=30)

    def counter(self, metric: str, function: str, **labels: str) -> float:
        """A counter of the app's ``/metrics`` for a function of ``fastapi_shop.catalogue``
        (summed over the other labels, or for ``labels``)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            match = re.fullmatch(rf"txcache_function_{metric}_total\{{(.*)\}} (\S+)", line)
            if match is None:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            wanted = {"function": f"fastapi_shop.catalogue.{function}", **labels}
            if all(found.get(name) == value for name, value in wanted.items()):
                total += float(match.group(2))
        return total


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """One stack on a fresh database (the app creates its tables and seeds them) and the
    app serving it."""
    databases = fresh_database(postgres)
    dsn = next(databases)
    options = StackOptions(dsn=dsn, nodes=2, max_memory="64mb", agent_args=AGENT_ARGS)
    try:
        with Stack(options) as stack:
            log = tmp_path_factory.mktemp("shop") / "uvicorn.log"
            with Shop(stack, log, environment={"TXCACHE_REFRESH_INTERVAL": "0.05"}) as server:
                yield server
    finally:
        next(databases, None)  # drops the database


def token_in(response: httpx.Response) -> int:
    """The token a write handed back (the header; the cookie carries the same)."""
    assert response.is_success, response.text
    token = response.headers[TOKEN_HEADER]
    assert response.cookies["txcache_token"] == token
    return int(token)


def hit(shop: Shop, client: httpx.Client, path: str, function: str) -> object:
    """GET ``path`` until the app reports a hit of ``function`` (the first read of a table
    may not store: it read the catalog anew; the agent's stream must pass that reading);
    the page."""
    hits = shop.counter("hits", function)
    pages: list[object] = []

    def served_from_cache() -> bool:
        response = client.get(path)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        return shop.counter("hits", function) > hits

    wait_until(served_from_cache, f"a cached {path}", timeout=20)
    assert all(page == pages[0] for page in pages)  # a hit equals the misses before it
    return pages[-1]


def test_get_pages_are_served_from_the_cache(shop: Shop) -> None:
    with shop.client() as client:
        page = hit(shop, client, "/products/2", "product")
        assert page == {
            "id": 2,
            "name": "floor lamp",
            "category": "lamps",
            "price_cents": 8900,
            "stock": 12,
        }
        hits = shop.counter("hits", "product")
        misses = shop.counter("misses", "product")
        for _ in range(5):
            assert client.get("/products/2").json() == page
        assert shop.counter("hits", "product") == hits + 5
        assert shop.counter("misses", "product") == misses
        assert client.get("/products/999").status_code == 404
        # Superscripts (sent as Latin-1 bytes) pass str.isdigit(), which int() refuses.
        for token in (b"soon", "\u00b2".encode("latin-1"), "\u00b9\u00b3".encode("latin-1")):
            headers = {TOKEN_HEADER.encode(): token}
            assert client.get("/products/2", headers=headers).status_code == 400


def test_a_write_then_a_read_with_its_token_sees_the_write(shop: Shop) -> None:
    with shop.client() as client:
        hit(shop, client, "/products/1", "product")
        hit(shop, client, "/categories/lamps/products", "products_in")
        hit(shop, client, "/customers/ann/orders", "orders_of")
        changed = client.put("/products/1", json={"price_cents": 1999})
        token = token_in(changed)
        assert changed.json()["price_cents"] == 1999
        # Another client (no cookie) that hands the token back in the header.
        with httpx.Client(base_url=shop.url, headers={TOKEN_HEADER: str(token)}) as other:
            assert other.get("/products/1").json()["price_cents"] == 1999
            lamps = other.get("/categories/lamps/products").json()
            assert [lamp["price_cents"] for lamp in lamps] == [1999, 8900]
        # The same client, by its cookie alone: its order, and the stock it took.
        placed = client.post("/orders", json={"customer": "ann", "product_id": 1, "quantity": 2})
        assert placed.status_code == 201
        assert token_in(placed) > token
        assert client.cookies["txcache_token"] == placed.headers[TOKEN_HEADER]
        orders = client.get("/customers/ann/orders").json()
        assert orders == [
            {"id": placed.json()["id"], "product_id": 1, "quantity": 2, "total_cents": 3998}
        ]
        assert client.get(f"/orders/{placed.json()['id']}").json()["customer"] == "ann"
        assert client.get("/products/1").json()["stock"] == 38


def test_a_write_by_another_connection_invalidates_the_cached_page(shop: Shop) -> None:
    with shop.client() as client:
        desks = hit(shop, client, "/categories/desks/products", "products_in")
        assert isinstance(desks, list)
        assert [desk["price_cents"] for desk in desks] == [32000, 54000]
        runs = shop.counter("misses", "products_in")
        with psycopg.connect(shop.stack.dsn, autocommit=True) as admin:
            admin.execute("UPDATE products SET price_cents = price_cents + 1 WHERE id = 3")
            # The token of a write made outside the library (docs/library.md, "Commit and
            # read-your-writes"), handed over as any other.
            row = admin.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
            token = row.fetchone()
        assert token is not None
        page = client.get("/categories/desks/products", headers={TOKEN_HEADER: str(token[0])})
        assert [desk["price_cents"] for desk in page.json()] == [32001, 54000]
        assert shop.counter("misses", "products_in") == runs + 1  # recomputed, once

        def fresh_without_a_token() -> bool:  # the newest pins are past the write by now
            page = client.get("/categories/desks/products")  # this client wrote nothing
            return [desk["price_cents"] for desk in page.json()] == [32001, 54000]

        wait_until(fresh_without_a_token, "a page without a token to show the write")


def test_concurrent_orders_and_reads(shop: Shop) -> None:
    # 40 orders race for product 5's 20 chairs while 40 reads of its pages run beside them,
    # each request a task of the app's event loop with a transaction of its own: the product
    # row is locked by each order, so exactly 20 succeed; every read answers.
    customers = [f"c{index}" for index in range(4)]

    async def order(client: httpx.AsyncClient, index: int) -> httpx.Response:
        body = {"customer": customers[index % 4], "product_id": 5, "quantity": 1}
        return await client.post("/orders", json=body)

    async def look(client: httpx.AsyncClient, index: int) -> httpx.Response:
        paths = ("/products/5", "/categories/chairs/products", f"/customers/c{index % 4}/orders")
        return await client.get(paths[index % 3])

    async def race() -> tuple[list[httpx.Response], list[httpx.Response]]:
        limits = httpx.Limits(max_connections=80)
        async with httpx.AsyncClient(base_url=shop.url, timeout=60, limits=limits) as client:
            jobs = [order(client, index) for index in range(40)]
            jobs += [look(client, index) for index in range(40)]
            responses = await asyncio.gather(*jobs)
        return responses[:40], responses[40:]

    orders, looks = asyncio.run(race())
    placed = [response for response in orders if response.status_code == 201]
    assert len(placed) == 20
    assert sorted({response.status_code for response in orders}) == [201, 409]
    assert all(response.status_code == 200 for response in looks), [r.text for r in looks]
    for response in looks:
        page = response.json()
        stocks = [page["stock"]] if isinstance(page, dict) else []
        stocks += [row["stock"] for row in page if isinstance(row, dict) and "stock" in row]
        assert all(0 <= stock <= 20 for stock in stocks)
    newest = max(token_in(response) for response in placed)
    with httpx.Client(base_url=shop.url, headers={TOKEN_HEADER: str(newest)}) as client:
        assert client.get("/products/5").json()["stock"] == 0
        per_customer = [len(client.get(f"/customers/{name}/orders").json()) for name in customers]
        assert sum(per_customer) == 20
        assert per_customer == [
            sum(1 for r in placed if r.json()["customer"] == name) for name in customers
        ]


def new_product(client: httpx.Client, category: str, stock: int = 1) -> httpx.Response:
    """POST a product of ``category`` (a category of the test's own)."""
    body = {"name": f"{category} item", "category": category, "price_cents": 100, "stock": stock}
    response = client.post("/products", json=body)
    assert response.status_code == 201, response.text
    return response


def test_a_write_in_a_core_connection_hands_back_its_token(shop: Shop) -> None:
    with shop.client() as client:
        added = new_product(client, "core")
        product = added.json()["id"]
        page = hit(shop, client, f"/products/{product}", "product")
        assert isinstance(page, dict)
        assert page["stock"] == 1
        restocked = client.post(f"/products/{product}/restock", json={"quantity": 5})
        assert restocked.json() == {"id": product, "stock": 6}
        assert token_in(restocked) > token_in(added)
        assert client.get(f"/products/{product}").json()["stock"] == 6  # by its cookie


def test_a_request_that_commits_twice_hands_back_the_token_of_its_write(shop: Shop) -> None:
    # POST /products commits the product, then reads its category's count in a second
    # transaction, which it commits too: that commit wrote nothing.
    with shop.client() as client:
        hit(shop, client, "/categories/twice/products", "products_in")  # empty, cached
        added = new_product(client, "twice")
        assert added.json()["in_category"] == 1
        token_in(added)
        assert [p["id"] for p in client.get("/categories/twice/products").json()] == [
            added.json()["id"]
        ]


def test_an_old_cookie_ahead_of_the_database_reads_the_newest_state(shop: Shop) -> None:
    """A token from before a restore, or from another deployment, in a browser's cookie:
    every request still answers, at the newest state."""
    with shop.client() as client:
        product = new_product(client, "future").json()["id"]
        hit(shop, client, f"/products/{product}", "product")
    ahead = str(2**70)  # after everything the database wrote, past 64 bits too
    with shop.client() as client:
        client.cookies.set("txcache_token", ahead)
        with psycopg.connect(shop.stack.dsn, autocommit=True) as admin:
            admin.execute("UPDATE products SET stock = 9 WHERE id = %s", (product,))
        assert client.get(f"/products/{product}").json()["stock"] == 9  # the newest state
        changed = client.put(f"/products/{product}", json={"stock": 10})
        assert changed.status_code == 200, changed.text
        assert client.get(f"/products/{product}").json()["stock"] == 10
        assert client.get("/categories/future/products").status_code == 200
    assert shop.log.read_text().count("lies after everything") == 1

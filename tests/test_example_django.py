"""examples/django_shop over HTTP: the Django project served by granian (WSGI) in a
subprocess, against a real stack (PostgreSQL, two nodes, the agent), driven with httpx —
cached pages (the hits in the app's /metrics), an admin change then a page that shows it, a
``bulk_update`` and an order seen with their tokens, a raw ``UPDATE`` from another connection
showing on a cached page, and a migration that alters a cached model's table while the site
runs, after which no page is stale.

The tests share one stack and one server (the module's fixture); each works on items of its
own: 1 (pages), 2 (the admin), chairs (the bulk update and the orders), 4 (the raw update);
the migration comes last and renames every item. A customer's orders per day show in the
time zone the page asks for, never in another one's cached."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from django_shop.server import DjangoShopServer
from postgres_fixtures import fresh_database
from txcache.stack import EmbeddedPostgres, Stack, StackOptions, wait_until

AGENT_ARGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")
ADMIN_PASSWORD = "admin-secret-1"
TOKEN_COOKIE = "txcache_token"
TOKEN_HEADER = "X-Txcache-Token"
ITEMS = "txcache.django.queryset.rows[shop.Item]"
DAYS = "shop.catalogue.orders_by_day"


class Shop(DjangoShopServer):
    """The example's server, with what its tests ask of it."""

    def client(self) -> httpx.Client:
        """A client with a cookie jar of its own, as a browser would have."""
        return httpx.Client(base_url=self.url, timeout=30)

    def hits(self, function: str) -> float:
        """The hits of a cacheable function (or a model's cached querysets) in /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        pattern = rf'txcache_function_hits_total\{{function="{re.escape(function)}"\}} (\S+)'
        return sum(float(found) for found in re.findall(pattern, text))


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """One stack on a fresh database, the site serving it, the database migrated to ``shop
    0001`` (its six items; 0002 runs in a test, while the site serves) with an admin user."""
    databases = fresh_database(postgres)
    options = StackOptions(dsn=next(databases), nodes=2, max_memory="64mb", agent_args=AGENT_ARGS)
    environment = {
        "TXCACHE_REFRESH_INTERVAL": "0.05",
        "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD,
    }
    try:
        with Stack(options) as stack:
            log = tmp_path_factory.mktemp("django_shop") / "granian.log"
            # A short staleness bound: a page shows a raw update (which carries no token)
            # once the pins it may still read at are this old.
            with Shop(stack, log, staleness=3, environment=environment) as server:
                for app in ("contenttypes", "auth", "admin", "sessions"):
                    server.manage("migrate", app)
                server.manage("migrate", "shop", "0001")
                server.manage(
                    "createsuperuser", "--noinput", "--username", "admin", "--email", "a@b.test"
                )
                yield server
    finally:
        next(databases, None)  # drops the database


def cached(shop: Shop, client: httpx.Client, path: str, function: str) -> Any:
    """GET ``path`` until the app reports a hit of ``function`` (the first read of a table
    may not store: it read the catalog anew); the page, equal to every page before it."""
    hits = shop.hits(function)
    pages: list[Any] = []  # JSON

    def served_from_cache() -> bool:
        response = client.get(path)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        return shop.hits(function) > hits

    wait_until(served_from_cache, f"a cached {path}", timeout=30)
    assert all(page == pages[0] for page in pages)
    return pages[-1]


def test_pages_are_served_from_the_cache(shop: Shop) -> None:
    with shop.client() as client:
        page = cached(shop, client, "/items/1/", ITEMS)
        assert page == {"id": 1, "name": "desk lamp", "category": "lamps",
                        "price_cents": 2500, "stock": 40, "orders": 0, "units": 0}  # fmt: skip
        hits = shop.hits(ITEMS)
        for _ in range(5):
            assert client.get("/items/1/").json() == page
        assert shop.hits(ITEMS) == hits + 5
        lamps = cached(shop, client, "/categories/lamps/", "shop.catalogue.items_in")
        assert [item["name"] for item in lamps["items"]] == ["desk lamp", "floor lamp"]
        assert client.get("/items/999/").status_code == 404
    assert "endpoint(s) up; all reachable" in shop.manage("txcache_status")


def csrf_token(page: httpx.Response) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)


def test_an_admin_change_shows_on_the_next_page(shop: Shop) -> None:
    with shop.client() as client:
        cached(shop, client, "/items/2/", ITEMS)
        login = client.get("/admin/login/")
        logged_in = client.post(
            "/admin/login/",
            data={
                "csrfmiddlewaretoken": csrf_token(login),
                "username": "admin",
                "password": ADMIN_PASSWORD,
                "next": "/admin/",
            },
        )
        assert logged_in.status_code == 302, logged_in.text
        form = client.get("/admin/shop/item/2/change/")
        assert form.status_code == 200  # the session of the login, read with its token
        changed = client.post(
            "/admin/shop/item/2/change/",
            data={
                "csrfmiddlewaretoken": csrf_token(form),
                "name": "floor lamp",
                "category": "lamps",
                "price_cents": "7900",
                "stock": "12",
                "_save": "Save",
            },
        )
        assert changed.status_code == 302, changed.text
        assert changed.headers[TOKEN_HEADER] == client.cookies[TOKEN_COOKIE]
        assert client.get("/items/2/").json()["price_cents"] == 7900
        listed = client.get("/admin/shop/item/")
        assert "floor lamp" in listed.text


def test_a_bulk_update_and_an_order_show_with_their_tokens(shop: Shop) -> None:
    with shop.client() as client:
        chairs = cached(shop, client, "/categories/chairs/", "shop.catalogue.items_in")
        assert [item["price_cents"] for item in chairs["items"]] == [12000, 3000]
        repriced = client.post("/items/reprice", json={"category": "chairs", "percent": 10})
        assert repriced.json() == {"repriced": 2}
        assert TOKEN_COOKIE in client.cookies
        chairs = client.get("/categories/chairs/").json()
        assert [item["price_cents"] for item in chairs["items"]] == [13200, 3300]
        cached(shop, client, "/customers/bea/orders", "shop.catalogue.orders_of")
        placed = client.post("/orders", json={"item_id": 5, "customer": "bea", "quantity": 2})
        assert placed.status_code == 201, placed.text
        orders = client.get("/customers/bea/orders").json()["orders"]
        assert orders == [{"id": placed.json()["id"], "item_id": 5, "item__name": "office chair",
                           "quantity": 2, "total_cents": 26400}]  # fmt: skip
        detail = client.get("/items/5/").json()
        assert (detail["stock"], detail["orders"], detail["units"]) == (18, 1, 2)


def test_a_customer_s_days_are_those_of_their_time_zone(shop: Shop) -> None:
    with shop.client() as client:
        placed = client.post("/orders", json={"item_id": 6, "customer": "cy", "quantity": 1})
        assert placed.status_code == 201, placed.text
        # UTC+14 and UTC-11: one instant, two dates, whatever the hour.
        east = cached(shop, client, "/customers/cy/days?tz=Pacific/Kiritimati", DAYS)
        west = client.get("/customers/cy/days", params={"tz": "Pacific/Pago_Pago"}).json()
        assert [day["orders"] for day in east["days"]] == [day["orders"] for day in west["days"]]
        assert east["days"][0]["day"] > west["days"][0]["day"]  # not Kiritimati's cached days
        assert client.get("/customers/cy/days", params={"tz": "Mars/Olympus"}).status_code == 400


def test_a_raw_update_from_another_connection_shows(shop: Shop) -> None:
    with shop.client() as client:
        cached(shop, client, "/items/4/", ITEMS)
        with psycopg.connect(shop.stack.dsn, autocommit=True) as other:
            other.execute("UPDATE shop_item SET stock = 0 WHERE id = 4")

        def shown() -> bool:  # no token: within the staleness bound, as the newest pin moves
            return bool(client.get("/items/4/").json()["stock"] == 0)

        wait_until(shown, "the page to show the raw update", timeout=20)


def test_a_migration_while_the_site_runs_leaves_nothing_stale(shop: Shop) -> None:
    paths = ["/items/3/", "/categories/desks/", "/items/"]
    with shop.client() as client:
        cached(shop, client, "/categories/desks/", "shop.catalogue.items_in")
        statuses: list[int] = []
        stop = threading.Event()
        reader = threading.Thread(target=keep_reading, args=(shop, paths, statuses, stop.is_set))
        reader.start()
        try:
            shop.manage("migrate", "shop")  # 0002: a wider, indexed column, names in title case
        finally:
            stop.set()
            reader.join()
        # A read whose prepared statement the type change invalidated is retried: 503.
        assert set(statuses) <= {200, 503}
        assert 200 in statuses

        def renamed() -> bool:
            return bool(client.get("/items/3/").json()["name"] == "Oak Desk")

        wait_until(renamed, "the pages to show the migration", timeout=30)
        shop.stack.caught_up()
        for _ in range(3):
            assert client.get("/items/3/").json()["name"] == "Oak Desk"
            desks = client.get("/categories/desks/").json()["items"]
            assert [item["name"] for item in desks] == ["Oak Desk", "Standing Desk"]
            every = client.get("/items/").json()["items"]
            assert all(item["name"] == item["name"].title() for item in every)


def keep_reading(
    shop: Shop, paths: list[str], statuses: list[int], stopped: Callable[[], bool]
) -> None:
    """GET ``paths`` in turn until ``stopped``, recording each status."""
    with shop.client() as client:
        while not stopped():
            for path in paths:
                statuses.append(client.get(path).status_code)

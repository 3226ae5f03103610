"""One read-your-writes story for Django (docs/django.md, "Read-your-writes"), over HTTP
through Django's test client and the middleware: every write committed through a
documented path — the request's own transaction, a ``read_write()`` block in a ``@bypass``
view, an ``on_commit`` callback's ``read_write()``, Django's own connection — is seen by
the thread's next read and handed to the client in the response's token; a commit that
wrote nothing keeps the last token; a token ahead of the database does not break a
``GET``; ``TOKEN_MAX_AGE`` below the staleness is a configuration error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core import signing
from django.core.checks import run_checks
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.test import Client, override_settings
from django.urls import path

import txcache.django
from django_fixtures import DjangoShop, Item, item_page, start_shop
from txcache._stats import view_stats
from txcache.django import decorators as txcache_views
from txcache.stack import EmbeddedPostgres, wait_until

COOKIE = "txcache_token"
HEADER = "X-Txcache-Token"
SALT = "txcache.django.token"


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    with override_settings(ROOT_URLCONF=__name__):
        yield from start_shop(postgres)


def set_price(item_id: int, price: int) -> None:
    with txcache.django.read_write():
        Item.objects.filter(id=item_id).update(price=price)


def cached_price(item_id: int) -> int:
    """The item's price through a cached queryset, in a read-only transaction of its own
    (outside the request's: a ``@bypass`` view has none)."""
    price: int = Item.objects.filter(id=item_id).txcache().get().price
    return price


@txcache_views.bypass
def write_then_read(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST, in no txcache transaction: a helper writes in ``read_write()``; then a cached
    read of the same thread."""
    set_price(item_id, int(request.POST["price"]))
    return JsonResponse({"price": cached_price(item_id)})


@txcache_views.bypass
def write_nothing_after(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST, bypassed: a write, then a ``read_write()`` block that writes nothing, then a
    cached read."""
    set_price(item_id, int(request.POST["price"]))
    with txcache.django.read_write():
        Item.objects.filter(id=-1).update(price=0)  # no row: nothing written
    return JsonResponse({"price": cached_price(item_id)})


def write_on_commit(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST: the request's transaction writes nothing; a callback run after its commit
    writes in a ``read_write()`` of its own."""
    price = int(request.POST["price"])
    transaction.on_commit(lambda: set_price(item_id, price))
    return JsonResponse({"deferred": True})


def write_on_commit_in_a_get(request: HttpRequest, item_id: int) -> JsonResponse:
    """GET: a callback's ``read_write()``, which Django runs at once (it sees no
    transaction), inside the request's read-only transaction."""
    price = int(request.GET["price"])
    transaction.on_commit(lambda: set_price(item_id, price))
    return JsonResponse({"deferred": True})


def write_on_commit_own_connection(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST: a callback run after the request's commit writes on Django's own
    connection."""
    price = int(request.POST["price"])
    transaction.on_commit(lambda: Item.objects.filter(id=item_id).update(price=price))
    return JsonResponse({"deferred": True})


def write_nothing(request: HttpRequest) -> JsonResponse:
    """POST: a read/write request that writes nothing."""
    return JsonResponse({"count": Item.objects.filter(id=-1).update(price=0)})


@txcache_views.staleness(60)
def patient(request: HttpRequest) -> JsonResponse:
    """Read-only requests of this view may be a minute stale."""
    return JsonResponse({})


urlpatterns = [
    path("items/<int:item_id>/", item_page),
    path("items/<int:item_id>/write-then-read", write_then_read),
    path("items/<int:item_id>/write-nothing-after", write_nothing_after),
    path("items/<int:item_id>/on-commit", write_on_commit),
    path("items/<int:item_id>/on-commit-own", write_on_commit_own_connection),
    path("items/<int:item_id>/on-commit-in-a-get", write_on_commit_in_a_get),
    path("nothing", write_nothing),
    path("patient", patient),
]


def token_of(signed: str) -> int:
    return int(signing.TimestampSigner(salt=SALT).unsign(signed))


def cached_page(client: Client, item_id: int) -> int:
    """GET the item's page until it is answered from the cache; its price."""
    view = view_stats("django_fixtures.item_page")  # the view's dotted path
    prices: list[int] = []

    def hit() -> bool:
        hits = view.hits
        prices.append(client.get(f"/items/{item_id}/").json()["price"])
        return view.hits > hits

    wait_until(hit, f"a cached page of item {item_id}", timeout=20)
    assert len(set(prices)) == 1
    return prices[0]


def test_a_read_write_block_is_seen_by_the_thread_s_next_cached_read(shop: DjangoShop) -> None:
    client = Client()
    assert cached_page(client, 3) == 30
    response = client.post("/items/3/write-then-read", {"price": 303})
    assert response.json() == {"price": 303}  # not the cached 30


def test_a_bypassed_view_s_read_write_block_gives_the_client_its_token(shop: DjangoShop) -> None:
    client = Client()
    assert cached_page(client, 4) == 40
    response = client.post("/items/4/write-then-read", {"price": 404})
    assert HEADER in response.headers, "no token for the write"
    assert response.cookies[COOKIE].value == response.headers[HEADER]
    page = client.get("/items/4/").json()
    assert (page["price"], page["not_before"]) == (404, token_of(response.headers[HEADER]))


def test_an_on_commit_callback_s_read_write_gives_the_client_its_token(shop: DjangoShop) -> None:
    client = Client()
    assert cached_page(client, 5) == 50
    response = client.post("/items/5/on-commit", {"price": 505})
    assert response.json() == {"deferred": True}
    assert HEADER in response.headers, "no token for the callback's write"
    assert client.get("/items/5/").json()["price"] == 505


def test_an_on_commit_callback_s_read_write_in_a_get_runs_after_the_rerun_s_commit(
    shop: DjangoShop,
) -> None:
    client = Client()
    assert cached_page(client, 9) == 90
    response = client.get("/items/9/on-commit-in-a-get", {"price": 909})
    assert response.status_code == 200
    assert HEADER in response.headers, "no token for the write"
    page = client.get("/items/9/").json()
    assert (page["price"], page["not_before"]) == (909, token_of(response.headers[HEADER]))


def test_an_on_commit_callback_s_write_on_django_s_connection_gives_its_token(
    shop: DjangoShop,
) -> None:
    client = Client()
    assert cached_page(client, 6) == 60
    response = client.post("/items/6/on-commit-own", {"price": 606})
    assert HEADER in response.headers
    assert client.get("/items/6/").json()["price"] == 606


def test_a_commit_that_wrote_nothing_keeps_the_last_token(shop: DjangoShop) -> None:
    client = Client()
    assert cached_page(client, 7) == 70
    written = client.post("/items/7/write-nothing-after", {"price": 707})
    assert written.json() == {"price": 707}  # the empty block kept the write's token
    nothing = client.post("/nothing")
    assert nothing.json() == {"count": 0}
    assert HEADER not in nothing.headers  # no write: the client keeps its token
    assert token_of(client.cookies[COOKIE].value) == token_of(written.headers[HEADER])
    assert client.get("/items/7/").json()["price"] == 707


def test_a_token_ahead_of_the_database_does_not_break_a_get(
    shop: DjangoShop, caplog: pytest.LogCaptureFixture
) -> None:
    ahead = shop.cache.timestamp() + 10**15
    client = Client()
    client.cookies[COOKIE] = signing.TimestampSigner(salt=SALT).sign(str(ahead))
    for _ in range(2):
        page = client.get("/items/8/")
        assert page.status_code == 200
        assert page.json()["price"] == 80
    written = client.post("/items/8/write-then-read", {"price": 808})
    assert written.json() == {"price": 808}
    assert client.get("/items/8/").json()["price"] == 808
    assert "lies after everything the database has written" in caplog.text


def token_errors(max_age: float) -> list[str]:
    """The E010 messages of the checks with ``TOKEN_MAX_AGE`` and a staleness of 30 s."""
    chosen = {**settings.TXCACHE, "STALENESS": 30, "TOKEN_MAX_AGE": max_age}
    with override_settings(TXCACHE=chosen):
        return [each.msg for each in run_checks(tags=["txcache"]) if each.id == "txcache.E010"]


def test_a_token_max_age_below_a_staleness_is_an_error(shop: DjangoShop) -> None:
    short = sorted(token_errors(2), key=lambda message: "the view" in message)  # setting first
    assert len(short) == 2
    assert short[0].startswith("TXCACHE['TOKEN_MAX_AGE'] (2 s) is shorter than the staleness "
                               "of STALENESS (30 s)")  # fmt: skip
    assert f"the view {__name__}.patient (60 s)" in short[1]
    assert [f"the view {__name__}.patient (60 s)" in each for each in token_errors(30)] == [True]
    assert token_errors(60) == []

"""The request middleware on a real stack, through Django's test client (docs/django.md,
"The middleware"): safe methods read in a read-only transaction, others write in a
read/write one whose token comes back in a signed cookie and header, and the next request
sees the writes; the per-view decorators; a failed view rolled back; the session of a login
written in the request's transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import cast

import pytest
from django.conf import settings
from django.core import signing
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.test import Client, override_settings

import txcache.django
import txcache.metrics
from django_fixtures import STALENESS, DjangoShop, Item, User, start_shop
from txcache._stats import view_stats
from txcache.stack import EmbeddedPostgres, wait_until

COOKIE = "txcache_token"
HEADER = "X-Txcache-Token"


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    yield from start_shop(postgres)


def token_of(signed: str) -> int:
    return int(signing.TimestampSigner(salt="txcache.django.token").unsign(signed))


def test_get_reads_in_a_read_only_transaction_of_the_staleness_setting(shop: DjangoShop) -> None:
    page = Client().get("/items/4/").json()
    assert page == {
        "price": 40,
        "category": "desks",
        "kind": "read_only",
        "staleness": STALENESS,
        "not_before": None,
    }


def test_a_write_then_a_read_with_its_cookie_sees_the_write(shop: DjangoShop) -> None:
    client = Client()
    assert client.get("/items/7/").json()["price"] == 70
    response = client.post("/items/7/price", {"price": 707})
    assert response.json() == {"changed": 1, "kind": "read_write"}
    token = token_of(response.headers[HEADER])
    cookie = response.cookies[COOKIE]
    assert cookie.value == response.headers[HEADER]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    page = client.get("/items/7/").json()  # the cookie goes back by itself
    assert (page["price"], page["not_before"]) == (707, token)
    # An API client hands the header back instead.
    other = Client(headers={HEADER: response.headers[HEADER]})
    assert other.get("/items/7/").json()["not_before"] == token


def test_a_bypassed_view_s_write_is_seen_by_the_next_request(shop: DjangoShop) -> None:
    client = Client()
    assert client.get("/items/12/").json()["price"] == 120
    wait_until(lambda: cached_page_hit(client, "/items/12/"), "a cached page")
    response = client.post("/items/12/bypassed-price", {"price": 1212})
    assert response.json() == {"changed": 1, "kind": None}  # Django's own connection
    token = token_of(response.headers[HEADER])  # what it wrote, taken after its commit
    page = client.get("/items/12/").json()
    assert (page["price"], page["not_before"]) == (1212, token)


def cached_page_hit(client: Client, url: str) -> bool:
    """Whether a GET of ``url`` was answered from the cache (its view's hits grew)."""
    view = view_stats("django_fixtures.item_page")
    hits = view.hits
    client.get(url)
    return view.hits > hits


def test_a_response_never_hands_back_an_older_token_than_the_request_carried(
    shop: DjangoShop,
) -> None:
    client = Client()
    first = client.post("/items/15/price", {"price": 151})
    newer = token_of(first.headers[HEADER]) + 10**12  # newer than the next POST's commit
    signed = signing.TimestampSigner(salt="txcache.django.token").sign(str(newer))
    client.cookies[COOKIE] = signed
    second = client.post("/items/15/price", {"price": 152})
    assert token_of(second.headers[HEADER]) == newer  # not its own, older, commit
    assert token_of(second.cookies[COOKIE].value) == newer


def test_forged_garbled_and_expired_tokens_are_ignored_and_logged(
    shop: DjangoShop, caplog: pytest.LogCaptureFixture
) -> None:
    def ignored() -> list[str]:
        return [r.getMessage() for r in caplog.records if "is ignored" in r.getMessage()]

    forged = signing.TimestampSigner(salt="another salt").sign("99999999999")
    for value in (forged, "123", "garbage:with:colons"):
        client = Client(headers={HEADER: value})
        client.cookies[COOKIE] = value
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="txcache.django"):
            assert client.get("/items/8/").json()["not_before"] is None
        assert ignored() == [  # one line per token, saying where it was and why
            f"GET /items/8/: the token in the {where} is ignored: its signature is bad "
            "(forged, garbled, another SECRET_KEY's)"
            for where in (f"{HEADER} header", f"{COOKIE} cookie")
        ]
    with override_settings(TXCACHE={**settings.TXCACHE, "TOKEN_MAX_AGE": 1e-9}):  # expired
        signed = Client().post("/items/8/price", {"price": 88}).headers[HEADER]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="txcache.django"):
            assert Client(headers={HEADER: signed}).get("/items/8/").json()["not_before"] is None
        [line] = ignored()
        assert line.startswith(f"GET /items/8/: the token in the {HEADER} header is ignored: ")
        assert "it expired: Signature age " in line, line
        assert line.endswith("(TOKEN_MAX_AGE)"), line


def test_a_view_that_raises_is_rolled_back(shop: DjangoShop) -> None:
    client = Client(raise_request_exception=False)
    response = client.post("/items/10/price-then-fail", {"price": 1})
    assert response.status_code == 500
    assert HEADER not in response.headers
    assert Item.objects.get(id=10).price == 100


class AnswerErrors:
    """A middleware that answers a view's exception itself (as error reporters and API
    frameworks do), so that the exception never reaches the txcache middleware above."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> JsonResponse:
        return JsonResponse({"error": str(exception)}, status=500)


def test_a_server_error_answered_below_the_middleware_is_rolled_back(shop: DjangoShop) -> None:
    answering = [*settings.MIDDLEWARE, f"{__name__}.AnswerErrors"]
    with override_settings(MIDDLEWARE=answering):
        response = Client().post("/items/9/price-then-fail", {"price": 999})
    assert (response.status_code, response.json()) == (
        500,
        {"error": "the view failed after its write"},
    )
    assert HEADER not in response.headers
    assert Item.objects.get(id=9).price == 90


def test_a_view_that_sets_the_rollback_flag_is_rolled_back(shop: DjangoShop) -> None:
    response = Client().post("/items/9/price-then-roll-back", {"price": 998})
    assert (response.status_code, response.json()) == (200, {"rolling_back": True})
    assert HEADER not in response.headers
    assert Item.objects.get(id=9).price == 90


def test_a_lost_snapshot_is_a_503_to_retry(shop: DjangoShop) -> None:
    response = Client(raise_request_exception=False).get("/unavailable")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "0"


def test_the_decorators_choose_the_transaction(shop: DjangoShop) -> None:
    client = Client(raise_request_exception=False)
    bypassed = client.get("/bypassed").json()
    assert bypassed == {"count": 30, "own_connection": True, "kind": None}
    assert client.get("/patient").json()["staleness"] == 7
    visited = client.get("/items/11/visit")
    assert visited.json() == {"kind": "read_write"}
    assert client.get("/items/11/").json()["price"] == 111  # by the visit's token
    found = client.post("/search", {"category": 3}).json()
    assert found == {"names": ["item 2", "item 5", "item 8"], "kind": "read_only",
                     "staleness": 3, "not_before": token_of(visited.headers[HEADER])}  # fmt: skip
    refused = client.post("/search", {"category": 3, "write": "yes"})
    assert refused.status_code == 500  # StatementNotAllowed: a read-only view wrote
    assert Item.objects.get(id=1).price == 10


def test_a_login_is_seen_by_the_next_request(shop: DjangoShop) -> None:
    client = Client()
    assert client.get("/whoami").json()["user"] == ""
    response = client.post("/login", {"username": "ann", "password": "ann-secret"})
    assert response.json() == {"kind": "read_write"}
    assert COOKIE in response.cookies
    assert "sessionid" in response.cookies
    page = client.get("/whoami").json()
    assert (page["user"], page["kind"]) == ("ann", "read_only")
    assert page["not_before"] == token_of(response.headers[HEADER])


def signed(token: int) -> str:
    signer = signing.TimestampSigner(salt="txcache.django.token")
    return cast(str, signer.sign(str(token)))  # Django is untyped


def logged_in() -> Client:
    client = Client()
    client.post("/login", {"username": "ann", "password": "ann-secret"})
    assert client.get("/whoami").json()["user"] == "ann"
    return client


def test_a_get_whose_session_auth_writes_runs_again_read_write(
    shop: DjangoShop, caplog: pytest.LogCaptureFixture
) -> None:
    client = logged_in()
    session = client.cookies["sessionid"].value
    with txcache.django.read_write() as changed:  # the password changes elsewhere
        ann = User.objects.get(username="ann")
        ann.set_password("ann-secret")
        ann.save()
    assert changed.commit_timestamp is not None
    client.cookies[COOKIE] = signed(changed.commit_timestamp)  # a read that sees it
    with caplog.at_level(logging.WARNING, logger="txcache.django"):
        page = client.get("/whoami")  # auth flushes the session: a DELETE, refused read-only
    assert (page.status_code, page.json()["user"], page.json()["kind"]) == (200, "", "read_write")
    assert [record.getMessage().split(":")[0] for record in caplog.records] == ["GET /whoami"]
    assert "The refusal: DELETE is not allowed" in caplog.records[0].getMessage()
    assert "(mark the view @read_write if it writes on GET)" in caplog.records[0].getMessage()
    assert "Tenants" not in caplog.records[0].getMessage(), "no setting was refused"
    sessions = "SELECT count(*) FROM django_session WHERE session_key = %s"
    assert shop.admin.execute(sessions, (session,)).fetchone() == (0,)  # the flush committed
    caplog.clear()
    again = client.get("/whoami").json()  # nothing left to write: read-only again
    assert (again["user"], again["kind"], caplog.records) == ("", "read_only", [])


def test_a_get_that_locks_rows_runs_again_read_write(
    shop: DjangoShop, caplog: pytest.LogCaptureFixture
) -> None:
    """``update_or_create()`` locks the row before it writes: refused in the read-only
    transaction like the write itself, the request runs again read/write."""
    with caplog.at_level(logging.WARNING, logger="txcache.django"):
        page = Client().get("/categories/desks")
    assert page.status_code == 200
    assert (page.json()["created"], page.json()["kind"]) == (False, "read_write")
    assert "SELECT … FOR UPDATE is not allowed" in caplog.records[0].getMessage()


def test_a_get_whose_session_key_rotates_runs_again_read_write(shop: DjangoShop) -> None:
    client = logged_in()
    session = client.cookies["sessionid"].value
    rotated = {"SECRET_KEY": "rotated", "SECRET_KEY_FALLBACKS": [settings.SECRET_KEY]}
    with override_settings(**rotated):  # the session's hash verifies with a fallback key
        page = client.get("/whoami").json()  # auth cycles the session's key: writes
        assert (page["user"], page["kind"]) == ("ann", "read_write")
        assert client.cookies["sessionid"].value != session
        again = client.get("/whoami").json()
        assert (again["user"], again["kind"]) == ("ann", "read_only")


def test_each_view_counts_its_requests_hits_and_misses(shop: DjangoShop) -> None:
    view = view_stats("django_fixtures.item_page")  # unnamed URL: the view's dotted path
    before = (view.requests, view.hits, view.misses)
    client = Client()
    client.get("/items/6/")
    client.get("/items/6/")
    requests, hits, misses = (
        view.requests - before[0],
        view.hits - before[1],
        view.misses - before[2],
    )
    assert (requests, hits + misses) == (2, 2), "one cached queryset per request"
    wait_until(lambda: client.get("/items/6/") and view.hits > before[1], "a hit of the view")
    exported = txcache.metrics.render()
    assert f'txcache_view_requests_total{{view="{view.name}"}} {float(view.requests)!r}' in exported
    assert f'txcache_view_hits_total{{view="{view.name}"}} {float(view.hits)!r}' in exported

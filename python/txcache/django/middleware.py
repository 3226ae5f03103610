"""Request-scoped txcache transactions (docs/django.md, "The middleware").

:class:`TransactionMiddleware` runs each request in one transaction of the process's cache:

- safe methods (``GET``, ``HEAD``, ``OPTIONS``, ``TRACE``) in a read-only transaction — one
  commit point, at most ``STALENESS`` seconds old and not before the client's token — in
  which every ORM query, cached queryset and cacheable call of the request reads;
- other methods in a read/write transaction (:func:`txcache.django.read_write`), committed
  when the response is ready — rolled back instead if the view raised, as
  ``ATOMIC_REQUESTS`` does, if the response is a server error (``5xx``), or if the view
  called ``transaction.set_rollback(True)`` — whose token goes back to the client in a
  signed cookie and a response header;
- a view marked by :mod:`txcache.django.decorators` as it says.

Each read-only request counts for its view (the URL pattern's name, else the view's dotted
path): requests, and the cacheable calls answered from the cache or run —
``txcache_view_requests``, ``txcache_view_hits`` and ``txcache_view_misses`` in
:mod:`txcache.metrics`.

The token is the request's read-your-writes state (:mod:`txcache._tokens`): each request
starts from the client's token, whatever the thread wrote before, and every write
committed while it runs moves it — its own transaction's, a ``read_write()`` block's (in a
bypassed view, in an ``on_commit`` callback), Django's own connection's. Every read-only
transaction of the request begins not before it, and a request that wrote hands it to the
client. The client hands the token back (the cookie does it by itself; an API client
echoes the header) and its next read-only request sees its own writes. Tokens are signed
with ``SECRET_KEY`` (Django's ``TimestampSigner``) and honoured for ``TOKEN_MAX_AGE``
seconds: a forged, garbled or expired one is ignored, and logged at ``INFO`` saying which
(a client whose writes do not show can be told why). A read-only request whose cached data's
snapshot is gone (:class:`~txcache.SnapshotUnavailable`, the one retryable error) gets
``503`` with ``Retry-After: 0``. A safe request that failed because its read-only
transaction refused a write (Django's authentication flushing or cycling the session)
runs again, once, read/write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core import signing
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseServerError
from django.urls import Resolver404, resolve

from txcache.django import conf, transactions
from txcache.django.decorators import ViewPolicy, policy_of
from txcache.errors import SnapshotUnavailable, StatementNotAllowed
from txcache.integration import tokens, view_stats

__all__ = ["SAFE_METHODS", "TransactionMiddleware", "request_token"]

SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS", "TRACE"))
"""Methods whose requests run read-only unless the view says otherwise."""

log = logging.getLogger("txcache.django")

_SALT = "txcache.django.token"
_VIEW_FAILED = "_txcache_view_failed"


class TransactionMiddleware:
    """One txcache transaction per request (the module docstring). Place it above the
    middleware that use the database (sessions, authentication), so their queries and
    writes are the request's too."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        """Django's middleware protocol; the ``TXCACHE`` setting is read now."""
        self.get_response = get_response
        self.settings = conf.txcache_settings()

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """Run the request in the transaction its view's policy and method choose; hand the
        client the token of what it wrote, wherever it was written."""
        policy = view_policy(request)
        carried = request_token(request, self.settings)
        database = conf.cache_settings().dsn  # whose tokens these are
        # The request's state, not the thread's: what its client saw, what it writes.
        with tokens.scope():
            tokens.advance(database, carried)
            before = tokens.written()
            response = self._run(request, policy, carried)
            wrote = tokens.written() is not before  # a commit that wrote was recorded
            newest = tokens.floor(database) if wrote else None
        if newest is not None:  # never older than the client's: it replaces that one
            give_token(request, response, newest, self.settings)
        return response

    def _run(
        self, request: HttpRequest, policy: ViewPolicy, carried: int | None
    ) -> HttpResponseBase:
        """The response, run in the transaction ``policy`` and the method choose (a
        read-only one not before ``carried``, the client's token)."""
        if policy.mode == "bypass":
            return self.get_response(request)
        if policy.mode == "read_only":
            return self._read_only(request, policy, carried)
        if policy.mode == "by_method" and request.method in SAFE_METHODS:
            return self._safe(request, policy, carried)
        return self._read_write(request, policy)

    def _safe(
        self, request: HttpRequest, policy: ViewPolicy, carried: int | None
    ) -> HttpResponseBase:
        """A safe request, read-only; run again read/write when its read-only transaction
        refused a write and it failed, nothing of it sent (a safe method promises no effect:
        the second run is the request the client made)."""
        with transactions.watching_refusals() as refusals:
            response = self._read_only(request, policy, carried)
        if not (refusals.count and _unsent_failure(response)):
            return response
        log.warning(
            "%s %s: its read-only transaction refused a statement and the request failed; "
            "ran it again read/write, uncached (%s). The refusal: %s",
            request.method,
            request.path,
            _rerun_hint(str(request.method), refusals.first or ""),
            refusals.first,
        )
        vars(request).pop(_VIEW_FAILED, None)  # the first run's failure is not the second's
        return self._read_write(request, policy)

    def _read_only(
        self, request: HttpRequest, policy: ViewPolicy, carried: int | None
    ) -> HttpResponseBase:
        with transactions.read_only(policy.staleness, not_before=carried) as transaction:
            response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        if match is not None:  # a URL no view answered counts for none
            view_stats(match.view_name).record(transaction.hits, transaction.misses)
        return response

    def _read_write(self, request: HttpRequest, policy: ViewPolicy) -> HttpResponseBase:
        """The request in a read/write transaction, rolled back if it failed (its commit,
        if it wrote, is recorded in the request's state)."""
        with transactions.read_write(isolation=policy.isolation) as transaction:
            response = self.get_response(request)
            if _must_roll_back(request, response):
                transactions.set_rollback(transaction, True)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """The view raised: its read/write transaction rolls back (Django calls the
        innermost middleware's first: one below that answers keeps this from running, and
        then only a ``5xx`` response rolls back). A
        :class:`~txcache.SnapshotUnavailable` becomes ``503`` with ``Retry-After: 0``; a
        write a safe request's read-only transaction refused, a ``500`` that the middleware
        answers by running the request again read/write (Django neither logs nor reports
        the exception then: the request has not failed yet)."""
        if isinstance(exception, StatementNotAllowed) and transactions.refused():
            return HttpResponseServerError()
        setattr(request, _VIEW_FAILED, True)
        if isinstance(exception, SnapshotUnavailable):
            return HttpResponse(
                "The data this page was read from changed too much meanwhile; retry.",
                status=503,
                headers={"Retry-After": "0"},
                content_type="text/plain",
            )
        return None


def _rerun_hint(method: str, refusal: str) -> str:
    """What to change so that a safe request's read-only run is not refused: a session
    change belongs to the cache's settings; a write, to a view marked read/write."""
    if "changes the session" in refusal:
        return 'a setting belongs to the cache, not the request: docs/django.md, "Tenants"'
    return f"mark the view @read_write if it writes on {method}"


def _unsent_failure(response: HttpResponseBase) -> bool:
    """Whether ``response`` is a server error the client has not been sent any of (a
    streaming response's content is produced as it is sent)."""
    return response.status_code >= 500 and not response.streaming


def _must_roll_back(request: HttpRequest, response: HttpResponseBase) -> bool:
    """Whether a request's read/write transaction must roll back: its view raised (our
    ``process_exception`` saw it), or the response is a server error — a view's exception
    that a middleware below turned into a response never reaches ours."""
    return bool(getattr(request, _VIEW_FAILED, False)) or response.status_code >= 500


def view_policy(request: HttpRequest) -> ViewPolicy:
    """The policy of the view the request's URL resolves to (the default for none)."""
    try:
        match = resolve(request.path_info, getattr(request, "urlconf", None))
    except Resolver404:
        return ViewPolicy()
    return policy_of(match.func)


def request_token(request: HttpRequest, chosen: conf.TxcacheSettings) -> int | None:
    """The newest valid token the request carries (header or cookie), if any; each one
    ignored is logged."""
    signer = signing.TimestampSigner(salt=_SALT)
    tokens: list[int] = []
    for signed, where in (
        (request.headers.get(chosen.token_header), f"the {chosen.token_header} header"),
        (request.COOKIES.get(chosen.token_cookie), f"the {chosen.token_cookie} cookie"),
    ):
        if not signed:
            continue
        try:
            value = signer.unsign(signed, max_age=chosen.token_max_age)
        except signing.SignatureExpired as error:  # a subclass of BadSignature: first
            _ignored(request, where, f"it expired: {error} (TOKEN_MAX_AGE)")
            continue
        except signing.BadSignature:
            _ignored(request, where, "its signature is bad (forged, garbled, another SECRET_KEY's)")
            continue
        if value.isascii() and value.isdigit():
            tokens.append(int(value))
    return max(tokens, default=None)


def _ignored(request: HttpRequest, where: str, why: str) -> None:
    """Log that a token the request carried is not honoured: the request's reads need not
    see that client's writes, and nothing else would say why. ``INFO``, not a warning: what
    a client sends is its own doing."""
    log.info("%s %s: the token in %s is ignored: %s", request.method, request.path, where, why)


def give_token(
    request: HttpRequest, response: HttpResponseBase, token: int, chosen: conf.TxcacheSettings
) -> None:
    """Hand ``token`` to the client: a signed response header and cookie (which replaces
    the one it holds: give the newest token the request carried, if newer)."""
    signed = signing.TimestampSigner(salt=_SALT).sign(str(token))
    response[chosen.token_header] = signed
    response.set_cookie(
        chosen.token_cookie,
        signed,
        max_age=int(chosen.token_max_age),
        secure=request.is_secure(),
        httponly=True,
        samesite="Lax",
    )

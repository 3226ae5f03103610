"""Read-your-writes across requests, with one token per client.

:class:`TokenMiddleware` runs each request in ``cache.request_scope()``: a
read-your-writes state of its own — what it writes, and the token the client sent (the
``X-Txcache-Token`` header or the ``txcache_token`` cookie, the newer if both). Every
read-only transaction the request creates is then no older than that token and than what
the request itself wrote before it, with no ``not_before`` passed by hand. A response to a
request that wrote carries the newest token (``cache.written_token()``) in the header and
the cookie, whatever the write went through: an ORM session's commit, a Core connection's,
several commits, the last of which wrote nothing.

A token ahead of everything the database wrote — a cookie from before a restore, or from
another deployment — is honoured as the library honours it: the request reads the newest
state, and the library warns once per token.

It is a pure ASGI middleware: the endpoint, its dependencies and the response's ``send``
run in the request's task, so the writes they record are in the context it scoped (a
Starlette ``BaseHTTPMiddleware`` runs the app in a task of its own, whose context it never
sees). For the same reason the endpoints that write are ``async def``: FastAPI runs a
``def`` endpoint in a worker thread, with a copy of the request's context.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from txcache import AsyncCache

TOKEN_HEADER = "X-Txcache-Token"
"""The response header that carries the token, and the request header that hands it back."""

TOKEN_COOKIE = "txcache_token"
"""The cookie that carries the newest token a client got, for browsers."""


LARGEST_TOKEN = 2**64 - 1
"""Tokens are 64-bit WAL positions; ``not_before`` takes none larger."""


class BadToken(ValueError):
    """A request's token is not one (digits)."""


def token_of(request: HTTPConnection) -> int | None:
    """The newest token the request carries (header or cookie), if any."""
    found: list[int] = []
    for raw in (request.headers.get(TOKEN_HEADER), request.cookies.get(TOKEN_COOKIE)):
        if raw is None:
            continue
        if not (raw.isascii() and raw.isdigit()):  # int() refuses "²", which isdigit() takes
            raise BadToken(f"{TOKEN_HEADER} must be a txcache token (digits)")
        # Past 64 bits it lies after everything the database wrote, as the largest token does.
        found.append(min(int(raw), LARGEST_TOKEN))
    return max(found, default=None)


class TokenMiddleware:
    """Each HTTP request in a read-your-writes state of its own, joined with the client's
    token; the newest token back to a client whose request wrote (the module docstring).
    ``cache`` gives the app's cache, from the request's scope."""

    def __init__(self, app: ASGIApp, *, cache: Callable[[Scope], AsyncCache]) -> None:
        self.app = app
        self.cache = cache

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            carried = token_of(HTTPConnection(scope))
        except BadToken as error:
            await JSONResponse({"detail": str(error)}, status_code=400)(scope, receive, send)
            return
        cache = self.cache(scope)
        with cache.request_scope(not_before=carried):

            async def send_with_token(message: Message) -> None:
                if message["type"] == "http.response.start":
                    # The newest token, which covers the client's too: a response never
                    # hands a client an older one, and one that wrote nothing hands none.
                    token = await cache.written_token()
                    if token is not None and token != carried:
                        give(message, token)
                await send(message)

            await self.app(scope, receive, send_with_token)


def give(message: Message, token: int) -> None:
    """Put ``token`` in a response's header and cookie (``message``: its start)."""
    headers = MutableHeaders(scope=message)
    headers[TOKEN_HEADER] = str(token)
    cookie = Response()
    cookie.set_cookie(TOKEN_COOKIE, str(token), httponly=True, samesite="lax")
    for name, value in cookie.raw_headers:
        if name == b"set-cookie":
            headers.append("set-cookie", value.decode("latin-1"))

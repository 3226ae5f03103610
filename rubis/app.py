"""RUBiS's web application: a plain WSGI application, served by granian (``rubis.serve``).

``create_app()`` reads its settings from the environment: the library's (``TXCACHE_DSN``,
``TXCACHE_NODES``, ``TXCACHE_AGENT``, ``TXCACHE_MODE`` = consistent / no_consistency /
bypass, …, as ``txcache.connect`` reads them) and the application's own (``AppSettings``).

Requests:

- static pages and forms (Home, Register, Browse, Sell, the login forms, SellItemForm) are
  answered without a transaction;
- the 13 dynamic read pages each run in one ``cache.read_only(staleness)`` transaction that
  calls the page's cacheable function (``rubis.pages``; the page granularity), which calls
  the shared cacheable functions (``rubis.queries``; the function granularity);
- the five writes each run in one ``cache.read_write()`` transaction (``rubis.writes``) and
  set the cookie ``txcache_nb`` to the commit timestamp, for ``staleness`` + 1 seconds; a
  read page with that cookie passes it as ``not_before``, so a session sees its own writes
  (read-your-writes across requests). Once the staleness limit has passed, every snapshot a
  read may use is after the write anyway, so the cookie expires.

A page that cannot be served (``PageError``, or a missing or malformed parameter) is RUBiS's
error page with status 400; the emulator counts it and goes Home, as RUBiS's client did.

Each server worker process calls ``create_app``; the cache connection is made in the
process on its first request. The virtual clock's wall-clock anchor comes from
``RUBIS_CLOCK_ANCHOR`` (``rubis.serve`` sets it once for all workers) or is the time of the
call.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import txcache
from rubis import html, writes
from rubis.interactions import PageError
from rubis.routes import COOKIE, ROUTES, Request, Response, parse_request

__all__ = ["AppSettings", "Application", "Clock", "create_app"]

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
_RETRIES = 3


def _flag(value: str) -> bool:
    """An on/off setting: anything but 0, false, no, off is on."""
    return value.strip().lower() not in {"0", "false", "no", "off"}


@dataclass(frozen=True)
class AppSettings:
    """The application's own settings, from ``RUBIS_*`` variables.

    - ``staleness`` (``RUBIS_STALENESS``, default 30 s): the read-only transactions' limit
      (the paper's setting; the library's own ``TXCACHE_STALENESS`` is for calls outside a
      transaction and is not used here);
    - ``clock_step`` (``RUBIS_CLOCK_STEP``, default 60 s): how coarsely the virtual time
      given to read pages advances (``Clock``);
    - ``page_cache`` (``RUBIS_PAGE_CACHE``, default on): cache whole pages; off, only the
      shared functions are cached;
    - ``per_page`` (``RUBIS_PER_PAGE``, default 20): items per search page;
    - ``read_your_writes`` (``RUBIS_READ_YOUR_WRITES``, default on): after a write, the
      session's reads see it (the ``not_before`` cookie); off, they may not for up to
      ``staleness`` seconds, and have more cached versions to choose from.
    """

    staleness: float = 30.0
    clock_step: float = 60.0
    page_cache: bool = True
    per_page: int = 20
    read_your_writes: bool = True

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> AppSettings:
        """The settings from ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        return cls(
            staleness=float(env.get("RUBIS_STALENESS", "30")),
            clock_step=float(env.get("RUBIS_CLOCK_STEP", "60")),
            page_cache=_flag(env.get("RUBIS_PAGE_CACHE", "1")),
            read_your_writes=_flag(env.get("RUBIS_READ_YOUR_WRITES", "1")),
            per_page=int(env.get("RUBIS_PER_PAGE", "20")),
        )


@dataclass(frozen=True, slots=True)
class Clock:
    """The virtual time: the database's ``clock.now`` at ``anchor`` (a wall-clock time), then
    advancing with the wall clock.

    Writes date their rows with ``now()``. Read pages get ``page_now()``: the virtual time
    rounded down to a multiple of ``step`` seconds after ``start``, so every request within
    one step passes the same time and the time-dependent pages (the two searches, AboutMe)
    repeat their cache keys; a search may list an auction up to ``step`` after it ended.
    """

    start: datetime
    anchor: float
    step: float

    def elapsed(self) -> float:
        """Seconds since the anchor."""
        return max(0.0, time.time() - self.anchor)

    def now(self) -> datetime:
        """The exact virtual time."""
        return self.start + timedelta(seconds=self.elapsed())

    def page_now(self) -> datetime:
        """The virtual time rounded down to the step."""
        if self.step <= 0:
            return self.now()
        steps = int(self.elapsed() // self.step)
        return self.start + timedelta(seconds=steps * self.step)


class Application:
    """The WSGI application (``create_app`` makes one)."""

    settings: AppSettings
    clock: Clock

    def __init__(self, settings: AppSettings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self._cache: txcache.Cache | None = None
        self._cache_pid = 0
        self._lock = threading.Lock()

    @property
    def cache(self) -> txcache.Cache:
        """This process's cache connection, made on first use (in the serving process)."""
        if self._cache is None or self._cache_pid != os.getpid():
            with self._lock:
                if self._cache is None or self._cache_pid != os.getpid():
                    self._cache = txcache.connect()
                    self._cache_pid = os.getpid()
        return self._cache

    def close(self) -> None:
        """Close this process's cache connection."""
        if self._cache is not None and self._cache_pid == os.getpid():
            self._cache.close()
        self._cache = None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = parse_request(environ)
        # The request's reads see its session's writes (the cookie's token) and its own, not
        # what earlier requests on this thread wrote.
        with self.cache.request_scope(not_before=request.not_before):
            response = self.respond(environ.get("PATH_INFO", "/").strip("/"), request)
        body = response.body.encode()
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(body))),
        ]
        if response.commit_timestamp is not None and self.settings.read_your_writes:
            # Past the staleness limit every snapshot a read may use is after the write.
            age = math.ceil(self.settings.staleness) + 1
            cookie = f"{COOKIE}={response.commit_timestamp}; Max-Age={age}; Path=/"
            headers.append(("Set-Cookie", cookie))
        start_response(response.status, headers)
        return [body]

    def respond(self, path: str, request: Request) -> Response:
        """The response to ``path`` (without its slashes)."""
        if path in html.STATIC:
            return Response(html.STATIC[path])
        handler = ROUTES.get(path)
        if handler is None:
            return Response(html.error(f"there is no page /{path}"), "404 Not Found")
        try:
            return handler(self, request)
        except (PageError, ValueError) as error:
            return Response(html.error(str(error)), "400 Bad Request")

    def read(self, request: Request, page: Callable[..., str], *args: Any) -> Response:
        """Render a dynamic page in a read-only transaction, through the page cache or, with
        ``page_cache`` off, through its function (whose parts are still cached)."""
        render = page
        if isinstance(page, txcache.CacheableFunction) and not self.settings.page_cache:
            render = page.function
        for attempt in range(_RETRIES):
            try:
                with self.cache.read_only(self.settings.staleness, not_before=request.not_before):
                    return Response(render(*args))
            except txcache.SnapshotUnavailable:  # the library's one retryable error
                if attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def written(self, done: writes.Written, title: str, item_id: int | None = None) -> Response:
        """The page after a write, with its commit timestamp."""
        message = f"{title}: done (id {done.id})."
        return Response(
            html.written(title, message, item_id=item_id), "200 OK", done.commit_timestamp
        )


def create_app(environ: Mapping[str, str] | None = None) -> Application:
    """The application, its settings from ``environ``; reads the virtual clock's start from
    the database (through a cache in ``bypass`` mode, so with the library's settings) and
    anchors it at ``RUBIS_CLOCK_ANCHOR`` (a Unix time) or now."""
    settings = AppSettings.from_environment(environ)
    with txcache.connect(mode="bypass") as cache, cache.read_write() as tx:
        row = tx.query_one("SELECT now FROM clock WHERE id = 1")
    if row is None:
        raise RuntimeError("the clock table is empty: load RUBiS with python -m rubis.generate")
    anchor = _environ(environ).get("RUBIS_CLOCK_ANCHOR")
    wall = float(anchor) if anchor else time.time()
    return Application(settings, Clock(row[0], wall, settings.clock_step))


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ

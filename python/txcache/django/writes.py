"""Read-your-writes for Django's own connection (docs/django.md, "Writes outside txcache
transactions").

Outside any txcache transaction the ORM writes on Django's own connection — a management
command, a Celery task, a bypassed view, an ``on_commit`` callback. A read-only transaction
of the process's cache begun later in the same context — a cached queryset or a cacheable
call outside any block, ``txcache.django.read_only()`` — must see those writes, however
stale the cache may otherwise be. The backend reports each committed write
(:func:`wrote`); the next such transaction begins not before a token taken then
(:func:`token`: ``cache.timestamp()``, the WAL insert position, at or after every commit
so far). One round trip per run of writes, not per write, and none for a context that
only reads.

The state is a context variable: the thread's (or the asyncio task's), as Django's
connections are the thread's. The middleware gives each request a fresh one
(:func:`scope`) and hands what the request wrote to the client as its token.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["scope", "token", "wrote"]


@dataclass(frozen=True)
class _Writes:
    unsynced: bool = False
    """Whether Django's own connection committed a write since :attr:`token` was taken."""
    token: int | None = None
    """A ``not_before`` token at or after every write reported before it was taken."""


_NOTHING = _Writes()
_writes: contextvars.ContextVar[_Writes | None] = contextvars.ContextVar(
    "txcache_django_own_writes", default=None
)


def wrote() -> None:
    """Django's own connection committed a write in this context."""
    state = _writes.get() or _NOTHING
    if not state.unsynced:
        _writes.set(_Writes(unsynced=True, token=state.token))


def token() -> int | None:
    """A ``not_before`` token covering every write this context reported (``None``: none,
    or a cache that never caches, for which freshness is the database's own)."""
    state = _writes.get() or _NOTHING
    if state.unsynced:
        from txcache.django import conf  # which imports this module

        cache = conf.get_cache()
        if cache.uncached_reason is not None:
            return None
        state = _Writes(token=cache.timestamp())  # the WAL only grows: newer than the last
        _writes.set(state)
    return state.token


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Run the block with no writes reported yet (a request: its client's token says what
    it must see), and the state as it was afterwards."""
    reset = _writes.set(_NOTHING)
    try:
        yield
    finally:
        _writes.reset(reset)

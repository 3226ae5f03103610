"""Per-view choices for :class:`~txcache.django.middleware.TransactionMiddleware`.

By default a request to a safe method (``GET``, ``HEAD``, ``OPTIONS``, ``TRACE``) runs in a
read-only transaction of the ``STALENESS`` setting, any other in a read/write transaction.
These decorators change that for one view — a function, or a class-based view's class (or
its ``as_view()``)::

    from txcache.django import decorators as txcache_views

    @txcache_views.staleness(60)        # read-only requests of this view: 60 s
    def catalogue(request): ...

    @txcache_views.read_write           # writes on GET (a counter, a one-time link)
    def confirm(request, key): ...

    @txcache_views.read_only(staleness=5)   # a POST that only reads (a search form)
    def search(request): ...

    @txcache_views.bypass               # no txcache transaction: Django as usual
    def health(request): ...

They only mark the view; the middleware reads the mark when it resolves the request's URL.
Marks combine: ``staleness`` keeps the method's choice and sets the staleness.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

__all__ = ["ViewPolicy", "bypass", "policy_of", "read_only", "read_write", "staleness"]

V = TypeVar("V", bound=Callable[..., Any])

_ATTRIBUTE = "txcache_policy"

Mode = Literal["by_method", "read_only", "read_write", "bypass"]


@dataclass(frozen=True)
class ViewPolicy:
    """How the middleware runs a view's requests."""

    mode: Mode = "by_method"
    """``by_method``: read-only for safe methods, read/write otherwise; or always one of
    ``read_only``, ``read_write``, ``bypass`` (no txcache transaction)."""
    staleness: float | None = None
    """Seconds of staleness of its read-only requests (``None``: the setting)."""
    isolation: str | None = None
    """The isolation level of its read/write requests (``None``: the database's)."""


def policy_of(view: Any) -> ViewPolicy:
    """The policy a view (or the class of a class-based view) was marked with."""
    marked = getattr(view, _ATTRIBUTE, None)
    if marked is None:
        marked = getattr(getattr(view, "view_class", None), _ATTRIBUTE, None)
    return marked if isinstance(marked, ViewPolicy) else ViewPolicy()


def _mark(view: V, **changes: Any) -> V:
    setattr(view, _ATTRIBUTE, dataclasses.replace(policy_of(view), **changes))
    return view


def _seconds(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"staleness must be a number of seconds >= 0, not {value!r}")
    return float(value)


def staleness(seconds: float) -> Callable[[V], V]:
    """The view's read-only requests may be ``seconds`` stale."""
    chosen = _seconds(seconds)
    return lambda view: _mark(view, staleness=chosen)


@overload
def read_only(view: V, /) -> V: ...
@overload
def read_only(*, staleness: float | None = None) -> Callable[[V], V]: ...
def read_only(view: Any = None, /, *, staleness: float | None = None) -> Any:
    """Every request of the view runs in a read-only transaction (a write is refused),
    ``staleness`` seconds at most (default: the setting)."""
    chosen = None if staleness is None else _seconds(staleness)

    def decorate(inner: V) -> V:
        if chosen is None:
            return _mark(inner, mode="read_only")
        return _mark(inner, mode="read_only", staleness=chosen)

    return decorate if view is None else decorate(view)


@overload
def read_write(view: V, /) -> V: ...
@overload
def read_write(*, isolation: str | None = None) -> Callable[[V], V]: ...
def read_write(view: Any = None, /, *, isolation: str | None = None) -> Any:
    """Every request of the view runs in a read/write transaction (``isolation``:
    ``"REPEATABLE READ"``, ``"SERIALIZABLE"``; default: the database's OPTIONS)."""

    def decorate(inner: V) -> V:
        if isolation is None:
            return _mark(inner, mode="read_write")
        return _mark(inner, mode="read_write", isolation=isolation)

    return decorate if view is None else decorate(view)


def bypass(view: V) -> V:
    """The view's requests run in no txcache transaction: Django's own connection, no
    cache — Django as if the middleware were not there, but for the token the client gets
    when the view wrote (on Django's own connection, or in ``read_write()`` blocks of its
    own)."""
    return _mark(view, mode="bypass")

"""``@txcache.cacheable``: wraps a function in the cacheable function of its driver — an
``async def`` in :class:`~txcache.aio.AsyncCacheableFunction`, any other function in
:class:`~txcache.CacheableFunction`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from txcache._cacheable import CacheableFunction
from txcache._cacheable_base import CacheableBase
from txcache.aio._cacheable import AsyncCacheableFunction

__all__ = ["Decorate", "cacheable"]

P = ParamSpec("P")
R = TypeVar("R")


class Decorate(Protocol):
    """What ``@cacheable(...)`` with options returns: it wraps a function as
    :func:`cacheable` does."""

    @overload
    def __call__(  # type: ignore[overload-overlap]  # an async def is a Callable[P, R] too
        self, function: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncCacheableFunction[P, R]: ...

    @overload
    def __call__(self, function: Callable[P, R], /) -> CacheableFunction[P, R]: ...


@overload
def cacheable(  # type: ignore[overload-overlap]  # an async def is also a Callable[P, R]
    function: Callable[P, Coroutine[Any, Any, R]], /
) -> AsyncCacheableFunction[P, R]: ...


@overload
def cacheable(function: Callable[P, R], /) -> CacheableFunction[P, R]: ...


@overload
def cacheable(
    *, version: str = "", manual_invalidation: bool = False, independent_of: Iterable[str] = ()
) -> Decorate: ...


def cacheable(
    function: Callable[P, Any] | None = None,
    /,
    *,
    version: str = "",
    manual_invalidation: bool = False,
    independent_of: Iterable[str] = (),
) -> Any:
    """Make ``function`` cacheable: ``@cacheable`` or ``@cacheable(version="2")``; an
    ``async def`` becomes an :class:`~txcache.aio.AsyncCacheableFunction` (awaited, inside
    async transactions), any other function a :class:`CacheableFunction`.

    The function must depend only on its arguments and the database, and return a value the
    serializer can store. Its keys hash its code and the application code it can reach (see
    docs/library.md, "Keys and code changes"); ``version`` changes every key of this
    function, for a change the hash cannot see (a template, a method reached through an
    instance). The ``code_version`` setting does the same for every function.
    ``manual_invalidation`` lets :meth:`CacheableFunction.invalidate` make results stale by
    hand, for what the database cannot see. ``independent_of`` names key contexts a
    framework registered (:func:`txcache.register_key_context`: Django's ``"timezone"`` and
    ``"language"``) that the function's result does not depend on, so that they stay out of
    its keys.
    """
    options = {
        "version": version,
        "manual_invalidation": manual_invalidation,
        "independent_of": independent_of,
    }

    def decorate(inner: Callable[P, Any]) -> CacheableBase[P, Any]:
        if inspect.iscoroutinefunction(inner):
            return AsyncCacheableFunction(inner, **options)
        return CacheableFunction(inner, **options)

    return decorate if function is None else decorate(function)

"""The current transaction of a thread or task, and the types of a statement's parameters
and rows: what the sync and the async drivers share (neither imports the other).

One context variable holds the transaction a block began, sync or async, so that a block of
either kind sees (and refuses) the other, and cacheable calls and ``txcache.query`` find
it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from txcache._cache_core import CacheCore

__all__ = ["Params", "Row", "Running", "current", "current_transaction"]

Params = Sequence[Any] | Mapping[str, Any] | None
"""A statement's parameters, as psycopg takes them (``%s`` or ``%(name)s``)."""
Row = tuple[Any, ...]
"""A row, by default."""


class Running(Protocol):
    """What the variable holds: a transaction of either driver, of some cache."""

    @property
    def cache(self) -> CacheCore:
        """The cache whose transaction it is."""


current: contextvars.ContextVar[Running | None] = contextvars.ContextVar(
    "txcache_transaction", default=None
)
"""The transaction running in this context (set and reset by the drivers' blocks)."""


def current_transaction() -> Running | None:
    """The transaction running in this thread or task, if any: a sync
    :class:`~txcache.Transaction` or an async :class:`~txcache.aio.AsyncTransaction`."""
    return current.get()

"""Transactions of the process's cache for Django code: :func:`read_only` and
:func:`read_write`, whose ORM statements run in them (``txcache.django.db``).

:func:`read_write` also runs the ``transaction.on_commit`` callbacks registered inside it,
after it commits (none if it rolls back), in registration order, as Django runs them after
its own commits. A bare ``cache.read_write()`` block has nobody to run them after its commit,
so registering one there is refused.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from txcache._transaction import ReadOnlyTransaction, ReadWriteTransaction
from txcache.django import conf
from txcache.errors import TransactionError

__all__ = ["defer", "read_only", "read_write"]

log = logging.getLogger("django.db.backends.base")  # where Django logs failed robust callbacks

Hook = tuple[Callable[[], Any], bool]
"""An ``on_commit`` callback and whether it is robust (its exception is logged, not raised)."""


@dataclass
class _Deferred:
    transaction: ReadWriteTransaction
    hooks: list[Hook] = field(default_factory=list)


_deferred: contextvars.ContextVar[_Deferred | None] = contextvars.ContextVar(
    "txcache_django_on_commit", default=None
)


def read_only(
    staleness: float | None = None, *, not_before: int | None = None
) -> ReadOnlyTransaction:
    """``txcache.django.get_cache().read_only(staleness, not_before=not_before)``: one commit
    point at most ``staleness`` seconds old (default: the ``STALENESS`` setting), not before
    the token ``not_before``; the ORM reads there."""
    return conf.get_cache().read_only(staleness, not_before=not_before)


@contextlib.contextmanager
def read_write(*, isolation: str | None = None) -> Iterator[ReadWriteTransaction]:
    """A read/write transaction of the process's cache, at ``isolation`` (default: the
    ``isolation_level`` of the database's ``OPTIONS``, else PostgreSQL's); the ORM writes
    there and ``tx.commit_timestamp`` is, after the block, the token of its writes.
    ``on_commit`` callbacks registered inside run after the commit."""
    chosen = isolation or conf.isolation_level(conf.txcache_settings().database)
    with conf.get_cache().read_write(isolation=chosen) as transaction:
        deferred = _Deferred(transaction)
        token = _deferred.set(deferred)
        try:
            yield transaction
        finally:
            _deferred.reset(token)
    _run(deferred.hooks)


def defer(transaction: ReadWriteTransaction, hooks: list[Hook]) -> None:
    """Run ``hooks`` after ``transaction`` commits (the connection's ``on_commit``)."""
    deferred = _deferred.get()
    if deferred is None or deferred.transaction is not transaction:
        raise TransactionError(
            "transaction.on_commit() in a read/write txcache transaction needs it opened by "
            "txcache.django.read_write() (or the middleware), which runs the callbacks after "
            "its commit; a bare cache.read_write() block would never run them"
        )
    deferred.hooks.extend(hooks)


def _run(hooks: list[Hook]) -> None:
    """Run committed callbacks as Django does: a robust one's exception is logged."""
    for function, robust in hooks:
        if not robust:
            function()
            continue
        try:
            function()
        except Exception as error:
            log.error(
                f"Error calling {function.__qualname__} in on_commit() during transaction (%s).",
                error,
                exc_info=True,
            )

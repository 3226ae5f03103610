"""Transactions of the process's cache for Django code: :func:`read_only` and
:func:`read_write`, whose ORM statements run in them (``txcache.django.db``).

:func:`read_write` also runs the ``transaction.on_commit`` callbacks registered inside it,
after it commits (none if it rolls back), in registration order, as Django runs them after
its own commits; and it honours Django's rollback flag: ``transaction.set_rollback(True)``
outside any ``atomic()`` block marks it (:func:`set_rollback`), and it then rolls back
instead of committing, as the block of ``ATOMIC_REQUESTS`` would. A bare
``cache.read_write()`` block has nobody to run callbacks after its commit, nor to read the
flag, so both are refused there.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from txcache import ReadOnlyTransaction, ReadWriteTransaction, current_transaction
from txcache.django import conf
from txcache.errors import StatementNotAllowed, TransactionError

__all__ = [
    "Refusals",
    "defer",
    "get_rollback",
    "note_refusal",
    "read_only",
    "read_write",
    "refused",
    "set_rollback",
    "watching_refusals",
]

log = logging.getLogger("django.db.backends.base")  # where Django logs failed robust callbacks

Hook = tuple[Callable[[], Any], bool]
"""An ``on_commit`` callback and whether it is robust (its exception is logged, not raised)."""


@dataclass
class _Block:
    """What a :func:`read_write` block holds for its end."""

    transaction: ReadWriteTransaction
    hooks: list[Hook] = field(default_factory=list)
    """``on_commit`` callbacks, to run after the commit."""
    rollback: bool = False
    """Django's rollback flag: roll back instead of committing."""


class _RolledBack(Exception):
    """Leaves the library's block of a :func:`read_write` marked for rollback."""


_blocks: contextvars.ContextVar[_Block | None] = contextvars.ContextVar(
    "txcache_django_read_write", default=None
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
    ``on_commit`` callbacks registered inside run after the commit. Marked for rollback
    (:func:`set_rollback`), the block rolls back and raises nothing."""
    if isinstance(current_transaction(), ReadOnlyTransaction):
        refusal = StatementNotAllowed(
            "txcache.django.read_write() inside a read-only transaction (a safe request's, "
            "or a read_only() block's): transactions do not nest. Under the middleware the "
            "request runs again read/write, where an on_commit callback runs after its "
            "commit; mark a view that writes @read_write to spare it the first try"
        )
        note_refusal(str(refusal))  # the middleware runs a safe request again read/write
        raise refusal
    chosen = isolation or conf.isolation_level(conf.txcache_settings().database)
    try:
        with conf.get_cache().read_write(isolation=chosen) as transaction:
            block = _Block(transaction)
            token = _blocks.set(block)
            try:
                yield transaction
            finally:
                _blocks.reset(token)
            if block.rollback:
                raise _RolledBack  # the library's block rolls back on an exception
    except _RolledBack:
        return
    _run(block.hooks)


def _block_of(transaction: ReadWriteTransaction, what: str) -> _Block:
    block = _blocks.get()
    if block is None or block.transaction is not transaction:
        raise TransactionError(
            f"{what} in a read/write txcache transaction needs it opened by "
            "txcache.django.read_write() (or the middleware), which acts on it at the end of "
            "the block; a bare cache.read_write() block never would"
        )
    return block


def defer(transaction: ReadWriteTransaction, hooks: list[Hook]) -> None:
    """Run ``hooks`` after ``transaction`` commits (the connection's ``on_commit``)."""
    _block_of(transaction, "transaction.on_commit()").hooks.extend(hooks)


def set_rollback(transaction: ReadWriteTransaction, rollback: bool) -> None:
    """Django's rollback flag for ``transaction`` outside any ``atomic()`` block: with
    ``rollback``, its :func:`read_write` block rolls back instead of committing."""
    _block_of(transaction, "transaction.set_rollback()").rollback = rollback


def get_rollback(transaction: ReadWriteTransaction) -> bool:
    """Whether ``transaction``'s :func:`read_write` block will roll back."""
    return _block_of(transaction, "transaction.get_rollback()").rollback


@dataclass
class Refusals:
    """Statements of the ORM a read-only transaction refused, while watched
    (:func:`watching_refusals`)."""

    count: int = 0
    first: str = ""
    """What the first refusal said."""


_refusals: contextvars.ContextVar[Refusals | None] = contextvars.ContextVar(
    "txcache_django_refusals", default=None
)


@contextlib.contextmanager
def watching_refusals() -> Iterator[Refusals]:
    """Count the ORM's statements refused in this context during the block (the
    middleware runs a safe request again read/write when one was)."""
    refusals = Refusals()
    token = _refusals.set(refusals)
    try:
        yield refusals
    finally:
        _refusals.reset(token)


def note_refusal(what: str) -> None:
    """A read-only transaction refused a statement of the ORM (``StatementNotAllowed``);
    ``what`` is the refusal's message."""
    refusals = _refusals.get()
    if refusals is not None:
        refusals.count += 1
        refusals.first = refusals.first or what


def refused() -> bool:
    """Whether a statement was refused in this context since the watch began."""
    refusals = _refusals.get()
    return refusals is not None and refusals.count > 0


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

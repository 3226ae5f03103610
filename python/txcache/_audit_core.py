"""The audit without I/O (docs/library.md, "Audit"): what a read-only transaction keeps of
a sampled hit and hands over at its end, the verdict on a rerun, and what is logged.

With ``audit_rate`` above 0, each cache hit of a ``consistent`` cache is kept with that
probability (:class:`SampledCall`, by
:meth:`~txcache._cacheable_base.CacheableBase._sample_for_audit`). When its block ends
cleanly, the transaction hands its sampled calls and the pin it ran at to its cache's
:class:`Auditor` (an :class:`AuditBatch`): a thread of the sync cache
(:mod:`txcache._auditor`), a task of the async one (:mod:`txcache.aio._auditor`). It re-runs
each call's function at that pin, every cacheable call inside it run against the database
(:mod:`txcache.aio._audit` and its generated sync twin), and compares the results.

A cached value a transaction used is valid at the pin it ran at: the database at that pin is
what the value was computed from. A rerun there that returns something else is therefore
never replication lag or staleness: the function is not deterministic, reads something
outside the database, or txcache served a value it should not have.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from txcache._pinset import Pin
from txcache._ring import NodeClient
from txcache._serialize import Serializer
from txcache._session import SessionContext

if TYPE_CHECKING:
    from txcache._cacheable_base import CacheableBase

__all__ = [
    "AUDIT_QUEUE_SIZE",
    "AuditBatch",
    "AuditSkipped",
    "Auditor",
    "SampledCall",
    "report_mismatch",
    "same_result",
    "skip",
    "skipped",
]

log = logging.getLogger("txcache")

N = TypeVar("N", bound=NodeClient)

AUDIT_QUEUE_SIZE = 64
"""Batches waiting for the auditor. Beyond that a new batch is dropped (its calls counted
skipped): the audit never holds up a transaction, and a slow database never makes it
hoard memory."""


@dataclass(frozen=True)
class SampledCall(Generic[N]):
    """A cache hit kept for the audit."""

    function: CacheableBase[Any, Any]
    """The cacheable function called: its name and its audit counters."""
    rerun: Callable[[], Any]
    """The undecorated function bound to a copy of the call's arguments (the application
    may change its own afterwards)."""
    key: bytes
    """The key the value was read under."""
    node: N
    """The node that holds it."""
    context: SessionContext
    """The session context the key names: a rerun in another one (the database's or the
    role's settings changed since) may rightly return something else."""
    cached: bytes
    """The value as the node returned it, decoded again at the check: the object the
    application got may have been changed since."""


@dataclass(frozen=True)
class AuditBatch:
    """The calls one read-only transaction sampled, and the pin it ran at."""

    pin: Pin
    calls: tuple[SampledCall[Any], ...]


class Auditor(Protocol):
    """What a read-only transaction hands its sampled calls to as it ends."""

    def submit(self, batch: AuditBatch) -> None:
        """Queue ``batch`` for checking, without waiting: when the queue is full, its calls
        are counted skipped."""


class AuditSkipped(Exception):
    """Why a sampled call could not be checked (it is then counted skipped, not judged)."""


def skip(calls: Iterable[SampledCall[Any]]) -> None:
    """Count ``calls`` skipped, unchecked (a failed block, a full queue, a closing cache)."""
    for call in calls:
        call.function.audit.record_skipped()


def skipped(call: SampledCall[Any], pin: Pin, why: BaseException) -> None:
    """Count ``call`` skipped because of ``why``, and say so in the log."""
    log.info("audit of %s at pin %d skipped: %s", call.function.keys.name, pin.ts, why)
    call.function.audit.record_skipped()


def same_result(serializer: Serializer, call: SampledCall[Any], result: Any) -> bool:
    """Whether the rerun's ``result`` equals the cached value (``==``), both as the
    serializer gives them back — what the function returned becomes, once cached, whatever
    ``loads(dumps(…))`` makes of it (a JSON serializer turns tuples into lists). Raises
    :class:`AuditSkipped` when either cannot be decoded or compared."""
    try:
        encoded = serializer.dumps(result, key=call.key)
        if encoded == call.cached:  # the same bytes: equal, even where == says not (NaN)
            return True
        cached = serializer.loads(call.cached, key=call.key)
        return bool(cached == serializer.loads(encoded, key=call.key))
    except Exception as error:  # a pluggable serializer, or a value's __eq__, may raise anything
        raise AuditSkipped(f"the results cannot be compared ({error!r})") from error


def report_mismatch(
    call: SampledCall[Any], pin: Pin, deleted: int | None, *, invalidating: bool
) -> None:
    """Log a mismatch: the function, the key, the pin, what was done about the cached value
    (``deleted``: what ``DEL`` answered, with ``invalidating``) and what to do. The values
    are not logged: they may hold personal data."""
    name = call.function.keys.name
    if not invalidating:
        done = "it stays cached (audit_invalidate=True deletes such values)"
    elif deleted is None:
        done = f"deleting it from cache node {call.node.address} failed (node down or refused)"
    else:
        done = f"it was deleted from cache node {call.node.address}"
    log.warning(
        "audit mismatch: %s re-run at pin %d, the snapshot its cached value was read at, "
        "returned something other than the value cached under key %s; %s. At the same "
        "snapshot this means %s is not deterministic or reads something outside the "
        "database (declare it @cacheable(manual_invalidation=True) and invalidate it when "
        "that changes), or else a bug in txcache: please report it with this line",
        name,
        pin.ts,
        call.key.hex(),
        done,
        name,
    )

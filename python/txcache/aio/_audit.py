"""The audit's round trips (docs/library.md, "Audit"): each sampled call's function re-run at
the pin its cached value was read at, and the verdict. Its sync twin is generated from it
(``tools/async_to_sync.py``); what runs it — a task of the async cache, a thread of the sync
one — is hand-written (:mod:`txcache.aio._auditor`, :mod:`txcache._auditor`), and every
decision without I/O is :mod:`txcache._audit_core`'s.

The rerun runs in an :class:`AsyncAuditTransaction`: a read-only transaction of the same
cache that begins its database transaction by importing the pin's snapshot and stays there,
every cacheable call inside it running its function against the database. Unlike a
transaction that runs uncached, its statements keep the read-only transaction's checks for
a ``TRUNCATE``, a table rewrite or a schema change committed after the pin: PostgreSQL
would run them over the pin's data as no commit ever had it (an empty table, a new view
definition), and the audit would report a mismatch that is not one. What keeps it off the
pin — the pin released, such a change, another session context — makes the call
*skipped*, never a mismatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from txcache._audit_core import (
    AuditBatch,
    AuditSkipped,
    SampledCall,
    report_mismatch,
    same_result,
    skipped,
)
from txcache._pinset import Pin
from txcache._session import SessionContext
from txcache.aio._nodes import AsyncCacheNode
from txcache.aio._read_only import AsyncReadOnlyTransaction
from txcache.errors import SnapshotUnavailable

if TYPE_CHECKING:
    from txcache.aio._cache import AsyncCacheDriver

__all__ = ["AsyncAuditTransaction", "audit"]


class AsyncAuditTransaction(AsyncReadOnlyTransaction):
    """A read-only transaction at one pin that re-runs sampled calls (module docstring)."""

    def __init__(self, cache: AsyncCacheDriver, pin: Pin, context: SessionContext) -> None:
        """A transaction of ``cache`` bound to ``pin``, for a call read in the session
        ``context``; nothing is sent yet."""
        super().__init__(cache, staleness=0.0, not_before=None)
        self._bind_to(pin, context)

    async def _begin(self) -> None:
        # The keys' session context only: no read-your-writes floor, it reads at the pin.
        self._adopt_context(await self.cache.transaction_context())
        self._check_rerun_context()


async def audit(cache: AsyncCacheDriver, batch: AuditBatch) -> None:
    """Check each call of ``batch`` at its pin, one after the other. What a check meets —
    the pin gone, the function raising — makes that call skipped, never an error here."""
    for call in batch.calls:
        await _check(cache, batch.pin, call)


async def _check(cache: AsyncCacheDriver, pin: Pin, call: SampledCall[Any]) -> None:
    """Re-run ``call`` at ``pin`` and judge it: a check, or a mismatch (logged, the key
    deleted with ``audit_invalidate``), or skipped."""
    try:
        result = await _rerun(cache, pin, call)
        matched = same_result(cache.serializer, call, result)
    except Exception as error:  # the pin gone, the function raising, …: not a verdict
        skipped(call, pin, error)
        return
    if matched:
        call.function.audit.record_check(matched=True)
        return
    invalidating = cache.settings.audit_invalidate
    node: AsyncCacheNode = call.node
    deleted = await node.delete(call.key) if invalidating else None
    report_mismatch(call, pin, deleted, invalidating=invalidating)
    # Counted last: whoever waits for the count finds the key already deleted.
    call.function.audit.record_check(matched=False)


async def _rerun(cache: AsyncCacheDriver, pin: Pin, call: SampledCall[Any]) -> Any:
    """What ``call``'s function returns at ``pin``. Raises :class:`AuditSkipped` when the
    transaction cannot stay at the pin, or when a statement failed in the block even if
    the function caught the error: what it returned then is not what the database holds at
    the pin."""
    transaction = AsyncAuditTransaction(cache, pin, call.context)
    try:
        async with transaction:
            result = await call.rerun()
    except SnapshotUnavailable as error:
        raise AuditSkipped(f"the database can no longer be read at the pin ({error})") from error
    if transaction.failed:
        raise AuditSkipped("a statement failed during the rerun (the function caught it)")
    return result

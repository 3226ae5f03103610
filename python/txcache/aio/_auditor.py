"""The async cache's auditor (docs/library.md, "Audit"): a task of the cache's event loop
that checks the batches read-only transactions hand over
(:func:`txcache.aio._audit.audit`), one at a time, from a bounded queue — so it uses at
most one pooled connection, and a transaction never waits for it. Hand-written: the sync
cache's is a thread (:mod:`txcache._auditor`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import TYPE_CHECKING

from txcache._audit_core import AUDIT_QUEUE_SIZE, AuditBatch, skip
from txcache.aio._audit import audit

if TYPE_CHECKING:
    from txcache.aio._cache import AsyncCacheDriver

__all__ = ["TaskAuditor"]

log = logging.getLogger("txcache")


class TaskAuditor:
    """Checks the sampled calls of ``cache``'s read-only transactions in a task of its
    event loop (module docstring)."""

    def __init__(self, cache: AsyncCacheDriver) -> None:
        """Prepare the queue; :meth:`start` starts the task, on the running loop."""
        self._cache = cache
        self._queue: asyncio.Queue[AuditBatch] = asyncio.Queue(AUDIT_QUEUE_SIZE)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the task on the running loop."""
        # A context of its own: not the current transaction, nor the read-your-writes
        # record, of whoever opened the cache.
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(
            self._work(), name="txcache-audit", context=contextvars.Context()
        )

    def submit(self, batch: AuditBatch) -> None:
        """Queue ``batch`` (from the loop's thread); when the queue is full its calls are
        counted skipped."""
        try:
            self._queue.put_nowait(batch)
        except asyncio.QueueFull:
            skip(batch.calls)

    async def _work(self) -> None:
        while True:
            batch = await self._queue.get()
            try:
                await audit(self._cache, batch)
            except Exception:  # a bug here must not end the audit of later batches
                log.exception("the audit of a batch at pin %d failed", batch.pin.ts)

    async def close(self) -> None:
        """Stop the task (a check under way is cancelled: its connection goes back as a
        cancelled block's does) and drop the batches still queued (counted skipped)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
        while not self._queue.empty():
            skip(self._queue.get_nowait().calls)

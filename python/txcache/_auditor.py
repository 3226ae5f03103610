"""The sync cache's auditor (docs/library.md, "Audit"): a daemon thread that checks the
batches read-only transactions hand over (:func:`txcache._audit.audit`), one at a time, from
a bounded queue — so it uses at most one pooled connection, and a transaction never waits
for it. Hand-written: the async cache's is a task (:mod:`txcache.aio._auditor`).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING

from txcache._audit import audit
from txcache._audit_core import AUDIT_QUEUE_SIZE, AuditBatch, skip

if TYPE_CHECKING:
    from txcache._cache import CacheDriver

__all__ = ["ThreadAuditor"]

log = logging.getLogger("txcache")

_CLOSE_WAIT = 5.0
"""Seconds :meth:`ThreadAuditor.close` waits for a check under way; after that the cache
closes under it (its thread is a daemon, and the check ends as skipped)."""


class ThreadAuditor:
    """Checks the sampled calls of ``cache``'s read-only transactions in a thread of its
    own (module docstring)."""

    def __init__(self, cache: CacheDriver) -> None:
        """Start the thread."""
        self._cache = cache
        self._queue: queue.Queue[AuditBatch | None] = queue.Queue(AUDIT_QUEUE_SIZE)
        self._thread = threading.Thread(target=self._work, name="txcache-audit", daemon=True)
        self._thread.start()

    def submit(self, batch: AuditBatch) -> None:
        """Queue ``batch``; when the queue is full its calls are counted skipped."""
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            skip(batch.calls)

    def _work(self) -> None:
        while (batch := self._queue.get()) is not None:
            try:
                audit(self._cache, batch)
            except Exception:  # a bug here must not end the audit of later batches
                log.exception("the audit of a batch at pin %d failed", batch.pin.ts)

    def close(self) -> None:
        """Drop the batches still queued (counted skipped) and stop the thread, waiting up
        to :data:`_CLOSE_WAIT` seconds for the check under way."""
        self._drop_queued()
        self._queue.put(None)
        self._thread.join(_CLOSE_WAIT)

    def _drop_queued(self) -> None:
        while True:
            try:
                batch = self._queue.get_nowait()
            except queue.Empty:
                return
            if batch is not None:
                skip(batch.calls)

"""The async cache's guard against a blocked event loop holding parked snapshots' locks.

A database transaction parked for the next read-only transaction (:mod:`txcache._parking`)
holds its tables' ``AccessShareLock``; the cache's background task ends it once it is
``snapshot_hold`` seconds old. That task runs on the event loop: a loop blocked by a
synchronous call — worst, one that waits for a schema change on those very tables — would
keep the locks, and the schema change would wait forever. This thread is the backstop:
a parked transaction still kept a second past its hold has its session ended by the
server (``pg_terminate_backend``, on a connection of the thread's own), and its connection
is handed back to the loop to be replaced. The sync cache needs none: its background
worker is a thread of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg

from txcache._parking import ParkingLot

__all__ = ["ParkingWatchdog"]

log = logging.getLogger("txcache")

GRACE = 1.0
"""Seconds past ``snapshot_hold`` before the loop counts as blocked."""


class ParkingWatchdog:
    """A daemon thread ending the sessions of parked transactions the loop left too long."""

    def __init__(self, parking: ParkingLot[Any], dsn: str) -> None:
        """Watch ``parking``; terminate through a connection to ``dsn`` when needed."""
        self._parking = parking
        self._dsn = dsn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txcache-parking", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the parked transactions are the cache's to end)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._parking.hold + GRACE):
            late = self._parking.overdue(time.monotonic(), GRACE)
            if not late:
                continue
            try:
                self._terminate([parked.connection for parked in late])
            except Exception:  # the watchdog must never die: log and go on
                log.exception("txcache: ending the sessions of overdue parked snapshots failed")

    def _terminate(self, connections: list[Any]) -> None:
        pids = [connection.info.backend_pid for connection in connections]
        log.warning(
            "txcache: the event loop kept %d read-only database transaction(s) open more "
            "than %.2f s past snapshot_hold (a blocking call in the loop?): their sessions "
            "are ended so that schema changes on their tables do not wait",
            len(pids),
            GRACE,
        )
        with psycopg.connect(self._dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
        for connection in connections:
            self._parking.terminated(connection)

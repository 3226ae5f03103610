"""Database transactions kept open at a pin for the next read-only transaction (no I/O).

A read-only transaction's database transaction is ``REPEATABLE READ READ ONLY`` on an
imported pin. It writes nothing and its snapshot never changes, so the next read-only
transaction that chooses the same pin can run its queries in it instead of beginning its
own: no ``BEGIN``, no ``SET TRANSACTION SNAPSHOT``, no check of the snapshot imported and,
for the tables verified earlier in it, no rewrite check — most of what a miss costs the
database beyond its query (docs/library.md, "Consecutive transactions share a database
transaction").

Why it is sound: the next transaction would see exactly what a fresh import of the pin
shows — the same snapshot, nothing written since — and the ``AccessShareLock`` held on each
verified table since its verification still holds off any ``TRUNCATE`` or rewrite of it, so
it stays verified (the reason it counts as verified within one transaction already). Every
other check a query makes (the catalog check, the session check) runs as before.

What it costs: those locks make a schema change on the tables wait. So a database
transaction is kept only while it is younger than ``snapshot_hold`` seconds (counted from
its import, not from its last use: reuse never extends it), and the cache's background
worker ends the ones that outlive it every ``snapshot_hold`` seconds: a migration waits at
most about twice ``snapshot_hold`` plus one read-only transaction. Nothing is kept after a
failed statement, a changed session, a schema change noticed, with another caller
waiting for the pool, or once the cache is closed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from psycopg.pq import TransactionStatus

from txcache._pinset import Pin
from txcache._session import SessionContext

__all__ = ["ParkedSnapshot", "ParkingLot", "holds", "same_commit_point"]

C = TypeVar("C")


@dataclass(frozen=True)
class ParkedSnapshot(Generic[C]):
    """A connection left inside its read-only database transaction at ``pin``."""

    connection: C
    pin: Pin
    context: SessionContext
    """The session context the connection runs in."""
    verified: frozenset[str]
    """Tables checked for a rewrite in this database transaction (locked since)."""
    began: float
    """``time.monotonic()`` when the database transaction imported ``pin``."""


class ParkingLot(Generic[C]):
    """The parked database transactions of one cache, shared by its threads or tasks."""

    def __init__(self, hold: float, limit: int) -> None:
        """Keep each for ``hold`` seconds after it began (0: never), at most ``limit``."""
        self.hold = hold
        self.limit = limit
        self._lock = threading.Lock()
        self._parked: list[ParkedSnapshot[C]] = []
        self._terminated: list[C] = []
        self.reused = 0
        """How many read-only transactions ran in a parked database transaction."""

    def __len__(self) -> int:
        return len(self._parked)

    def young(self, began: float, now: float) -> bool:
        """Whether a database transaction that began at ``began`` may still be kept."""
        return now - began < self.hold

    def park(self, parked: ParkedSnapshot[C], now: float) -> ParkedSnapshot[C] | None:
        """Keep ``parked`` if it is young enough; what the caller must end instead: itself
        when it is not kept, or the oldest one when the lot was full."""
        if not self.young(parked.began, now):
            return parked
        with self._lock:
            self._parked.append(parked)
            if len(self._parked) <= self.limit:
                return None
            oldest = min(self._parked, key=lambda p: p.began)
            self._parked.remove(oldest)
            return oldest

    def take(self, pin: Pin, context: SessionContext, now: float) -> ParkedSnapshot[C] | None:
        """A young database transaction at ``pin`` in ``context`` on ``pin``'s server (the
        primary, or a standby), taken out of the lot."""
        with self._lock:
            for parked in reversed(self._parked):
                same_server = parked.pin.server == pin.server
                if same_commit_point(parked.pin, pin) and same_server and parked.context == context:
                    if not self.young(parked.began, now):
                        continue  # parked in finishing order, not beginning order
                    self._parked.remove(parked)
                    self.reused += 1
                    return parked
        return None

    def take_any(self, server: str | None = None) -> ParkedSnapshot[C] | None:
        """The oldest parked connection to ``server`` (``None``: the primary), for a
        transaction at another pin: it uses the connection rather than the pool (after
        ending the database transaction), so that a parked connection never sits idle while
        the pool has none to give."""
        with self._lock:
            candidates = [p for p in self._parked if p.pin.server == server]
            if not candidates:
                return None
            oldest = min(candidates, key=lambda p: p.began)
            self._parked.remove(oldest)
            return oldest

    def expired(self, now: float) -> list[ParkedSnapshot[C]]:
        """The database transactions too old to keep, taken out of the lot."""
        with self._lock:
            old = [p for p in self._parked if not self.young(p.began, now)]
            self._parked = [p for p in self._parked if self.young(p.began, now)]
        return old

    def overdue(self, now: float, grace: float) -> list[ParkedSnapshot[C]]:
        """The primary's database transactions kept ``grace`` seconds past ``hold`` — their
        cache's background worker did not run (an event loop blocked) — taken out of the
        lot. A standby's are left to that worker: their locks hold back no schema change on
        the primary, only the standby's replay of one."""
        with self._lock:
            late = [
                p
                for p in self._parked
                if p.pin.server is None and now - p.began >= self.hold + grace
            ]
            self._parked = [p for p in self._parked if p not in late]
        return late

    def terminated(self, connection: C) -> None:
        """Note ``connection``, whose session was ended from outside, for its owner to give
        back (:meth:`take_terminated`)."""
        with self._lock:
            self._terminated.append(connection)

    def take_terminated(self) -> list[C]:
        """The connections :meth:`terminated` noted since the last call."""
        with self._lock:
            every, self._terminated = self._terminated, []
        return every

    def drain(self) -> list[ParkedSnapshot[C]]:
        """Every parked database transaction, taken out of the lot."""
        with self._lock:
            every, self._parked = self._parked, []
        return every


def same_commit_point(a: Pin, b: Pin) -> bool:
    """Whether two pins show the same data: each is certified to show exactly the commits
    up to its ``ts``, so pins of one ``ts`` (the agent may export several) are
    interchangeable, whatever their snapshot ids and ``current_as_of``."""
    return a.ts == b.ts


def holds(connection: Any) -> bool:
    """Whether ``connection`` (a psycopg connection, sync or async) is inside a transaction
    without error, as a parked one must be."""
    return bool(connection.info.transaction_status == TransactionStatus.INTRANS)

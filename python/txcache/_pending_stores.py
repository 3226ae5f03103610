"""Values waiting for their catalog to be verified before they are stored (no I/O).

Without DDL event triggers (the agent's ``--ddl-tracking fingerprint``) nothing tells a
library that a schema change committed while its query ran: PostgreSQL runs every query
with the *current* catalog, whatever its snapshot. So a value computed at a pin is stored
only once a pin the agent took *after* the value's queries ended shows the same catalog
fingerprint as the value's own pin: no schema change committed between the two, so the
queries ran with the catalog of their snapshot. The library reads the WAL insert position
after each query; a pin whose ``after`` (the end of the WAL record the agent wrote just
before taking it) exceeds that position was taken later (docs/library.md, "Without event
triggers").

A value waits at most :data:`WAIT` seconds and the queue holds at most :data:`LIMIT`
values; what cannot be verified in time is dropped (counted ``unverified``), never stored.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from txcache._pinset import Pin

__all__ = [
    "BATCH",
    "LIMIT",
    "UNVERIFIED",
    "WAIT",
    "LaterPins",
    "PendingStore",
    "PendingStores",
    "Request",
]

N = TypeVar("N")

WAIT = 30.0
"""Seconds a value waits for a pin that verifies it (the agent takes one every
``--pin-interval``) before it is dropped."""
LIMIT = 10_000
"""Most values waiting at once; the oldest are dropped beyond it."""
BATCH = 64
"""Most values one block's end stores: the rest wait for the next."""
UNVERIFIED = "unverified"
"""The store outcome of a value dropped because its catalog could not be verified: a
schema change may have committed while its queries ran, or no pin came in time."""

Request = tuple[bytes, int, int | None, int, list[str]]
"""What ``TXSET`` stores: data, interval (``lo``, ``hi``), snapshot, tags."""


@dataclass(frozen=True, slots=True)
class PendingStore(Generic[N]):
    """One value waiting for its catalog to be verified."""

    node: N
    """The node its key maps to."""
    key: bytes
    request: Request
    position: int
    """The WAL insert position read after the last query of its database transaction."""
    fingerprint: str
    """The catalog fingerprint of the pin its queries ran at."""
    record: Callable[[str | None], None]
    """Counts the store's outcome (``TXSET``'s, ``None`` for a node down, or
    :data:`UNVERIFIED`)."""
    since: float
    """``time.monotonic()`` when it began to wait."""


class LaterPins:
    """The fingerprints of the pins taken after each WAL position, for many verdicts at
    once: the pins sorted by ``after``, and the fingerprints of each suffix.

    What no fingerprint shows: a catalog object created and dropped again between two pins
    (the rows it inserted are gone, and nothing else changed) — a query that ran meanwhile
    and used it is verified all the same (docs/library.md, "Without event triggers")."""

    __slots__ = ("_afters", "_suffixes")

    def __init__(self, pins: Sequence[Pin]) -> None:
        ordered = sorted(pins, key=lambda pin: pin.after)
        self._afters = [pin.after for pin in ordered]
        suffixes: list[frozenset[str | None]] = [frozenset()] * (len(ordered) + 1)
        for index in range(len(ordered) - 1, -1, -1):
            suffixes[index] = suffixes[index + 1] | {ordered[index].fingerprint}
        self._suffixes = suffixes

    def verdict(self, position: int, fingerprint: str) -> bool | None:
        """Whether these pins show that no schema change committed between a snapshot with
        ``fingerprint`` and WAL insert position ``position``: ``True`` when a pin taken after
        it (``after > position``) has the same fingerprint, ``False`` when every such pin has
        another (a change committed before that pin — maybe while the queries ran), ``None``
        while no pin was taken after it. A change that persists alters the fingerprint (it
        hashes every catalog row's version)."""
        later = self._suffixes[bisect.bisect_right(self._afters, position)]
        if not later:
            return None
        return fingerprint in later


class PendingStores(Generic[N]):
    """The values of one cache waiting for verification, shared by its threads or tasks."""

    def __init__(self, wait: float = WAIT, limit: int = LIMIT) -> None:
        """Keep each value ``wait`` seconds at most, and at most ``limit`` at once."""
        self.wait = wait
        self.limit = limit
        self._lock = threading.Lock()
        self._waiting: deque[PendingStore[N]] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, store: PendingStore[N]) -> None:
        """Queue ``store``; beyond :attr:`limit` the oldest is dropped (``unverified``)."""
        with self._lock:
            self._waiting.append(store)
            dropped = self._waiting.popleft() if len(self._waiting) > self.limit else None
        if dropped is not None:
            dropped.record(UNVERIFIED)

    def settle(
        self, pins: Sequence[Pin], now: float | None = None, most: int = BATCH
    ) -> list[PendingStore[N]]:
        """At most ``most`` of the values ``pins`` verify, to store now (the others stay
        queued: a block's end stores a bounded batch); the ones they refute or that waited
        too long are dropped (``unverified``), the others keep waiting."""
        if not self._waiting:
            return []
        now = time.monotonic() if now is None else now
        later = LaterPins(pins)
        ready: list[PendingStore[N]] = []
        dropped: list[PendingStore[N]] = []
        with self._lock:
            kept: deque[PendingStore[N]] = deque()
            for store in self._waiting:
                verified = later.verdict(store.position, store.fingerprint)
                if verified and len(ready) < most:
                    ready.append(store)
                elif verified is False or now - store.since > self.wait:
                    dropped.append(store)
                else:
                    kept.append(store)
            self._waiting = kept
        for store in dropped:
            store.record(UNVERIFIED)
        return ready

    def drop_all(self) -> None:
        """Drop every waiting value (``unverified``): the cache closes."""
        with self._lock:
            dropped, self._waiting = self._waiting, deque()
        for store in dropped:
            store.record(UNVERIFIED)

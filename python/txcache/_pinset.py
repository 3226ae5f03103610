"""The pin set of a read-only transaction: where it can still be serialized (no I/O).

A *pin* is a snapshot the agent holds open and has certified: its timestamp ``ts`` is the
commit LSN of the last commit it shows. A transaction starts with every live pin fresh
enough for it plus ★ — "a snapshot taken now" — and narrows the set with every cached value
it reads (paper §6.2; docs/library.md). The set never becomes empty: a narrowing that would
empty it is refused, and the caller treats the value as a miss.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["Pin", "PinPolicy", "PinSet", "newest_or_fresh", "oldest_pin", "prefer_standbys"]


@dataclass(frozen=True, slots=True)
class Pin:
    """One certified snapshot the agent holds."""

    ts: int
    """The commit point the snapshot shows: the LSN of the last commit visible in it."""
    snapshot_id: str
    """For ``SET TRANSACTION SNAPSHOT``."""
    current_as_of: float
    """Wall-clock time (Unix seconds) up to which this pin was known to be the current
    database state."""
    snapshot_text: str | None = None
    """The snapshot's contents, ``pg_current_snapshot()::text`` (``xmin:xmax:xip,…``) of
    the statement that exported it; ``None`` when unknown. After a PostgreSQL restart
    another snapshot can carry the same :attr:`snapshot_id`: an import is checked against
    this (equal contents, equal visibility)."""
    fingerprint: str | None = None
    """The catalog fingerprint the snapshot shows (``txcache.schema_fingerprint(true)``),
    when the agent runs without DDL triggers (``--ddl-tracking fingerprint``); ``None``
    otherwise."""
    after: int = 0
    """With :attr:`fingerprint`: the end of the WAL record the agent wrote just before it
    took this snapshot (0: unknown). A WAL insert position read before that record was
    written is below it, so a query that ended before such a reading ended before this
    snapshot was taken (:mod:`txcache._pending_stores`)."""
    server: str | None = None
    """The standby whose snapshot it is, by its name in the ``replicas`` setting (the
    agent's ``--standby``); ``None``: the primary's."""
    fallback: Pin | None = None
    """For a standby's pin: the primary's pin at the same commit point, if the agent lists
    one; a transaction that cannot import the standby's snapshot imports this instead."""


class PinSet:
    """Pins ordered by timestamp, and whether ★ is still possible."""

    __slots__ = ("_pins", "_timestamps", "star")

    def __init__(self, pins: Iterable[Pin], *, star: bool = True) -> None:
        """A set of ``pins`` (duplicates by ``ts`` collapse), with ★ if ``star``."""
        by_ts = {pin.ts: pin for pin in pins}
        self._timestamps = sorted(by_ts)
        self._pins = [by_ts[ts] for ts in self._timestamps]
        self.star = star

    @classmethod
    def from_sorted(cls, pins: list[Pin], timestamps: list[int], *, star: bool = True) -> PinSet:
        """A set of ``pins`` already sorted by ``ts`` without duplicates, ``timestamps``
        their timestamps (both lists are owned by the set from now on): no sorting, for
        the begin of every transaction."""
        pin_set = cls.__new__(cls)
        pin_set._pins, pin_set._timestamps, pin_set.star = pins, timestamps, star
        return pin_set

    def __len__(self) -> int:
        """The number of pins, ★ not counted."""
        return len(self._pins)

    def __iter__(self) -> Iterator[Pin]:
        return iter(self._pins)

    def __repr__(self) -> str:
        star = ", ★" if self.star else ""
        return f"PinSet([{', '.join(str(ts) for ts in self._timestamps)}{star}])"

    @property
    def pins(self) -> list[Pin]:
        """The pins, oldest first (a copy)."""
        return list(self._pins)

    def pins_view(self) -> Sequence[Pin]:
        """The pins, oldest first, not copied: read it before the set changes again."""
        return self._pins

    def bounds(self) -> tuple[int, int] | None:
        """The smallest and largest pin timestamps (★ excluded); ``None`` without pins."""
        if not self._pins:
            return None
        return self._timestamps[0], self._timestamps[-1]

    def newest(self) -> Pin | None:
        """The pin with the largest timestamp, if any."""
        return self._pins[-1] if self._pins else None

    def oldest(self) -> Pin | None:
        """The pin with the smallest timestamp, or ``None``."""
        return self._pins[0] if self._pins else None

    def within(self, lo: int, hi: int) -> list[Pin]:
        """The pins with ``lo <= ts < hi``."""
        start = bisect.bisect_left(self._timestamps, lo)
        end = bisect.bisect_left(self._timestamps, hi)
        return self._pins[start:end]

    def narrow(self, lo: int, hi: int) -> bool:
        """Keep only the pins in ``[lo, hi)`` and drop ★ (data was seen: the present may not
        match it). Returns ``False`` and changes nothing when no pin would remain."""
        if self._pins and lo <= self._timestamps[0] and self._timestamps[-1] < hi:
            self.star = False  # valid at every pin: the common case costs no copy
            return True
        kept = self.within(lo, hi)
        if not kept:
            return False
        self._replace(kept)
        self.star = False
        return True

    def restrict(self, pins: Iterable[Pin]) -> bool:
        """Keep only the pins also in ``pins`` and drop ★; ``False`` (unchanged) if none."""
        wanted = {pin.ts for pin in pins}
        kept = [pin for pin in self._pins if pin.ts in wanted]
        if not kept:
            return False
        self._replace(kept)
        self.star = False
        return True

    def reify(self, pin: Pin) -> None:
        """★ became ``pin``, a snapshot taken now: it replaces ★ in the set."""
        self.star = False
        index = bisect.bisect_left(self._timestamps, pin.ts)
        if index < len(self._timestamps) and self._timestamps[index] == pin.ts:
            self._pins[index] = pin
            return
        self._timestamps.insert(index, pin.ts)
        self._pins.insert(index, pin)

    def substitute(self, pin: Pin, other: Pin) -> None:
        """Put ``other``, a pin at the same commit point, in ``pin``'s place."""
        assert other.ts == pin.ts
        index = bisect.bisect_left(self._timestamps, pin.ts)
        if index < len(self._timestamps) and self._timestamps[index] == pin.ts:
            self._pins[index] = other

    def discard(self, pin: Pin) -> None:
        """Forget ``pin`` (its snapshot can no longer be imported)."""
        index = bisect.bisect_left(self._timestamps, pin.ts)
        if index < len(self._timestamps) and self._timestamps[index] == pin.ts:
            del self._timestamps[index]
            del self._pins[index]

    def _replace(self, pins: list[Pin]) -> None:
        self._pins = pins
        self._timestamps = [pin.ts for pin in pins]


PinPolicy = Callable[[PinSet, float], Pin | None]
"""Chooses the snapshot a transaction's first query runs at: a pin of the set, or ``None``
for ★ (only when ``pin_set.star``). Called with the set and the wall-clock time."""


def newest_or_fresh(max_age: float = 5.0) -> PinPolicy:
    """The original's policy: ★ when it is possible and the newest pin was last known
    current more than ``max_age`` seconds ago (or there is no pin), else the newest pin."""

    def choose(pin_set: PinSet, now: float) -> Pin | None:
        newest = pin_set.newest()
        if pin_set.star and (newest is None or now - newest.current_as_of > max_age):
            return None
        return newest

    return choose


def prefer_standbys(policy: PinPolicy, standbys: int = 1) -> PinPolicy:
    """``policy``, but a standby pin of the set when there is one: with ``replicas``, misses
    run on a standby whenever a snapshot there is fresh enough for the transaction (the set
    holds no other), and on the primary only otherwise. With several standbys
    (``standbys``: how many the library knows), transactions take the newest pin of each
    standby in turn, so that every standby serves an equal share of the misses rather than
    whichever pinned last."""
    turn = itertools.count()

    def choose(pin_set: PinSet, now: float) -> Pin | None:
        newest: dict[str, Pin] = {}
        for pin in reversed(pin_set.pins_view()):
            if pin.server is not None and pin.server not in newest:
                newest[pin.server] = pin
                if len(newest) >= standbys:
                    break
        if not newest:
            return policy(pin_set, now)
        servers = sorted(newest)
        return newest[servers[next(turn) % len(servers)]]

    return choose


def oldest_pin(pin_set: PinSet, now: float) -> Pin | None:
    """The oldest pin of the set (★ only when there is none): reads as stale as the
    transaction allows — for tests and checks that want old snapshots, and for workloads
    that prefer hits over freshness."""
    return pin_set.oldest()

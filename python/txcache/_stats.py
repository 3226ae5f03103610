"""Statistics: what the cache did for each cacheable function, what the audit found for
it, and for each view (a web request handler) of a framework integration."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

__all__ = [
    "AuditStats",
    "FunctionStats",
    "OperationLatency",
    "ViewStats",
    "all_view_stats",
    "view_stats",
]


@dataclass
class FunctionStats:
    """Counters of one cacheable function, updated by every call in this process.

    ``misses`` counts by kind: the node's (``compulsory``, ``capacity``, ``staleness``,
    ``consistency``) and the library's (``unavailable``: node down; ``foreign``: a value
    that failed its integrity check; ``error``: a node refused the request).
    """

    name: str
    hits: int = 0
    misses: Counter[str] = field(default_factory=Counter)
    uncached: int = 0
    """Calls that ran without the cache (read/write transaction, ``bypass`` mode, or a
    transaction that fell back to the database)."""
    inserts: Counter[str] = field(default_factory=Counter)
    """``TXSET`` outcomes: ``inserted``, ``extended``, ``nondeterministic``, ``empty``,
    ``failed``, and ``unverified`` (not stored: its catalog could not be verified)."""
    errors: int = 0
    """Calls that raised (whatever the source: the function itself, the database, a
    refused query). A call that missed and then raised counts here, not among ``misses``."""
    hit_seconds: float = 0.0
    """Time spent in calls answered from the cache."""
    miss_seconds: float = 0.0
    """Time spent running the function on misses."""
    lease_waits: int = 0
    """Misses that waited for another caller computing the same key (its lease) instead of
    computing it too: each then hit its store, or took the lease over."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def miss_count(self) -> int:
        """All misses, of every kind."""
        return sum(self.misses.values())

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (``0.0`` before any)."""
        lookups = self.hits + self.miss_count
        return self.hits / lookups if lookups else 0.0

    @property
    def time_saved(self) -> float:
        """Seconds the hits saved: each hit would have cost a mean miss, and cost a hit."""
        if not self.miss_count:
            return 0.0
        return self.hits * self.miss_seconds / self.miss_count - self.hit_seconds

    def record_hit(self, seconds: float) -> None:
        """A call answered from the cache in ``seconds``."""
        with self._lock:
            self.hits += 1
            self.hit_seconds += seconds

    def record_miss(self, kind: str, seconds: float) -> None:
        """A call that missed (``kind``) and ran in ``seconds``."""
        with self._lock:
            self.misses[kind] += 1
            self.miss_seconds += seconds

    def record_insert(self, outcome: str) -> None:
        """The outcome of storing a result."""
        with self._lock:
            self.inserts[outcome] += 1

    def record_error(self) -> None:
        """A call that raised."""
        with self._lock:
            self.errors += 1

    def record_lease_wait(self) -> None:
        """A miss that waited for the key's lease holder."""
        with self._lock:
            self.lease_waits += 1

    def record_uncached(self) -> None:
        """A call that ran without the cache."""
        with self._lock:
            self.uncached += 1

    def as_dict(self) -> dict[str, object]:
        """A plain snapshot of the counters (for logs, JSON, ``txcache status``)."""
        return {
            "name": self.name,
            "hits": self.hits,
            "misses": dict(self.misses),
            "uncached": self.uncached,
            "errors": self.errors,
            "inserts": dict(self.inserts),
            "lease_waits": self.lease_waits,
            "hit_rate": self.hit_rate,
            "time_saved": self.time_saved,
        }


@dataclass
class AuditStats:
    """What the audit (docs/library.md, "Audit") found for one cacheable function in this
    process: hits it re-ran at their pin and compared, the mismatches among them, and the
    sampled hits it could not check."""

    name: str
    checks: int = 0
    """Sampled hits re-run at their pin and compared with the cached value."""
    mismatches: int = 0
    """Checks whose result differed from the cached value (counted among ``checks``)."""
    skipped: int = 0
    """Sampled hits not checked: the block failed, the queue was full, the rerun could not
    stay at the pin (gone, or a change committed after it), the function raised, or the
    results could not be compared (docs/library.md, "Audit")."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record_check(self, *, matched: bool) -> None:
        """A sampled hit re-run and compared: equal (``matched``) or not."""
        with self._lock:
            self.checks += 1
            if not matched:
                self.mismatches += 1

    def record_skipped(self) -> None:
        """A sampled hit that could not be checked."""
        with self._lock:
            self.skipped += 1

    def as_dict(self) -> dict[str, object]:
        """A plain snapshot of the counters."""
        return {
            "name": self.name,
            "checks": self.checks,
            "mismatches": self.mismatches,
            "skipped": self.skipped,
        }


@dataclass
class OperationLatency:
    """How long this process's read-only transactions waited on the two sources of data:
    cache lookups (``TXGET`` round trips) and database statements (``execute``, rows
    included). The cache's case rests on the first being much shorter than the second."""

    lookups: int = 0
    lookup_seconds: float = 0.0
    queries: int = 0
    query_seconds: float = 0.0
    standby_queries: dict[str, int] = field(default_factory=dict)
    """Of :attr:`queries`, those run on each hot standby (the ``replicas`` setting), by name."""
    fresh_pins: int = 0
    """Fresh pins (★) the transactions asked the agent for and got: each is a snapshot the
    primary exports, and a miss at one shares no parked database transaction."""
    fresh_pins_unavailable: int = 0
    """Fresh pins asked for and not given (the agent could not give one, or lately could
    not: ``FreshPins``)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record_lookup(self, seconds: float) -> None:
        """One cache lookup that took ``seconds``."""
        with self._lock:
            self.lookups += 1
            self.lookup_seconds += seconds

    def record_query(self, seconds: float, standby: str | None = None) -> None:
        """One database statement that took ``seconds``, on hot standby ``standby`` (``None``:
        the primary)."""
        with self._lock:
            self.queries += 1
            self.query_seconds += seconds
            if standby is not None:
                self.standby_queries[standby] = self.standby_queries.get(standby, 0) + 1

    def record_fresh_pin(self, given: bool) -> None:
        """One fresh pin asked for: ``given`` or not."""
        with self._lock:
            if given:
                self.fresh_pins += 1
            else:
                self.fresh_pins_unavailable += 1

    def as_dict(self) -> dict[str, float]:
        """Counts and mean latencies in milliseconds (``0.0`` before any), and the queries
        that ran on standbys (``standby_queries``, all of them together)."""
        with self._lock:
            return {
                "lookups": self.lookups,
                "lookup_mean_ms": 1e3 * self.lookup_seconds / self.lookups if self.lookups else 0.0,
                "queries": self.queries,
                "query_mean_ms": 1e3 * self.query_seconds / self.queries if self.queries else 0.0,
                "standby_queries": sum(self.standby_queries.values()),
            }

    def standby_counts(self) -> dict[str, int]:
        """A copy of :attr:`standby_queries`."""
        with self._lock:
            return dict(self.standby_queries)


@dataclass
class ViewStats:
    """Counters of one view, updated by every request it served in a read-only transaction
    in this process: the requests, and the cacheable calls they made, answered from the
    cache (``hits``) or run (``misses``, nested calls of a miss included)."""

    name: str
    requests: int = 0
    hits: int = 0
    misses: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (``0.0`` before any)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def record(self, hits: int, misses: int) -> None:
        """One request served, whose transaction had ``hits`` and ``misses``."""
        with self._lock:
            self.requests += 1
            self.hits += hits
            self.misses += misses


_views: dict[str, ViewStats] = {}
_views_lock = threading.Lock()


def view_stats(name: str) -> ViewStats:
    """The counters of view ``name`` (made on first use)."""
    with _views_lock:
        found = _views.get(name)
        if found is None:
            found = _views[name] = ViewStats(name)
        return found


def all_view_stats() -> list[ViewStats]:
    """The counters of every view that served a request, by name."""
    with _views_lock:
        return [_views[name] for name in sorted(_views)]

"""The library's view of ``txcache-agent`` without I/O: the last refresh's pins, tag-column
catalog, barrier and database, and every answer drawn from them (:class:`AgentState`),
shared by the sync :class:`~txcache._agent.AgentClient` (refreshed by a thread) and the
async :class:`~txcache.aio._agent.AsyncAgentClient` (a task).

Every DDL the agent decodes changes the ``TAGCOLUMNS`` reply (a new version, or the oldest of
its bounded list dropped), so a refresh whose reply differs from the last one counts a new
:attr:`AgentState.catalog_generation`, which tells the library to re-read its own catalog
facts. The catalog and its generation are published before the pins of the same refresh:
a transaction that sees a pin after a DDL also sees the generation that DDL started.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import logging
import math
import threading
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from txcache import _protocol as protocol
from txcache._agent_follow import is_standby
from txcache._pinset import Pin, PinSet
from txcache._protocol import Barrier, CatalogVersion, DatabaseIdentity
from txcache._resp import Command, ReplyError
from txcache._schema import TagColumns, tag_columns_at

__all__ = [
    "AgentState",
    "CommitWaits",
    "FreshPins",
    "Refreshed",
    "UsedPins",
    "agent_wait_ms",
    "answered",
    "refresh_commands",
    "refresh_result",
]

log = logging.getLogger("txcache")

Refreshed = tuple[
    list[Pin], list[CatalogVersion], Barrier, DatabaseIdentity, tuple[str, ...] | None, list[Pin]
]
"""One refresh's answers: ``PINS``, ``TAGCOLUMNS``, ``BARRIER``, ``DATABASE``, ``NODES``
(``None`` from an agent too old to answer it) and ``STANDBYPINS`` (empty when not asked, or
from an agent too old to answer it)."""

_NO_FENCE = Barrier(2**63 - 1, -1)  # before the first refresh: no snapshot is after every change


def agent_wait_ms(reply_timeout: float, wanted: float = math.inf) -> int:
    """Milliseconds a command that waits for the agent's stream (``PIN``, ``COMMITLSN``)
    may ask it to wait: ``wanted`` seconds, within half the ``reply_timeout`` — a reply
    later than that would count the agent as down."""
    return max(1, int(min(wanted, reply_timeout / 2) * 1000))


class AgentState:
    """The agent as last refreshed — pins, tag-column catalog, barrier — and every answer
    drawn from them, with no I/O: shared by the sync :class:`AgentClient` (a refresher
    thread) and the async one (:class:`txcache.aio._agent.AsyncAgentClient`, a task)."""

    def __init__(self, refresh_interval: float, *, replicas: Iterable[str] = ()) -> None:
        """Nothing known yet: no pins, no catalog, no barrier. ``replicas`` names the hot
        standbys the library may run misses on (the ``replicas`` setting): a refresh also
        asks the agent's pins on standbys, and lists those of these."""
        self.refresh_interval = refresh_interval
        self.replicas = frozenset(replicas)
        self._standbys_seen: set[str] = set()
        self._refreshes_with_standbys = 0
        self._list = _PinList([], [], [], float("-inf"), _NO_FENCE)
        # Pins die with the agent's pinner sessions: a list not confirmed for this long is
        # not offered, so transactions fall back to the database before reading the cache.
        self.pin_list_ttl = max(1.0, 4 * refresh_interval)
        self._catalog: list[CatalogVersion] = []
        self._catalog_through = -1
        self._catalog_from: int | None = None
        """The oldest snapshot the followed agent's catalog covers: its first listed pin."""
        self.catalog_generation = 0
        """How many times the agent's tag-column catalog changed since the first refresh;
        a change means DDL happened (or the agent restarted)."""
        self.database: DatabaseIdentity | None = None
        """The database the agent's stream decodes, as of the last refresh (``None``
        before the first): only its results are ever invalidated."""
        self.followed: str | None = None
        """The address of the agent the last refresh's replies came from (``None`` before
        the first): with several agents, the active one."""
        self.members: tuple[str, ...] | None = None
        """The cache nodes the followed agent feeds (``NODES``), as of the last refresh;
        ``None`` before the first, or from an agent too old to say. A new tuple only when
        they changed, so that a ring can tell by identity whether it still follows them."""
        self.fingerprints = False
        """Whether the followed agent runs without DDL triggers (``--ddl-tracking
        fingerprint``): its pins carry catalog fingerprints, and values wait for one to
        verify them before they are stored (:mod:`txcache._pending_stores`)."""
        self._used = UsedPins()
        self._used_lock = threading.Lock()
        self.fresh_pins = FreshPins()
        """Whether a ``PIN`` is asked for now (not after one that failed, for a while)."""
        self.commit_waits = CommitWaits()
        """Whether a ``COMMITLSN`` is waited for now (not after one that timed out, for a
        while)."""

    def note_used(self, ts: int, *, standby: bool = False) -> None:
        """A transaction ran at the pin at commit point ``ts`` (a standby's, with
        ``standby``): the next refresh renews its lease (the agent lets go of a pin nobody
        uses, which frees the vacuum horizon)."""
        with self._used_lock:
            (self._used.standby if standby else self._used.primary).add(ts)

    def take_used(self) -> UsedPins:
        """The pins used since the last call, for a refresh to report."""
        with self._used_lock:
            used, self._used = self._used, UsedPins()
        return used

    def give_back_used(self, used: UsedPins) -> None:
        """Pins :meth:`take_used` gave to a refresh that failed: the next one reports them."""
        with self._used_lock:
            self._used.primary |= used.primary
            self._used.standby |= used.standby

    def pin_set(self, *, staleness: float, not_before: int | None, now: float) -> PinSet:
        """The pin set a transaction begins with: :meth:`pins` and ★, built by slicing the
        sorted list (two binary searches), not by filtering it."""
        listed = self._list  # read once: the refresher replaces it whole
        start = self._window(listed, staleness, not_before, now)
        return PinSet.from_sorted(listed.pins[start:], listed.timestamps[start:])

    def _window(
        self, listed: _PinList, staleness: float, not_before: int | None, now: float
    ) -> int:
        """Where the pins fresh enough for a transaction start in ``listed``."""
        if time.monotonic() - listed.refreshed_at > self.pin_list_ttl:
            return len(listed.pins)
        return max(
            bisect.bisect_left(listed.known_current, now - staleness),
            bisect.bisect_left(listed.timestamps, not_before or 0),
        )

    def pins(self, *, staleness: float, not_before: int | None, now: float) -> list[Pin]:
        """The listed pins known current within ``staleness`` seconds of ``now`` and not
        older than the ``not_before`` timestamp; none when the list was not confirmed by
        the agent within :attr:`pin_list_ttl` seconds."""
        listed = self._list
        return listed.pins[self._window(listed, staleness, not_before, now) :]

    def listed_pins(self) -> list[Pin]:
        """Every pin of the last refresh, oldest first (whatever its age)."""
        return self._list.pins

    def covers(self, ts: int) -> bool:
        """Whether the catalog of the last refresh covers snapshot ``ts``: at or after the
        first pin the followed agent listed, and not after its newest (a newer fresh pin
        has the caller refresh first)."""
        return self._catalog_from is not None and self._catalog_from <= ts <= self._catalog_through

    def columns_at(self, ts: int) -> tuple[bool, TagColumns | None]:
        """``(True, columns)`` in force at ``ts`` if :meth:`covers` it, else ``(False,
        None)`` (the caller uses wildcards)."""
        if not self.covers(ts):
            return False, None
        return True, tag_columns_at(self._catalog, ts)

    def schema_barrier(self, position: int) -> int | None:
        """The newest schema change (or ``TRUNCATE``) the agent decoded, once its stream has
        passed ``position`` — it then knows every one committed below — as of the last
        refresh; ``None`` until then."""
        barrier, decoded = self._list.fence
        return barrier if decoded >= position else None

    def newest_barrier(self) -> int | None:
        """The newest schema change (or ``TRUNCATE``) the agent had decoded at the last
        refresh; ``None`` before the first."""
        barrier, decoded = self._list.fence
        return None if decoded < 0 else barrier

    def _publish(
        self,
        listed: list[Pin],
        catalog: list[CatalogVersion],
        fence: Barrier,
        database: DatabaseIdentity,
        members: tuple[str, ...] | None = None,
        standby_pins: Sequence[Pin] = (),
        *,
        source: str,
    ) -> None:
        """Make one refresh's replies (``PINS``, ``TAGCOLUMNS``, ``BARRIER``, ``DATABASE``,
        ``NODES``, ``STANDBYPINS``), from the agent at ``source``, current; the caller
        serializes refreshes."""
        if source != self.followed:
            # Another agent (a standby that took over): what the previous one's catalog
            # covered says nothing of this one's, which may not have decoded as far yet.
            self._catalog_through = -1
            self._catalog_from = None
            self.followed = source
        # Before the pins: a transaction that finds a pin also finds whose database it is.
        self.database = database
        if members is not None and members != self.members:
            log.info("txcache: the agent feeds the cache nodes %s", ", ".join(members) or "none")
            self.members = members
        pins = self._merged(listed, standby_pins)
        # The catalog first: whoever reads a pin of this refresh must find the catalog
        # (and generation) that covers it, not the previous one.
        if catalog != self._catalog:
            self._catalog = catalog
            self.catalog_generation += 1
        if listed:
            self.fingerprints = listed[-1].fingerprint is not None
            # PINS was asked before TAGCOLUMNS, STANDBYPINS after: only the primary's pins
            # are known to be covered.
            self._catalog_through = max(self._catalog_through, max(pin.ts for pin in listed))
        if pins and self._catalog_from is None:
            # Its catalog speaks for its own pins: a snapshot older than the first it
            # listed may come from the agent before it (wildcard tags).
            self._catalog_from = pins[0].ts
        # A pin stops being current when the next is taken, so current_as_of grows along
        # the list; the minimum of each suffix keeps the search sound even if it did not
        # (a pin is then left out, never a stale one let in).
        suffix_min = itertools.accumulate((pin.current_as_of for pin in reversed(pins)), min)
        known_current = list(suffix_min)[::-1]
        timestamps = [pin.ts for pin in pins]
        self._list = _PinList(pins, timestamps, known_current, time.monotonic(), fence)

    def _check_replica_names(self, standby_pins: Sequence[Pin]) -> None:
        """Say once, as an error, which names of the ``replicas`` setting the agent has not
        listed a pin of in :data:`_NAMES_CHECKED_AFTER` refreshes that listed standby pins:
        a name the agent's ``--standby`` spells otherwise gets no misses, silently."""
        if not self.replicas or not standby_pins:
            return
        self._standbys_seen.update(pin.server for pin in standby_pins if pin.server)
        self._refreshes_with_standbys += 1
        if self._refreshes_with_standbys != _NAMES_CHECKED_AFTER:
            return
        unknown = sorted(self.replicas - self._standbys_seen)
        if unknown:
            log.error(
                "txcache: the replicas setting names standby(s) %s, but the agent pins only "
                "%s: no miss runs there. Name each standby as the agent's --standby NAME=DSN "
                "does",
                ", ".join(unknown),
                ", ".join(sorted(self._standbys_seen)),
            )

    def _merged(self, listed: Sequence[Pin], standby_pins: Sequence[Pin]) -> list[Pin]:
        """The primary's pins and those of the standbys this library runs misses on, one
        per commit point, sorted: where a standby has a pin at a primary pin's commit
        point, the standby's is listed, with the primary's as its
        :attr:`~txcache._pinset.Pin.fallback`."""
        self._check_replica_names(standby_pins)
        primary = {pin.ts: pin for pin in listed}
        by_ts = dict(primary)
        for pin in standby_pins:
            if pin.server not in self.replicas:
                continue
            other = by_ts[pin.ts].server if pin.ts in by_ts else None
            if other is not None and _share(other, pin.ts) < _share(pin.server or "", pin.ts):
                continue
            fallback = primary.get(pin.ts)
            # One commit point: the state was current when either pin says it was.
            current = max(pin.current_as_of, fallback.current_as_of if fallback else 0.0)
            by_ts[pin.ts] = dataclasses.replace(pin, fallback=fallback, current_as_of=current)
        return [by_ts[ts] for ts in sorted(by_ts)]


_NAMES_CHECKED_AFTER = 20
"""Refreshes listing standby pins after which a ``replicas`` name never among them is said
to be none of the agent's (a standby down for a while lists none meanwhile)."""


def _share(server: str, ts: int) -> int:
    """Which of the standbys with a pin at commit point ``ts`` the set lists: the lowest
    value wins. Standbys pinned together often show one commit point; a hash of both
    spreads those points over them, so that each keeps its share of the misses."""
    return zlib.crc32(f"{server}@{ts}".encode())


FIRST_FRESH_PAUSE = 0.25
"""Seconds no fresh pin is asked for after the agent could not give one."""
LONGEST_FRESH_PAUSE = 5.0
"""The longest such pause while the agent keeps failing to give one."""


class _Pause:
    """A pause that starts at :data:`FIRST_FRESH_PAUSE` seconds and doubles to
    :data:`LONGEST_FRESH_PAUSE` while what it follows keeps failing. Thread-safe."""

    def __init__(self) -> None:
        self._until = 0.0
        self._pause = 0.0
        self._lock = threading.Lock()

    def over(self, now: float) -> bool:
        """Whether it is over at ``now`` (``time.monotonic()``)."""
        return now >= self._until

    def lengthen(self, now: float) -> float | None:
        """A failure at ``now``: the pause starts, or doubles; its length if it started."""
        with self._lock:
            first = self._pause == 0.0
            pause = self._pause = min(max(FIRST_FRESH_PAUSE, 2 * self._pause), LONGEST_FRESH_PAUSE)
            self._until = now + pause
        return pause if first else None

    def end(self) -> None:
        """A success: the next failure starts the pause anew."""
        if self._pause:
            with self._lock:
                self._pause = 0.0


class FreshPins:
    """Whether to ask the agent for a fresh pin (★) now. After one it could not give — its
    stream behind (PostgreSQL holds a logical stream back while a standby named in
    ``synchronized_standby_slots`` does not confirm), PostgreSQL unreachable — none is
    asked for :data:`FIRST_FRESH_PAUSE` seconds, doubling to :data:`LONGEST_FRESH_PAUSE`
    while it keeps failing: meanwhile transactions take the newest listed pin, as when a
    ``PIN`` fails, instead of each waiting out a ``PIN`` of its own. Thread-safe."""

    def __init__(self) -> None:
        """Fresh pins wanted."""
        self._pause = _Pause()

    def wanted(self, now: float) -> bool:
        """Whether to send ``PIN`` at ``now`` (``time.monotonic()``)."""
        return self._pause.over(now)

    def result(self, reply: Pin | ReplyError | None, now: float) -> Pin | None:
        """What a ``PIN`` reply gives: the pin, or ``None``. An error reply starts or
        lengthens the pause (logged as it starts); a standby's is not logged (the next
        refresh finds the active agent, and says so), nor is no reply (an agent down: its
        endpoint stops calling it)."""
        if isinstance(reply, Pin):
            self._pause.end()
            return reply
        if reply is None or is_standby(reply):
            return None
        pause = self._pause.lengthen(now)
        if pause is not None:
            log.warning(
                "the agent could not take a fresh pin: %s; transactions use the listed pins "
                "(none is asked for %.2f s, longer while this lasts)",
                reply,
                pause,
            )
        return None


class CommitWaits:
    """Whether to wait for the agent's stream to decode a commit (``COMMITLSN``) now. After
    a wait that timed out — the stream stalled: its walsender stopped, PostgreSQL holding it
    back — none is waited for :data:`FIRST_FRESH_PAUSE` seconds, doubling to
    :data:`LONGEST_FRESH_PAUSE` while it keeps timing out: meanwhile a commit's token is the
    WAL position read after it (as safe, possibly newer than needed), instead of every
    write waiting out a ``COMMITLSN`` of its own. Thread-safe."""

    def __init__(self) -> None:
        """Waits wanted."""
        self._pause = _Pause()

    def wanted(self, now: float) -> bool:
        """Whether to send ``COMMITLSN`` at ``now`` (``time.monotonic()``)."""
        return self._pause.over(now)

    def result(self, reply: int | ReplyError | None, now: float) -> int | None:
        """What a ``COMMITLSN`` reply gives: the commit LSN, or ``None``. ``-TIMEOUT``
        starts or lengthens the pause (logged as it starts); ``-NOTDECODED`` (a commit the
        stream has nothing of) and no reply (an agent down) do not."""
        if isinstance(reply, int):
            self._pause.end()
            return reply
        if not (isinstance(reply, ReplyError) and str(reply).startswith("TIMEOUT")):
            return None
        pause = self._pause.lengthen(now)
        if pause is not None:
            log.warning(
                "the agent's stream did not decode a commit in time (%s): commit tokens are "
                "the WAL position after the commit (no commit is waited for %.2f s, longer "
                "while this lasts)",
                reply,
                pause,
            )
        return None


def refresh_result(replies: Sequence[Any]) -> Refreshed | None:
    """The replies to ``PINS``, ``TAGCOLUMNS``, ``BARRIER``, ``DATABASE``, ``NODES`` and
    ``STANDBYPINS`` if asked (each as the endpoints return it), or ``None`` when one of the
    first four is missing or an error; an error to ``NODES`` (an agent from before it)
    leaves the nodes unknown, and one to ``STANDBYPINS`` lists no standby pins."""
    # The sync client stops asking at the first reply that is not an answer.
    if len(replies) < 4 or not all(map(answered, replies[:4])):
        return None
    listed, catalog, fence, database, *rest = replies
    members = rest[0] if rest and answered(rest[0]) else None
    standby_pins = rest[1] if len(rest) > 1 and answered(rest[1]) else []
    return listed, catalog, fence, database, members, standby_pins


def answered(reply: Any) -> bool:
    """Whether an endpoint's ``reply`` is an answer (not ``None`` for a server down, not an
    error reply)."""
    return reply is not None and not isinstance(reply, ReplyError)


def refresh_commands(used: UsedPins, *, replicas: bool = False) -> tuple[Command[Any], ...]:
    """What a refresh asks, in this order: ``PINS`` (renewing the pins ``used``, on the
    primary and the standbys), then ``TAGCOLUMNS``, so that the catalog covers every listed
    pin, ``BARRIER``, ``DATABASE``, ``NODES`` and, with ``replicas``, ``STANDBYPINS`` (a
    standby's pin newer than the primary's newest is not covered by the catalog: its
    queries' tags are wildcards), saying ``WANTED`` when a transaction ran since the last
    refresh."""
    commands = (
        protocol.pins(used.primary),
        protocol.tag_columns(),
        protocol.barrier(),
        protocol.database(),
        protocol.nodes(),
    )
    if not replicas:
        return commands
    # Transactions that ran on the primary for want of a standby pin want one too.
    wanted = bool(used.primary or used.standby)
    return (*commands, protocol.standby_pins(used.standby, wanted=wanted))


@dataclass
class UsedPins:
    """The commit points of the pins transactions ran at since the last refresh: the
    primary's (``PINS used``) and the standbys' (``STANDBYPINS used``), apart, since one
    commit point can name a pin on each and only the one used should be kept."""

    primary: set[int] = field(default_factory=set)
    standby: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class _PinList:
    """One refresh's pins, published in one assignment so that readers never mix two."""

    pins: list[Pin]
    timestamps: list[int]
    known_current: list[float]
    """Per pin, the least ``current_as_of`` from it to the end of the list."""
    refreshed_at: float
    fence: Barrier
    """``BARRIER``: the newest schema change or ``TRUNCATE`` decoded, and the decoded end."""

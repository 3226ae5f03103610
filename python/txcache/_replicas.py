"""Which hot standbys (the ``replicas`` setting) a read-only transaction may run its misses
on now. A standby that failed — no connection within ``node_timeout``, no answer within
``replica_timeout``, a session that differs from the primary's — is *down*: no transaction
tries it again until a probe in the background (a daemon thread, in both drivers) finds
it answering, after 1 s and then at doubling intervals up to 30 s. So a standby that hangs
costs the transactions in flight on it one ``replica_timeout``, once, and nothing after.

A standby's pins come from the agent (``STANDBYPINS``), each certified at the commit point
its replay had reached (docs/library.md, "Misses on standbys"); this decides only whether
the library tries to use them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

import psycopg

from txcache._replica_connection import ReplicaConnection

__all__ = ["ReplicaHealth", "answers"]

log = logging.getLogger("txcache")

FIRST_PAUSE = 1.0
"""Seconds from a standby's failure to the first probe."""
LONGEST_PAUSE = 30.0
"""The most seconds between probes of a standby that stays down."""
MISSING_IN_A_ROW = 20
MISSING_FOR = 2.0
"""Pins of a standby in a row whose snapshot the server does not have, none imported, over
at least as many seconds, after which it counts as down: the server is not the one the
agent pins (the primary, or another standby), a setting to fix — not pins that went with
an agent's term, which the next refreshes (every 0.25 s) replace."""

Probe = Callable[[str], "str | None"]
"""Asks the standby at a connection string whether it answers: ``None`` if it does, else
why not."""


class ReplicaHealth:
    """Per standby: whether it may be tried now; one that failed is probed in the
    background until it answers. Thread-safe."""

    def __init__(
        self,
        replicas: tuple[tuple[str, str], ...],
        probe: Probe,
        *,
        first_pause: float = FIRST_PAUSE,
        missing_for: float = MISSING_FOR,
    ) -> None:
        """Every standby of ``replicas`` (``(name, connection string)`` pairs) usable;
        ``probe`` asks one that failed whether it answers again."""
        self._missing_for = missing_for
        self._missing_since: dict[str, float] = {}
        self._dsn = dict(replicas)
        self._probe = probe
        self._first_pause = first_pause
        self._pause = dict.fromkeys(self._dsn, 0.0)
        self._down: set[str] = set()
        self._outages = dict.fromkeys(self._dsn, 0)
        self._missing = dict.fromkeys(self._dsn, 0)
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def usable(self, name: str) -> bool:
        """Whether ``name`` is a standby of the setting that is not down."""
        return name in self._dsn and name not in self._down

    def outages(self, name: str) -> int:
        """How many times ``name`` has gone down: a connection to it made before the last
        time is not used (a standby that restarted closed its end)."""
        return self._outages.get(name, 0)

    def any_down(self) -> bool:
        """Whether some standby is down (a transaction then leaves its pins out)."""
        return bool(self._down)

    def failed(self, name: str, why: str) -> None:
        """``name`` could not serve a transaction: it is down until a probe finds it
        answering (logged once, not for every transaction in flight that finds it so)."""
        with self._lock:
            if name in self._down:
                return
            self._down.add(name)
            self._outages[name] += 1
            pause = min(max(self._first_pause, 2 * self._pause[name]), LONGEST_PAUSE)
            self._pause[name] = pause
        log.warning(
            "txcache: standby %s cannot serve misses (%s); they run on the primary until it "
            "answers a probe (the first in %.0f s)",
            name,
            why,
            pause,
        )
        threading.Thread(
            target=self._probe_until_up, args=(name,), name=f"txcache-probe-{name}", daemon=True
        ).start()

    def served(self, name: str) -> None:
        """``name`` served a transaction: its next failure starts the pauses anew."""
        if self._pause.get(name) or self._missing.get(name):
            with self._lock:
                self._pause[name] = 0.0
                self._missing[name] = 0

    def snapshot_missing(self, name: str) -> None:
        """A pin of ``name`` named no snapshot there (it went, or the server is not the one
        the agent pins): after :data:`MISSING_IN_A_ROW` in a row, ``name`` is down, saying
        why once, instead of every transaction trying its pins first."""
        now = time.monotonic()
        with self._lock:
            self._missing[name] = missing = self._missing.get(name, 0) + 1
            if missing == 1:
                self._missing_since[name] = now
            since = self._missing_since[name]
            if missing < MISSING_IN_A_ROW or now - since < self._missing_for:
                return
            self._missing[name] = 0
        self.failed(
            name,
            f"{missing} of its pins in a row over {now - since:.0f} s named no snapshot "
            f"there: is replicas[{name!r}] the server the agent's --standby {name}=… names, "
            "not the primary or another standby?",
        )

    def close(self) -> None:
        """Stop probing (the cache is closing)."""
        self._closed.set()

    def _probe_until_up(self, name: str) -> None:
        while not self._closed.wait(self._pause[name]):
            why = self._probe(self._dsn[name])
            if why is None:
                with self._lock:
                    self._down.discard(name)
                log.info("txcache: standby %s answers again: misses may run on it", name)
                return
            with self._lock:
                self._pause[name] = min(2 * self._pause[name], LONGEST_PAUSE)
            log.debug("txcache: standby %s still cannot serve misses (%s)", name, why)


def answers(dsn: str, timeout: float) -> str | None:
    """``None`` when the standby at ``dsn`` accepts a connection and answers a query, each
    within ``timeout`` seconds (libpq's connect timeout is whole seconds, at least 2);
    otherwise why not."""
    try:
        with ReplicaConnection.connect(
            dsn, autocommit=True, connect_timeout=max(2, math.ceil(timeout))
        ) as connection:
            connection.answer_timeout = timeout
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        return str(error).strip() or type(error).__name__
    return None

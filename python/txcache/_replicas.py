"""Which hot standbys (the ``replicas`` setting) a read-only transaction may run its misses
on now: one that failed — no connection within ``node_timeout``, a session that differs
from the primary's — is passed over for a while, doubling up to a limit, and tried again
after (no I/O here: the drivers connect).

A standby's pins come from the agent (``STANDBYPINS``), each certified at the commit point
its replay had reached (docs/library.md, "Misses on standbys"); this decides only whether
the library tries to use them.
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["ReplicaHealth"]

log = logging.getLogger("txcache")

FIRST_PAUSE = 1.0
"""Seconds a standby is passed over after its first failure."""
LONGEST_PAUSE = 30.0
"""The most seconds a standby is passed over after repeated failures."""


class ReplicaHealth:
    """Per standby name: whether it may be tried now, and how long it is passed over after
    a failure. Thread-safe."""

    def __init__(self, names: tuple[str, ...]) -> None:
        """Every standby in ``names`` usable."""
        self._until = dict.fromkeys(names, 0.0)
        self._pause = dict.fromkeys(names, 0.0)
        self._lock = threading.Lock()

    def usable(self, name: str) -> bool:
        """Whether ``name`` is a standby of the setting that has not failed lately."""
        until = self._until.get(name)
        return until is not None and time.monotonic() >= until

    def failed(self, name: str, why: str) -> None:
        """``name`` could not serve a transaction: pass it over for a while (logged when it
        starts to be passed over, not for every transaction that finds it so)."""
        with self._lock:
            pause = min(max(FIRST_PAUSE, 2 * self._pause[name]), LONGEST_PAUSE)
            self._pause[name] = pause
            self._until[name] = time.monotonic() + pause
        log.warning(
            "txcache: standby %s cannot serve misses (%s); they run on the primary for %.0f s",
            name,
            why,
            pause,
        )

    def served(self, name: str) -> None:
        """``name`` served a transaction: its next failure starts the pauses anew."""
        if self._pause.get(name):
            with self._lock:
                self._pause[name] = 0.0

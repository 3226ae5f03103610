"""The library's view of ``txcache-agent``: live pins, fresh pins, commit LSNs, tag columns
(the commands and their replies are :mod:`txcache._protocol`'s).

A background thread refreshes the pin list, the tag-column catalog, the schema barrier and
the database the agent follows every ``refresh_interval`` (``PINS``, ``TAGCOLUMNS``,
``BARRIER``, then ``DATABASE``), so beginning a transaction costs no round trip. Because
``TAGCOLUMNS`` is asked after ``PINS``, the catalog covers every listed pin: a DDL at or
before a pin's timestamp was decoded before that pin was certified. A snapshot newer than
what the catalog covers (a fresh ★ pin) refreshes it synchronously first.

When the agent is unreachable the list stops moving: pins age out of every staleness limit,
transactions fall back to the database, and nothing raises. With several agents (one
active, the others standbys) requests go to the active one, and a refresh that finds it
unreachable or a standby asks the others and follows the first that answers
(:class:`~txcache._agent_follow.Follower`).

What the replies mean and every answer drawn from them live in
:class:`~txcache._agent_state.AgentState` (no I/O), which the async client shares;
:class:`AgentClient` adds the sync transport and the thread. Hand-written: a thread here, a
task there, and the refresh's commands one after the other here, pipelined there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from txcache import _protocol as protocol
from txcache._agent_follow import Follower, agent_addresses
from txcache._agent_state import (
    AgentState,
    Refreshed,
    UsedPins,
    agent_wait_ms,
    answered,
    refresh_commands,
    refresh_result,
)
from txcache._pinset import Pin
from txcache._resp import Endpoint
from txcache._schema import TagColumns

__all__ = ["AgentClient"]

log = logging.getLogger("txcache")


class AgentClient(AgentState):
    """Pins and catalog versions from the active one of the agents named, refreshed by a
    background thread."""

    def __init__(
        self,
        address: str | Sequence[str],
        *,
        password: str | None = None,
        tls_ca: str | None = None,
        refresh_interval: float = 0.25,
        timeout: float = 2.0,
        housekeeping: Callable[[], None] | None = None,
        housekeeping_interval: float = 0.25,
        replicas: Iterable[str] = (),
    ) -> None:
        """Starts the refresher thread at once; :meth:`close` stops it. After each refresh
        it also runs ``housekeeping`` (the cache's: it ends parked database transactions
        too old to keep and reads the nodes' replies to stores not waited for), and
        between refreshes every ``housekeeping_interval`` seconds. ``address`` names one
        agent, or several (comma-separated, or one string each): the first is followed
        until a refresh finds another active."""
        super().__init__(refresh_interval, replicas=replicas)
        self._housekeeping = housekeeping
        self._wake_interval = refresh_interval
        if housekeeping is not None:
            self._wake_interval = min(refresh_interval, housekeeping_interval)
        self._follower = Follower(agent_addresses(address))
        self.endpoints = tuple(
            Endpoint(each, role="agent", password=password, timeout=timeout, tls_ca=tls_ca)
            for each in self._follower.addresses
        )
        """One endpoint per agent, in the order named."""
        self._lock = threading.Lock()
        self._refreshed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txcache-agent-refresh", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> Endpoint:
        """The active agent's endpoint, which requests go to."""
        return self.endpoints[self._follower.active]

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the first refresh answered; ``False`` if it did not within
        ``timeout``."""
        return self._refreshed.wait(timeout)

    def pin_now(self) -> Pin | None:
        """A freshly taken, certified pin (★); ``None`` if the agent cannot give one (or
        could not lately: :class:`~txcache._agent_state.FreshPins`)."""
        if not self.fresh_pins.wanted(time.monotonic()):
            return None
        reply = self.endpoint.run(protocol.pin(agent_wait_ms(self.endpoint.timeout)))
        pin = self.fresh_pins.result(reply, time.monotonic())
        if pin is not None and not self.covers(pin.ts):
            self.refresh()
        return pin

    def commit_lsn(self, xid: int, timeout: float = 1.0, upto: int | None = None) -> int | None:
        """The commit LSN of transaction ``xid``, once decoded; ``None`` if the agent cannot
        say within ``timeout`` seconds, or (``upto``: a WAL position at or after the commit)
        as soon as its stream passed ``upto`` without it; at once after a wait that timed
        out, for a while (:class:`~txcache._agent_state.CommitWaits`)."""
        if not self.commit_waits.wanted(time.monotonic()):
            return None
        timeout_ms = agent_wait_ms(self.endpoint.timeout, timeout)
        command = protocol.commit_lsn(xid, timeout_ms=timeout_ms, upto=upto)
        reply = self.endpoint.run(command)
        return self.commit_waits.result(reply, time.monotonic())

    def tag_columns(self, ts: int) -> tuple[bool, TagColumns | None]:
        """The tag-column version in force at snapshot ``ts``: ``(True, columns)``, or
        ``(False, None)`` when the catalog cannot be known to cover ``ts`` (use wildcards)."""
        if not self.covers(ts):
            self.refresh()
        return self.columns_at(ts)

    def refresh(self) -> bool:
        """Fetch pins and catalog now from the active agent; ``False`` if no agent
        answered."""
        if not any(endpoint.is_up() for endpoint in self.endpoints):
            return False
        with self._lock:
            used = self.take_used()
            found = self._first_answer(used)
            if found is None:
                self.give_back_used(used)
                return False
            index, result = found
            self._follower.adopt(index)
            self._publish(*result, source=self._follower.address)
        self._refreshed.set()
        return True

    def close(self) -> None:
        """Stop the refresher and close the connections."""
        self._stop.set()
        self._thread.join(timeout=5)
        for endpoint in self.endpoints:
            endpoint.close()

    def _first_answer(self, used: UsedPins) -> tuple[int, Refreshed] | None:
        """The first agent, in the :class:`~txcache._agent_follow.Follower`'s order, to
        answer every command of a refresh renewing ``used``, and its answers; ``None`` when
        none did (the follower says how far to go)."""
        for index in self._follower.order():
            replies = self._ask(self.endpoints[index], used)
            result = refresh_result(replies)
            if result is not None:
                return index, result
            if not self._follower.goes_on(index, replies):
                return None
        return None

    def _ask(self, endpoint: Endpoint, used: UsedPins) -> list[Any]:
        """One agent's replies to a refresh, asked one after the other, stopping at the
        first that is not an answer (then the last)."""
        replies: list[Any] = []
        for command in refresh_commands(used, replicas=bool(self.replicas)):
            replies.append(endpoint.run(command))
            if not answered(replies[-1]):
                break
        return replies

    def _run(self) -> None:
        due = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= due:
                try:
                    self.refresh()
                except Exception:  # the refresher must never die: log and go on
                    log.exception("txcache: refreshing pins from the agent failed")
                due = time.monotonic() + self.refresh_interval
            if self._housekeeping is not None:
                try:
                    self._housekeeping()
                except Exception:
                    log.exception("txcache: the cache's housekeeping failed")
            self._stop.wait(self._wake_interval)

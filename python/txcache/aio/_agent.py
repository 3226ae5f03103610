"""The agent for the async library: the same pin list, catalog and barrier as the sync
client (:class:`~txcache._agent.AgentState`, every decision shared), refreshed by a task
instead of a thread. A refresh is one round trip: ``PINS``, ``TAGCOLUMNS``, ``BARRIER`` and
``DATABASE`` pipelined in that order (the agent answers them in order, so the catalog still
covers every listed pin). With several agents it goes to the active one, and to the others
only when that one is unreachable or a standby (:class:`~txcache._agent_follow.Follower`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from txcache import _protocol as protocol
from txcache._agent_follow import Follower, agent_addresses
from txcache._agent_state import (
    AgentState,
    Refreshed,
    UsedPins,
    agent_wait_ms,
    refresh_commands,
    refresh_result,
)
from txcache._pinset import Pin
from txcache._resp import read_reply
from txcache._schema import TagColumns
from txcache.aio._resp import AsyncEndpoint

__all__ = ["AsyncAgentClient"]

log = logging.getLogger("txcache")


class AsyncAgentClient(AgentState):
    """Pins and catalog versions from the active one of the agents named, refreshed by a
    task of the running loop (:meth:`start`; :meth:`close` stops it)."""

    def __init__(
        self,
        address: str | Sequence[str],
        *,
        password: str | None = None,
        tls_ca: str | None = None,
        refresh_interval: float = 0.25,
        timeout: float = 2.0,
        housekeeping: Callable[[], Awaitable[None]] | None = None,
        housekeeping_interval: float = 0.25,
        replicas: Iterable[str] = (),
    ) -> None:
        """Nothing runs until :meth:`start`. After each refresh the task also awaits
        ``housekeeping`` (the cache's: it ends parked database transactions too old to keep
        and reads the nodes' replies to stores not waited for), and between refreshes every
        ``housekeeping_interval`` seconds. ``address`` names one agent, or several
        (comma-separated, or one string each): the first is followed until a refresh finds
        another active."""
        super().__init__(refresh_interval, replicas=replicas)
        self._housekeeping = housekeeping
        self._wake_interval = refresh_interval
        if housekeeping is not None:
            self._wake_interval = min(refresh_interval, housekeeping_interval)
        self._follower = Follower(agent_addresses(address))
        # Not multiplexed: PIN and COMMITLSN wait on the agent, and would hold the replies
        # of a refresh pipelined behind them.
        self.endpoints = tuple(
            AsyncEndpoint(
                each,
                role="agent",
                password=password,
                timeout=timeout,
                multiplex=False,
                tls_ca=tls_ca,
            )
            for each in self._follower.addresses
        )
        """One endpoint per agent, in the order named."""
        self._refreshing = asyncio.Lock()
        self._refreshed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def endpoint(self) -> AsyncEndpoint:
        """The active agent's endpoint, which requests go to."""
        return self.endpoints[self._follower.active]

    def start(self) -> None:
        """Start the refresher task on the running loop."""
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="txcache-agent-refresh"
        )

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until the first refresh answered; ``False`` if it did not within
        ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                await self._refreshed.wait()
        except TimeoutError:
            return False
        return True

    async def pin_now(self) -> Pin | None:
        """A freshly taken, certified pin (★); ``None`` if the agent cannot give one (or
        could not lately: :class:`~txcache._agent_state.FreshPins`)."""
        if not self.fresh_pins.wanted(time.monotonic()):
            return None
        reply = await self.endpoint.run(protocol.pin(agent_wait_ms(self.endpoint.timeout)))
        pin = self.fresh_pins.result(reply, time.monotonic())
        if pin is not None and not self.covers(pin.ts):
            await self.refresh()
        return pin

    async def commit_lsn(
        self, xid: int, timeout: float = 1.0, upto: int | None = None
    ) -> int | None:
        """The commit LSN of transaction ``xid``, once decoded
        (:meth:`txcache._agent.AgentClient.commit_lsn`)."""
        if not self.commit_waits.wanted(time.monotonic()):
            return None
        timeout_ms = agent_wait_ms(self.endpoint.timeout, timeout)
        command = protocol.commit_lsn(xid, timeout_ms=timeout_ms, upto=upto)
        reply = await self.endpoint.run(command)
        return self.commit_waits.result(reply, time.monotonic())

    async def tag_columns(self, ts: int) -> tuple[bool, TagColumns | None]:
        """The tag-column version in force at snapshot ``ts``, as the sync client's
        :meth:`~txcache._agent.AgentClient.tag_columns`."""
        if not self.covers(ts):
            await self.refresh()
        return self.columns_at(ts)

    async def refresh(self) -> bool:
        """Fetch pins, catalog and barrier now (one round trip to the active agent); ``False``
        if no agent answered."""
        if not any(endpoint.is_up() for endpoint in self.endpoints):
            return False
        # One refresh at a time: an older reply published after a newer one would undo it.
        async with self._refreshing:
            used = self.take_used()
            found = await self._first_answer(used)
            if found is None:
                self.give_back_used(used)
                return False
            index, result = found
            self._follower.adopt(index)
            self._publish(*result, source=self._follower.address)
        self._refreshed.set()
        return True

    async def _first_answer(self, used: UsedPins) -> tuple[int, Refreshed] | None:
        """The first agent, in the :class:`~txcache._agent_follow.Follower`'s order, to
        answer every command of a refresh renewing ``used``, and its answers; ``None`` when
        none did (the follower says how far to go)."""
        for index in self._follower.order():
            replies = await self._ask(self.endpoints[index], used)
            result = None if replies is None else refresh_result(replies)
            if result is not None:
                return index, result
            if not self._follower.goes_on(index, replies):
                return None
        return None

    async def _ask(self, endpoint: AsyncEndpoint, used: UsedPins) -> list[Any] | None:
        """One agent's decoded replies to a refresh, in one round trip; ``None`` if it did
        not answer."""
        commands = refresh_commands(used, replicas=bool(self.replicas))
        raw = await endpoint.pipeline([command.arguments for command in commands])
        if raw is None:
            return None
        return [read_reply(c, r) for c, r in zip(commands, raw, strict=True)]

    async def close(self) -> None:
        """Stop the refresher and close the connections."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})  # not `await task`: its cancellation is not ours
        for endpoint in self.endpoints:
            endpoint.close()

    async def _run(self) -> None:
        due = 0.0
        while True:
            if time.monotonic() >= due:
                try:
                    await self.refresh()
                except Exception:  # the refresher must never die: log and go on
                    log.exception("txcache: refreshing pins from the agent failed")
                due = time.monotonic() + self.refresh_interval
            if self._housekeeping is not None:
                try:
                    await self._housekeeping()
                except Exception:
                    log.exception("txcache: the cache's housekeeping failed")
            await asyncio.sleep(self._wake_interval)

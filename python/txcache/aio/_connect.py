"""Making an :class:`AsyncCache`: the async library's handle on the database
(:class:`psycopg_pool.AsyncConnectionPool`, opened by :meth:`AsyncCache.open`), the cache
nodes (one multiplexed connection each), the agent (refreshed by a task) and with
``audit_rate`` the auditor (a task), all on one event loop — and closing it. Hand-written:
this is where the drivers truly differ (the sync cache starts threads at once). What a
cache does once made is :class:`~txcache.aio._cache.AsyncCacheDriver`'s, whose sync twin
is generated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Self

import psycopg_pool

from txcache import _protocol as protocol
from txcache._agent_follow import no_answer_yet
from txcache._cache_core import gather_settings
from txcache._config import Mode, Settings
from txcache._open_caches import OpenCaches
from txcache._pinset import PinPolicy
from txcache._ring import NodeRing
from txcache._serialize import Serializer
from txcache.aio._agent import AsyncAgentClient
from txcache.aio._auditor import TaskAuditor
from txcache.aio._cache import AsyncCacheDriver
from txcache.aio._parking_watchdog import ParkingWatchdog
from txcache.aio._replica_connection import AsyncReplicaConnection

__all__ = ["AsyncCache", "connect", "default_cache", "implicit_cache", "provide_default_cache"]

log = logging.getLogger("txcache")

_open: OpenCaches[AsyncCache] = OpenCaches()


def default_cache() -> AsyncCache | None:
    """The cache implicit async transactions use (an async cacheable function called
    outside any transaction): the last one :func:`connect` made in this process and not yet
    closed (a forked child starts without one)."""
    return _open.last()


def implicit_cache() -> AsyncCache | None:
    """The cache an implicit async transaction begins in: :func:`default_cache`, else the
    one the provider a framework registered makes (:func:`provide_default_cache`)."""
    return _open.default()


def provide_default_cache(provider: Callable[[], AsyncCache] | None) -> None:
    """Have ``provider()`` make (or find) the cache of implicit async transactions while
    none is open; ``None`` forgets it."""
    _open.provider = provider


async def connect(
    dsn: str | None = None,
    *,
    nodes: str | Iterable[str] | None = None,
    agent: str | Iterable[str] | None = None,
    password: str | None = None,
    secret: str | None = None,
    mode: Mode | None = None,
    staleness: float | None = None,
    serializer: Serializer | None = None,
    pin_policy: PinPolicy | None = None,
    safe_functions: Iterable[str] = (),
    **settings: Any,
) -> AsyncCache:
    """An open :class:`AsyncCache`, configured as :func:`txcache.connect` configures the
    sync one (arguments, then ``TXCACHE_*``, then ``txcache.toml``). Its connections and
    tasks belong to the running event loop: use it there, and ``await cache.close()``."""
    given: dict[str, Any] = {"dsn": dsn, "nodes": nodes, "agent": agent, "password": password}
    given |= {"secret": secret, "mode": mode, "staleness": staleness}
    cache = AsyncCache(
        gather_settings(given, settings),
        serializer=serializer,
        pin_policy=pin_policy,
        safe_functions=safe_functions,
    )
    await cache.open()
    return cache


class AsyncCache(AsyncCacheDriver):
    """Database pool, cache nodes, agent client and settings, for ``async`` code on one
    event loop. Transactions of many tasks (one per task at a time) share it. An async
    context manager: leaving it closes everything."""

    def __init__(
        self,
        settings: Settings,
        *,
        serializer: Serializer | None = None,
        pin_policy: PinPolicy | None = None,
        safe_functions: Iterable[str] = (),
    ) -> None:
        """Prepare the cache; :meth:`open` (which :func:`connect` awaits) starts it."""
        super().__init__(
            settings, serializer=serializer, pin_policy=pin_policy, safe_functions=safe_functions
        )
        caching = self.uncached_reason is None
        nodes = [self._new_node(address) for address in settings.nodes]
        self.ring = NodeRing(nodes) if caching and nodes else None
        self.agent = self._agent(settings) if caching else None
        options = self._pool_options()
        self.pool = psycopg_pool.AsyncConnectionPool(**options, name="txcache-async", open=False)
        self.replica_pools = {
            name: psycopg_pool.AsyncConnectionPool(
                **self._pool_options(dsn),
                connection_class=AsyncReplicaConnection,
                configure=self._bound_answers,
                name=f"txcache-async-{name}",
                open=False,
            )
            for name, dsn in settings.replicas
        }
        self._background: set[asyncio.Task[Any]] = set()
        parking = self.agent is not None and settings.snapshot_hold > 0
        self._watchdog = ParkingWatchdog(self.parking, settings.dsn) if parking else None
        self._reading = asyncio.Lock()
        self._auditor = TaskAuditor(self) if self.audits else None
        self.auditor = self._auditor

    def _agent(self, settings: Settings) -> AsyncAgentClient:
        assert settings.agent is not None
        return AsyncAgentClient(
            settings.agents,
            password=settings.password,
            tls_ca=settings.tls_ca,
            timeout=settings.agent_timeout,
            refresh_interval=settings.refresh_interval,
            housekeeping=self.housekeeping,
            housekeeping_interval=settings.snapshot_hold or settings.refresh_interval,
            replicas=[name for name, _ in settings.replicas],
        )

    async def open(self) -> None:
        """Open the pool, start the agent's refresher task and wait (2 s at most) for its
        first answer; ask the nodes' ``--max-staleness`` in the background; start the
        auditor's task (with ``audit_rate``)."""
        await self.pool.open()
        for replica_pool in self.replica_pools.values():
            await replica_pool.open()  # connects in the background: a standby may be down
        if self._watchdog is not None:
            self._watchdog.start()
        if self.agent is not None:
            self.agent.start()
            if not await self.agent.wait_ready(timeout=2.0):
                log.warning("%s", no_answer_yet(self.settings.agents))
            self.follow_members()
        if self.ring is not None:
            self._spawn(self._ask_max_staleness())
        if self._auditor is not None:
            self._auditor.start()
        _open.opened(self)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)  # a reference, so that the task is not collected
        task.add_done_callback(self._background.discard)

    async def _ask_max_staleness(self) -> None:
        ring = self.ring  # the agent may name other nodes meanwhile
        if ring is None:
            return
        command = protocol.max_staleness()
        self._note_max_staleness([await node.run(command) for node in ring.nodes])

    async def close(self) -> None:
        """Stop the auditor (dropping the checks not made yet) and the agent's refresher,
        end the parked database transactions, close node connections and the pool (a block
        still running gives its connection back as it ends)."""
        _open.closed(self)
        if self.inherited():
            return  # its connections are the parent's
        self.closed = True  # a block that ends from now on gives its connection back
        if self._auditor is not None:
            await self._auditor.close()  # first: its checks use the pool, nodes and agent
        background = set(self._background)
        for task in background:
            task.cancel()
        if background:
            await asyncio.wait(background)
        if self.agent is not None:
            await self.agent.close()
        if self._watchdog is not None:
            self._watchdog.stop()
        await self.end_parked(every=True)
        self.pending_stores.drop_all()
        if self.ring is not None:
            self.ring.close()
        await self.pool.close()
        self.replica_health.close()
        for replica_pool in self.replica_pools.values():
            await replica_pool.close()

    async def _bound_answers(self, connection: AsyncReplicaConnection) -> None:
        """A standby's connection waits for an answer at most ``replica_timeout``."""
        connection.answer_timeout = self.settings.replica_timeout

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

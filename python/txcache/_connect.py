"""Making a :class:`Cache`: one application's handle on the database (its pool), the cache
nodes and the agent (refreshed by a thread), and with ``audit_rate`` the auditor (a thread)
— and closing it. Hand-written: this is where
the drivers truly differ (the async cache opens on its event loop). What a cache does once
made — its transactions, tokens, catalog reading and connections — is
:class:`~txcache._cache.CacheDriver`'s, generated from the async driver's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Self

import psycopg_pool

from txcache import _protocol as protocol
from txcache._agent import AgentClient
from txcache._agent_follow import no_answer_yet
from txcache._auditor import ThreadAuditor
from txcache._cache import CacheDriver
from txcache._cache_core import gather_settings
from txcache._config import Mode, Settings
from txcache._open_caches import OpenCaches
from txcache._pinset import PinPolicy
from txcache._replica_connection import ReplicaConnection
from txcache._ring import NodeRing
from txcache._serialize import Serializer

__all__ = ["Cache", "connect", "default_cache", "implicit_cache", "provide_default_cache"]

log = logging.getLogger("txcache")

_open: OpenCaches[Cache] = OpenCaches()


def default_cache() -> Cache | None:
    """The cache implicit transactions use: the last one :func:`connect` made in this
    process and not yet closed (a forked child starts without one)."""
    return _open.last()


def implicit_cache() -> Cache | None:
    """The cache an implicit transaction begins in: :func:`default_cache`, else the one
    the provider a framework registered makes (:func:`provide_default_cache`)."""
    return _open.default()


def provide_default_cache(provider: Callable[[], Cache] | None) -> None:
    """Have ``provider()`` make (or find) the cache of implicit transactions while no cache
    is open — a framework's process cache, connected at the first cacheable call of a
    worker or a script that never asked for it; ``None`` forgets it."""
    _open.provider = provider


def connect(
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
) -> Cache:
    """A :class:`Cache` configured by these arguments, then ``TXCACHE_*`` environment
    variables, then ``txcache.toml`` (see :mod:`txcache._config` for every setting).

    Without nodes or an agent the cache runs every transaction against the database alone.
    ``agent`` may name several agents (one active, the others standbys): the cache follows
    the active one. ``safe_functions`` names SQL functions cacheable queries may call
    (deterministic and reading no table). Raises :class:`~txcache.ConfigurationError`.
    """
    given: dict[str, Any] = {"dsn": dsn, "nodes": nodes, "agent": agent, "password": password}
    given |= {"secret": secret, "mode": mode, "staleness": staleness}
    loaded = gather_settings(given, settings)
    return Cache(
        loaded, serializer=serializer, pin_policy=pin_policy, safe_functions=safe_functions
    )


class Cache(CacheDriver):
    """Database pool, cache nodes, agent client, and the settings transactions read.

    A context manager: leaving it closes everything. Thread-safe: transactions of many
    threads (one per thread at a time) share it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        serializer: Serializer | None = None,
        pin_policy: PinPolicy | None = None,
        safe_functions: Iterable[str] = (),
    ) -> None:
        """Open the database pool and start refreshing pins (see :func:`connect`)."""
        super().__init__(
            settings, serializer=serializer, pin_policy=pin_policy, safe_functions=safe_functions
        )
        caching = self.uncached_reason is None
        nodes = [self._new_node(address) for address in settings.nodes]
        self.ring = NodeRing(nodes) if caching and nodes else None
        self.agent = self._agent(settings) if caching else None
        self.follow_members()
        if self.ring is not None:
            self._staleness_probe: threading.Thread | None = threading.Thread(
                target=self._ask_max_staleness, name="txcache-max-staleness", daemon=True
            )
            self._staleness_probe.start()
        else:
            self._staleness_probe = None
        self.pool = psycopg_pool.ConnectionPool(**self._pool_options(), name="txcache", open=True)
        self.replica_pools = {
            name: psycopg_pool.ConnectionPool(
                **self._pool_options(dsn),
                connection_class=ReplicaConnection,
                configure=self._bound_answers,
                name=f"txcache-{name}",
                open=True,
            )
            for name, dsn in settings.replicas
        }
        self._auditor = ThreadAuditor(self) if self.audits else None
        self.auditor = self._auditor
        _open.opened(self)

    def _ask_max_staleness(self) -> None:
        ring = self.ring  # the agent may name other nodes meanwhile
        if ring is None:
            return
        command = protocol.max_staleness()
        self._note_max_staleness([node.run(command) for node in ring.nodes])

    def _agent(self, settings: Settings) -> AgentClient:
        assert settings.agent is not None
        client = AgentClient(
            settings.agents,
            password=settings.password,
            tls_ca=settings.tls_ca,
            timeout=settings.agent_timeout,
            refresh_interval=settings.refresh_interval,
            housekeeping=self.housekeeping,
            housekeeping_interval=settings.snapshot_hold or settings.refresh_interval,
            replicas=[name for name, _ in settings.replicas],
        )
        if not client.wait_ready(timeout=2.0):
            log.warning("%s", no_answer_yet(settings.agents))
        return client

    def close(self) -> None:
        """Stop the auditor (dropping the checks not made yet) and the agent refresher,
        end the parked database transactions, close node connections and the database pool
        (a block still running gives its connection back as it ends). In a forked child,
        only forget the cache: its connections are the parent's."""
        _open.closed(self)
        if self.inherited():
            return
        self.closed = True  # a block that ends from now on gives its connection back
        if self._auditor is not None:
            self._auditor.close()  # first: its checks use the pool, the nodes and the agent
        if self.agent is not None:
            self.agent.close()
        self.end_parked(every=True)
        self.pending_stores.drop_all()
        if self._staleness_probe is not None:
            # Its connections are the ring's: closing them under it would leak a socket.
            # Bounded: each node answers or times out within node_timeout.
            self._staleness_probe.join()
        if self.ring is not None:
            self.ring.close()
        self.pool.close()
        self.replica_health.close()
        for replica_pool in self.replica_pools.values():
            replica_pool.close()

    def _bound_answers(self, connection: ReplicaConnection) -> None:
        """A standby's connection waits for an answer at most ``replica_timeout``."""
        connection.answer_timeout = self.settings.replica_timeout

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

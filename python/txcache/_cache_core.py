"""What the sync :class:`~txcache.Cache` and the async :class:`~txcache.aio.AsyncCache`
share: settings, the checks of a transaction's arguments, the staleness warning, the pin
policy and serializer, and the library's reading of the catalog — with no network I/O.

The catalog reading itself (:meth:`CacheCore._read_schema`) is synchronous, through a
connection of its own: the sync cache runs it inline, the async one in a worker thread (it
happens after a schema change, not per query). Covering a reading with a fresh pin
(docs/library.md, "Schema changes under a running query") needs the agent, so each cache
passes its own way of doing it, or does it after the reading.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import psycopg

from txcache import _tokens as tokens
from txcache import _validate as validate
from txcache._agent_state import AgentState
from txcache._audit_core import Auditor
from txcache._config import Mode, Settings, load_settings
from txcache._current import Params
from txcache._log_throttle import LogThrottle
from txcache._parking import ParkingLot
from txcache._pending_stores import PendingStore, PendingStores
from txcache._pinset import PinPolicy, newest_or_fresh, prefer_standbys
from txcache._protocol import DatabaseIdentity, stream_name
from txcache._replicas import ReplicaHealth, answers
from txcache._ring import NodeClient, NodeRing
from txcache._schema import Catalog, Schema, TagColumns
from txcache._serialize import SafeSerializer, Serializer, keyed
from txcache._session import SessionContext
from txcache._sql import UncacheableQuery, analyze
from txcache._stats import OperationLatency
from txcache.errors import ConfigurationError

__all__ = [
    "ISOLATION_LEVELS",
    "CacheCore",
    "CatalogUnavailable",
    "gather_settings",
    "unknown_relation",
]

log = logging.getLogger("txcache")


class CatalogUnavailable(Exception):
    """The catalog reading is due (a schema change) and cannot be made now (a table is
    locked): nothing can be analysed, so nothing is cached until it can."""


CATALOG_RETRY = 1.0
"""Seconds before a catalog reading that found a table locked is tried again."""

_catalog_blocked = LogThrottle(log)
"""While a table stays locked, every second's failed reading would say so."""

T = TypeVar("T")

ISOLATION_LEVELS = frozenset(validate.ISOLATION_LEVELS)


def gather_settings(given: Mapping[str, Any], settings: Mapping[str, Any]) -> Settings:
    """The settings ``connect`` (sync or async) was given as arguments (``given``: the named
    ones, ``settings``: the rest), completed by the environment and ``txcache.toml``, each
    checked once (:mod:`txcache._config`)."""
    return load_settings({**given, **settings})


def _connect_option(name: str, value: Any, check: Callable[[Any], T]) -> T:
    """An option ``connect`` takes besides the settings, checked as the settings are
    (:class:`ConfigurationError`)."""
    try:
        return check(value)
    except validate.Refused as refused:
        raise ConfigurationError(refused.message(f"connect(): {name}", value)) from None


def unknown_relation(refusal: UncacheableQuery) -> bool:
    """Whether analysis refused a statement because the library's catalog reading does not
    know a relation it names (one created since: read the catalog again and retry)."""
    return "unknown relation" in str(refusal)


NO_NODES_FED = (
    "the agent feeds no cache node (start it with --node HOST:PORT, or add one with "
    "`txcache nodes add HOST:PORT`)"
)
"""Why a cache runs uncached while its agent names no node (``NODES`` empty)."""


def _uncached_reason(settings: Settings) -> str | None:
    """Why a cache with these settings would never cache, naming the setting to give."""
    if settings.mode == "bypass":
        return "mode bypass"
    # Without nodes of its own the cache places keys on those the agent names (NODES).
    missing = [
        f"{what} (the setting {name}, or TXCACHE_{name.upper()})"
        for name, what, given in (
            ("nodes", "cache nodes", settings.nodes or settings.agent),
            ("agent", "agent", settings.agent),
        )
        if not given
    ]
    return f"txcache has no {' and no '.join(missing)}" if missing else None


class CacheCore:
    """The state and decisions both caches share (module docstring). Subclasses set
    :attr:`agent` and :attr:`ring` and do the I/O."""

    agent: AgentState | None
    """The agent client (``None`` when the cache never caches)."""
    ring: NodeRing[NodeClient] | None
    """The cache nodes (``None`` when the cache never caches)."""

    def __init__(
        self,
        settings: Settings,
        *,
        serializer: Serializer | None = None,
        pin_policy: PinPolicy | None = None,
        safe_functions: Iterable[str] = (),
    ) -> None:
        """Take the settings and options; no connection is made here."""
        serializer = _connect_option("serializer", serializer, validate.serializer)
        pin_policy = _connect_option("pin_policy", pin_policy, validate.pin_policy)
        # A string is comma-separated, as Django's SAFE_FUNCTIONS: not a name per character.
        safe_functions = _connect_option("safe_functions", safe_functions, validate.function_names)
        self.settings = settings
        self.parking: ParkingLot[Any] = ParkingLot(settings.snapshot_hold, settings.pool_size)
        """Read-only database transactions kept open for the next transaction at their pin
        (:mod:`txcache._parking`)."""
        self.closed = False
        """Whether :meth:`close` began: nothing is parked from then on (nothing would end
        it), and no parked connection is handed out."""
        self.pending_stores: PendingStores[Any] = PendingStores()
        """Values computed without DDL triggers, waiting for a pin to verify their catalog
        before they are stored (:mod:`txcache._pending_stores`)."""
        self.pid = os.getpid()
        """The process that made it: its sockets are that process's, not a forked child's."""
        self.mode: Mode = settings.mode
        secret = settings.secret.encode() if settings.secret else None
        self.serializer: Serializer = keyed(serializer) if serializer else SafeSerializer(secret)
        self.policy: PinPolicy = pin_policy or newest_or_fresh(settings.fresh_pin_age)
        if pin_policy is None and settings.replicas:
            self.policy = prefer_standbys(self.policy, len(settings.replicas))
        probe = functools.partial(answers, timeout=settings.replica_timeout)
        self.replica_health = ReplicaHealth(settings.replicas, probe)
        """Which standbys of the ``replicas`` setting misses may run on now."""
        # Per connection checked out from a standby's pool, the standby's name.
        self._replica_of: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._replica_drained: dict[str, int] = {}  # outages each standby's pool was drained for
        self.safe_functions = frozenset(safe_functions)
        self.latency = OperationLatency()
        """Mean cache lookup and database statement latency of read-only transactions."""
        self.uncached_reason = _uncached_reason(settings)
        """Why this cache does not cache (no nodes, no agent, ``bypass`` mode; or, for now,
        an agent that feeds no node); ``None`` when it does."""
        if settings.mode != "bypass" and self.uncached_reason is not None:
            log.warning("%s: every call runs against the database, uncached", self.uncached_reason)
        self.auditor: Auditor | None = None
        """Where read-only transactions hand the hits they sampled for the audit (each
        driver's cache sets it when :attr:`audits`)."""
        self.nodes_max_staleness: float | None = None
        """The smallest ``--max-staleness`` of the nodes, once known (asked in the
        background at start): no value older than that is kept, so no larger staleness
        is ever used."""
        self._staleness_warned = False
        self._schema: Schema | None = None
        self._schema_generation = -1  # the agent's catalog generation it was read at
        self._schema_lock = threading.Lock()
        self._schema_read_at = 0.0  # time.monotonic() of the last catalog reading
        self._schema_readings = 0  # catalog readings since the first
        self._schema_moved = False  # a query ran with a newer catalog than the last reading
        self._catalog_blocked_until = 0.0  # time.monotonic() before which no reading is tried
        # Per pooled connection, the catalog reading it last began a transaction under.
        self._connection_readings: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        # Per pooled connection, its session's context, read (and its settings pinned) when
        # first checked out.
        self._connection_contexts: weakref.WeakKeyDictionary[Any, SessionContext] = (
            weakref.WeakKeyDictionary()
        )
        self._sessions_changed = False  # a reading found another context: drain the pool
        self._refused: set[tuple[tuple[str, int], DatabaseIdentity]] = set()  # logged once
        self._future_tokens: set[int] = set()  # tokens ahead of the database, warned of
        self._members: tuple[str, ...] | None = None  # the agent's NODES the ring follows
        self._ring_lock = threading.Lock()

    def follow_members(self) -> None:
        """Place keys on the cache nodes the agent feeds (its ``NODES``, as of the last
        refresh) when they changed since the ring was built: nodes still named keep their
        connections, new ones connect on first use, those left are closed. With no nodes
        named, :attr:`ring` is ``None`` and transactions run uncached. One identity test
        when nothing changed (each transaction asks as it begins)."""
        members = None if self.agent is None else self.agent.members
        if members is None or members is self._members:
            return
        with self._ring_lock:
            if members is self._members:
                return
            ring = self.ring
            kept = {} if ring is None else {node.address: node for node in ring.nodes}
            nodes = [
                kept.pop(address) if address in kept else self._new_node(address)
                for address in members
            ]
            self.ring = NodeRing(nodes) if nodes else None
            if self._members is None and set(self.settings.nodes) - set(members):
                log.warning(
                    "txcache: the agent feeds the cache nodes %s, not %s as the setting "
                    "nodes says: keys go to the agent's (a node it does not feed is never "
                    "current)",
                    ", ".join(members) or "none",
                    ", ".join(self.settings.nodes),
                )
            self._members = members
            self._note_members(members)
        for node in kept.values():
            node.close()

    def _note_members(self, members: tuple[str, ...]) -> None:
        """While the agent names no node, :attr:`uncached_reason` says so and a warning
        is logged (once per such stretch): every call runs against the database."""
        if self.uncached_reason not in (None, NO_NODES_FED):
            return  # the settings' reason stands
        reason = None if members else NO_NODES_FED
        if reason == self.uncached_reason:
            return
        self.uncached_reason = reason
        if reason is not None:
            log.warning("%s: every call runs against the database, uncached", reason)
        else:
            log.info("txcache: the agent feeds cache nodes again: calls are cached")

    def _new_node(self, address: str) -> NodeClient:
        """A client of the node at ``address``, of the driver's kind."""
        raise NotImplementedError

    @property
    def audits(self) -> bool:
        """Whether this cache audits hits: ``audit_rate`` above 0, and a cache that caches
        in ``consistent`` mode (without consistency a hit need not be valid at the pin, so
        a rerun there proves nothing)."""
        caching = self.uncached_reason is None and self.mode == "consistent"
        return caching and self.settings.audit_rate > 0

    @contextlib.contextmanager
    def request_scope(self, not_before: int | None = None) -> Iterator[None]:
        """A unit of work with read-your-writes of its own — one web request: read-only
        transactions created inside see what the block commits (as every context's do,
        docs/library.md, "Commit and read-your-writes") and the client's ``not_before``
        token, while the writes of the thread's (or task's) earlier requests no longer hold
        them. Afterwards the context's own record is back. The token to hand the client is
        ``written_token()``, asked inside."""
        if not_before is not None:
            not_before = validate.token_argument(not_before, "request_scope()")
        with tokens.scope():
            tokens.advance(self.settings.dsn, not_before)
            yield

    def _pool_options(self, dsn: str | None = None) -> dict[str, Any]:
        """What both drivers' connection pools are made with: the DSN (``dsn``: a
        standby's), up to ``pool_size`` connections (one kept open), ``pool_timeout`` to
        wait for one, autocommit (the transactions begin their own)."""
        settings = self.settings
        return {
            "conninfo": dsn or settings.dsn,
            "min_size": 1,
            "max_size": settings.pool_size,
            "timeout": settings.pool_timeout,
            "kwargs": {"autocommit": True},
        }

    def _node_options(self) -> dict[str, Any]:
        """What both drivers' node clients are made with."""
        settings = self.settings
        return {
            "password": settings.password,
            "timeout": settings.node_timeout,
            "tls_ca": settings.tls_ca,
            "greeting": self._node_greeting,
        }

    def _node_greeting(self) -> tuple[str, str] | None:
        """What every new connection to a node sends first: ``TXDATABASE`` naming the
        database the agent follows (``system_identifier/oid``, as the agent names it to the
        nodes) — the only one this cache stores values of. A node that follows another
        database's stream refuses it, and every versioned command after: its ``N`` would
        vouch for values nothing invalidates. ``None`` (no connection yet) before the
        agent said which database it follows."""
        followed = self.agent.database if self.agent is not None else None
        return None if followed is None else ("TXDATABASE", stream_name(followed))

    def inherited(self) -> bool:
        """Whether this process is a fork of the one that made the cache: its connections are
        the parent's (a child that used or closed them would end the parent's sessions), so
        the child makes a cache of its own."""
        return os.getpid() != self.pid

    # -- arguments of transactions ----------------------------------------------------------

    def _staleness_limit(self, staleness: float | None, not_before: int | None) -> float:
        """The staleness a read-only transaction runs with, its arguments checked
        (``TypeError``, ``ValueError``: :mod:`txcache._validate`), and the warning given
        once when it exceeds the nodes' limit."""
        if staleness is None:
            limit = self.settings.staleness  # checked at connect()
        else:
            limit = validate.staleness_argument(staleness)
        if not_before is not None:
            validate.token_argument(not_before, "read_only()")
        self._check_staleness(limit)
        return limit

    @staticmethod
    def _isolation_level(isolation: str | None) -> str | None:
        """``isolation`` for ``BEGIN`` (upper case), checked; ``None`` for the default."""
        return validate.isolation_argument(isolation)

    def _note_max_staleness(self, answers: Iterable[Any]) -> None:
        """The nodes' answers to ``CONFIG GET max-staleness``: the smallest is the limit."""
        known = [answer for answer in answers if isinstance(answer, float)]
        if known:
            self.nodes_max_staleness = min(known)

    def _check_staleness(self, staleness: float) -> None:
        """Warn once when ``staleness`` exceeds what the nodes keep."""
        limit = self.nodes_max_staleness
        if limit is None or staleness <= limit or self._staleness_warned:
            return
        self._staleness_warned = True
        log.warning(
            "staleness %g s is above the cache nodes' --max-staleness (%g s): they keep no "
            "value older than that, so transactions are at most %g s stale; start the nodes "
            "and the agent with a larger --max-staleness to allow more",
            staleness,
            limit,
            limit,
        )

    # -- the catalog ------------------------------------------------------------------------

    def _fingerprints(self) -> bool:
        """Whether catalog readings must carry the catalog's fingerprint: the agent runs
        without DDL triggers (:mod:`txcache._catalog_stamp`)."""
        return self.agent is not None and self.agent.fingerprints

    def settle_stores(self) -> list[PendingStore[Any]]:
        """The waiting values the agent's pins now verify, to store; the ones they refute
        or that waited too long are dropped (:mod:`txcache._pending_stores`)."""
        if self.agent is None or not self.pending_stores:
            return []
        return self.pending_stores.settle(self.agent.listed_pins())

    def schema_moved(self) -> None:
        """A query ran with a newer catalog than the library's reading (or one not known to
        be current): read it again before the next analysis, at most once per
        ``refresh_interval`` (a stream of schema changes must not turn every query into a
        catalog reading)."""
        self._schema_moved = True

    def catalog_reading(self) -> Catalog | None:
        """The library's current catalog reading (``None`` before the first): a statement
        the analysis refused is still checked against it for a schema change after its
        snapshot."""
        return self._schema.catalog if self._schema is not None else None

    def _schema_stale(self, generation: int) -> bool:
        """Whether the catalog must be read (again) before it is used, given the agent's
        catalog ``generation``: one integer comparison and one flag test on the common
        path. Generations only grow, so a reader of an older one never undoes a reload."""
        moved = self._schema_moved and (
            time.monotonic() - self._schema_read_at >= self.settings.refresh_interval
        )
        return self._schema is None or generation > self._schema_generation or moved

    def _read_schema(self, generation: int, cover: Callable[[], None] | None) -> bool:
        """Read the catalog if :meth:`_schema_stale` still says so once the lock is held
        (another thread may have read it meanwhile); ``cover`` then runs, under the lock.
        Synchronous, through a connection of its own (a transaction holding the last pooled
        one may wait here). Returns whether a reading was made. A reading that found a
        table locked (a migration's) is not tried again for :data:`CATALOG_RETRY` seconds:
        meanwhile the catalog is unknown and transactions run uncached."""
        with self._schema_lock:
            if time.monotonic() < self._catalog_blocked_until:
                return False
            moved = self._schema_moved
            try:
                return self._read_schema_now(generation, cover)
            except psycopg.errors.LockNotAvailable as error:
                self._schema_moved = moved  # still due
                self._catalog_blocked_until = time.monotonic() + CATALOG_RETRY
                _catalog_blocked.log(
                    logging.WARNING,
                    "the catalog could not be read: a table is locked (%s; a migration "
                    "holding or awaiting a lock?); transactions run uncached until it can be, "
                    "tried again every %g s",
                    str(error).strip(),
                    CATALOG_RETRY,
                )
                return False

    def catalog_known(self, generation: int) -> bool:
        """Whether the catalog reading is current for the agent's ``generation``: not when
        a reading is due and could not be made (a table locked)."""
        return not self._schema_stale(generation)

    def _read_schema_now(self, generation: int, cover: Callable[[], None] | None) -> bool:
        """:meth:`_read_schema`'s reading, with ``_schema_lock`` held."""
        read = True
        before = self._schema.catalog.session if self._schema is not None else None
        if self._schema is None:
            self._schema = Schema.load(self.settings.dsn, fingerprint=self._fingerprints())
            self._schema_read_at = time.monotonic()
            if cover is not None:
                cover()
        elif generation > self._schema_generation or self._schema_moved:
            self._reload_schema(cover)
        else:
            read = False
        self._schema_generation = max(generation, self._schema_generation)
        self._note_context(before)
        return read

    def _reload_schema(self, cover: Callable[[], None] | None) -> None:
        """Read the catalog again; call with ``_schema_lock`` held."""
        if self._schema is not None:
            self._schema_moved = False  # before: a query finding it moved again reads again
            self._schema.refresh(fingerprint=self._fingerprints())  # its own connection
            self._schema_read_at = time.monotonic()
            self._schema_readings += 1
            if cover is not None:
                cover()

    def _reload_schema_locked(self, cover: Callable[[], None] | None = None) -> None:
        """:meth:`_reload_schema` under the lock (the async cache covers after the worker
        thread returns, with no ``cover``)."""
        with self._schema_lock:
            before = self._schema.catalog.session if self._schema is not None else None
            self._reload_schema(cover)
            self._note_context(before)

    def note_future_token(self, token: int) -> bool:
        """Whether a ``not_before`` ahead of the database is new (to warn of once: an old
        cookie would otherwise warn at every request); bounded memory."""
        if token in self._future_tokens:
            return False
        if len(self._future_tokens) >= 1024:
            self._future_tokens.clear()
        self._future_tokens.add(token)
        return True

    # -- the session context ----------------------------------------------------------------

    def _note_context(self, before: SessionContext | None) -> None:
        """After a catalog reading: if its session context differs from the last reading's
        (``before``) — a database's or role's settings changed, a schema the search path
        names was created — new sessions differ from the pooled ones, which the driver then
        drains (:meth:`_take_sessions_changed`)."""
        after = self._schema.catalog.session if self._schema is not None else None
        if before is None or after is None or after == before:
            return
        log.info(
            "the database's sessions changed (%s): pooled connections are replaced, and "
            "values are cached under the new context",
            ", ".join(after.differences(before)),
        )
        self._sessions_changed = True

    def _take_sessions_changed(self) -> bool:
        """Whether the pool must be drained since the last call (once per change)."""
        changed, self._sessions_changed = self._sessions_changed, False
        return changed

    def _context_for(self, schema: Schema) -> SessionContext | None:
        """The context a read-only transaction beginning now keys its values by: the session
        context of the catalog reading ``schema``, if the agent follows that session's
        database; ``None`` (the transaction runs uncached) if it follows another one, or is
        not known to follow any yet. Cheap: run at every transaction's start."""
        context = schema.catalog.session
        followed = self.agent.database if self.agent is not None else None
        if context is None or followed is None:
            return None
        if context.database_identity == (followed.system_identifier, followed.oid):
            tokens.reaches(self.settings.dsn, context.running_database)
            return context
        self._refuse(context, followed)
        return None

    def _refuse(self, context: SessionContext, followed: DatabaseIdentity) -> None:
        """Log, once per pair, that this cache's database is not the agent's."""
        pair = (context.database_identity, followed)
        if pair in self._refused:
            return
        self._refused.add(pair)
        same_cluster = context.system_identifier == followed.system_identifier
        where = "on the same server" if same_cluster else "of another cluster"
        # With several agents, the one whose refresh said so (the active one).
        source = self.agent.followed if self.agent is not None else None
        log.error(
            "txcache: this cache's DSN names database %r, but the agent at %s follows "
            "database %r %s: nothing would invalidate what this cache stored, so its "
            "transactions run against the database, uncached; point an agent (with its own "
            "slot and nodes) at this database to cache it",
            context.database,
            source or self.settings.agent,
            followed.name,
            where,
        )

    def last_context(self) -> SessionContext | None:
        """The session context of the last catalog reading (``None`` before the first)."""
        return self._schema.catalog.session if self._schema is not None else None

    def _known_context(self, connection: object) -> SessionContext | None:
        """The session context of pooled ``connection``, if read already."""
        return self._connection_contexts.get(connection)

    def session_of(self, connection: object) -> SessionContext | None:
        """The session context of a connection checked out by this cache (``None`` for
        another), without judging it against the catalog reading: a standby's session is
        compared with the transaction's own."""
        return self._known_context(connection)

    def _connection_outdated(self, context: SessionContext) -> bool:
        """Whether a pooled connection of session ``context`` differs from what a new
        session is (the latest reading), in which case the catalog is read again soon:
        a transaction whose keys name another context than its connection's does not use
        the cache (:meth:`ReadOnlyCore._check_connection`)."""
        reading = self._schema.catalog.session if self._schema is not None else None
        if reading is None or reading == context:
            return False
        self.schema_moved()
        return True

    def _analysis(
        self,
        statement: str,
        params: Params,
        schema: Schema,
        columns: tuple[bool, TagColumns | None],
    ) -> tuple[frozenset[str], Catalog]:
        """The tags of ``statement`` under ``schema`` with the tag columns the agent gave
        (``columns``: known, and which), and the catalog reading they came from; raises
        :class:`UncacheableQuery`."""
        known, tag_columns = columns
        schema = schema.with_tag_columns(tag_columns if known else None)
        catalog = schema.catalog  # before: a reading meanwhile can only fail the check
        tags = analyze(statement, params, schema, safe_functions=self.safe_functions).tags
        return tags, catalog

    def _prepared_outdated(self, connection: object) -> tuple[int, bool]:
        """The current catalog reading, and whether ``connection`` began its last
        transaction under an older one (psycopg's prepared statements must then go: a schema
        change may have altered their result type). Record the reading with
        ``_connection_readings[connection] = reading`` once they are gone."""
        readings = self._schema_readings
        return readings, self._connection_readings.get(connection, readings) != readings

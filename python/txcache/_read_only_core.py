"""The read-only transaction without I/O: its state (pin set, frames, snapshot, failure,
verified tables, …), every decision it makes, and the SQL it sends. The sync
:class:`~txcache.ReadOnlyTransaction` and the async
:class:`~txcache.aio.AsyncReadOnlyTransaction` are drivers around it: they do the round
trips — node lookups, the agent's fresh pins, the database's imports and statements — in the
order the core's methods imply, and hand the answers back to it. What a transaction does
and guards against is described in :mod:`txcache.aio._read_only` and docs/library.md.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import psycopg
from psycopg import sql

from txcache import _tokens as tokens
from txcache._audit_core import AuditBatch, AuditSkipped, SampledCall, skip
from txcache._catalog_stamp import (
    WAL_POSITION,
    replica_stamp_check,
    stamp_check,
    still_current,
    still_current_on_replica,
)
from txcache._columns import table_of
from txcache._frame import Frame
from txcache._log_throttle import LogThrottle
from txcache._parking import ParkedSnapshot, holds
from txcache._pinset import Pin, PinSet
from txcache._protocol import Interval
from txcache._ring import NodeClient, NodeRing
from txcache._schema import Catalog, Relation, table_name
from txcache._session import CHECK_CONTEXT, SessionContext, context_changes
from txcache._session_watch import REPORTED_SETTINGS, reported_settings
from txcache._statements import check_read_only
from txcache.errors import SnapshotUnavailable, TransactionError

if TYPE_CHECKING:
    from txcache._cache_core import CacheCore
    from txcache._current import Params

__all__ = [
    "BEGIN_READ_ONLY",
    "CURRENT_SNAPSHOT",
    "NODE_CATCH_UP",
    "NO_SNAPSHOT",
    "REWRITE_MOVES",
    "REWRITTEN",
    "ReadOnlyCore",
    "RewriteCheck",
    "StaleRead",
    "Statement",
    "import_statement",
    "rewritten_tables_statement",
]

log = logging.getLogger("txcache")

_fall_backs = LogThrottle(log)
"""Every transaction falls back while the agent is down: one line a minute says so."""

C = TypeVar("C", bound="CacheCore")
N = TypeVar("N", bound=NodeClient)

# snapshot "…" does not exist / invalid snapshot identifier / its exporter just ended
NO_SNAPSHOT = ("42704", "22023", "55000")
BEGIN_READ_ONLY = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
# The snapshot a transaction runs at; after an import, to compare with the pin's (same
# round trip).
CURRENT_SNAPSHOT = "SELECT pg_current_snapshot()::text"
# A statement and its parameters.
Statement = tuple[str, tuple[Any, ...]]

# The relations the read-only transaction has read (it holds an AccessShareLock on each
# until it ends), with, per relation: whether a TRUNCATE or a table-rewriting ALTER TABLE
# committed after the snapshot — pg_class as the snapshot sees it names another file node
# than the current catalog (pg_relation_filenode) — and whether its name, as of the
# snapshot, still names it (it then counts as verified for the rest of the database
# transaction: the lock holds off any rewrite, rename or drop). A relation the snapshot
# does not know (created, or dropped and created again, since) counts as rewritten unless
# it has no storage or is an index. Catalogs (oid < 16384) cannot be truncated or rewritten
# in a way an MVCC snapshot could not read. docs/library.md, "Rewritten tables".
REWRITTEN = """
SELECT n.nspname::text, coalesce(c.relname::text, l.relation::regclass::text),
       CASE WHEN c.oid IS NULL
            THEN pg_relation_filenode(l.relation) IS NOT NULL
                 AND pg_get_indexdef(l.relation) IS NULL
            ELSE c.relkind IN ('r', 'm')
                 AND pg_relation_filenode(c.oid) IS DISTINCT FROM c.relfilenode
       END,
       c.oid IS NOT NULL AND to_regclass(format('%%I.%%I', n.nspname, c.relname)) = c.oid
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_class c ON c.oid = l.relation
LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.relation >= 16384
  AND (c.oid IS NULL OR c.relkind IN ('r', 'm', 'v'))
"""
# The same comparison for the tables of a statement the library analysed, by oid: no
# pg_locks scan (it copies every backend's locks: about a millisecond under load), no name
# lookups. Used only when the statement's tags name every relation it reads — plain tables
# with no inheritance children and no row security — and a catalog check in the same round
# trip proves it ran with the catalog those tags came from (so the tags' names name these
# oids now, and the locks keep it so). An oid the snapshot does not know (the table was
# created since) has no row: it counts as rewritten. One placeholder per oid, not an array:
# PostgreSQL estimates ten elements for an array parameter, so the prepared statement's
# generic plan looked dearer than a custom one and it was planned again at every run (a
# check took twice a primary-key lookup's database time).
_REWRITTEN_TABLES = """
SELECT c.oid::int, pg_relation_filenode(c.oid) IS DISTINCT FROM c.relfilenode
FROM pg_catalog.pg_class c WHERE c.oid IN ({})
"""


@functools.lru_cache(maxsize=32)
def rewritten_tables_statement(count: int) -> str:
    """The by-oid rewrite check of ``count`` tables (their oids its parameters)."""
    return _REWRITTEN_TABLES.format(", ".join(["%s::oid"] * count))


@dataclass(frozen=True)
class RewriteCheck:
    """The rewrite check a statement runs after it: :data:`REWRITTEN`, or with ``tables``
    (oid → name as tags spell it) :func:`rewritten_tables_statement` for those tables."""

    statement: str
    params: tuple[Any, ...]
    tables: dict[int, str] | None = None


ALL_LOCKED = RewriteCheck(REWRITTEN, ())
# PostgreSQL's refusal to run a prepared statement whose result type a schema change altered.
_CHANGED_RESULT_TYPE = "cached plan must not change result type"

# How often one statement may move the database transaction past a rewrite: a pin is
# chosen after the rewrite it met, so only rewrites committing meanwhile can need more.
REWRITE_MOVES = 3
# How long a move to a fresh pin waits for a node to apply the stream that far: its
# interval for what was read ends where it has read, usually milliseconds behind.
NODE_CATCH_UP = 1.0
_NO_LIMIT = 2**63 - 1


def import_statement(pin: Pin) -> sql.Composed:
    """One round trip that starts a read-only transaction at ``pin`` and reads the snapshot
    it got (its last result, to compare with :attr:`Pin.snapshot_text`)."""
    return sql.SQL("{}; SET TRANSACTION SNAPSHOT {}; {}").format(
        sql.SQL(BEGIN_READ_ONLY), sql.Literal(pin.snapshot_id), sql.SQL(CURRENT_SNAPSHOT)
    )


@dataclass(frozen=True)
class StaleRead:
    """Why a statement's result was dropped: it ran at a snapshot older than a commit that
    changed what it read — a ``TRUNCATE`` or table-rewriting ``ALTER TABLE`` (the snapshot
    would read the table empty), or a schema change (PostgreSQL runs the current catalog
    over the snapshot's data, a state no commit had). The transaction moves to a later
    snapshot and runs it again."""

    what: str
    """What committed after the snapshot, for the log and the error."""
    ask_agent: bool = False
    """The agent's last refresh could not tell: the driver refreshes and judges again."""

    @classmethod
    def rewritten(cls, relations: Sequence[str]) -> StaleRead:
        """``relations`` were truncated or rewritten after the snapshot."""
        return cls(
            f"{', '.join(relations)}: a TRUNCATE / table-rewriting ALTER TABLE committed "
            "after this transaction's snapshot (which would read the table empty)"
        )

    def error(self) -> SnapshotUnavailable:
        """The error when no later snapshot fits what the transaction read so far."""
        return SnapshotUnavailable(
            f"{self.what}, and no later snapshot fits what the transaction read so far; "
            "retry the transaction"
        )


SCHEMA_CHANGED = StaleRead(
    "a schema change committed after this transaction's snapshot (a query at it runs the "
    "new definitions over the old data)"
)
BARRIER_UNKNOWN = StaleRead(SCHEMA_CHANGED.what, ask_agent=True)


def lost_while_moving() -> SnapshotUnavailable:
    """The error when a move failed and the snapshot the transaction ran at is gone."""
    return SnapshotUnavailable(
        "the snapshot this transaction ran at was released while it tried to move; "
        "retry the transaction"
    )


def _tables(tags: frozenset[str]) -> set[str]:
    """The tables and views (``schema.name``, escaped as in tags) that ``tags`` name."""
    return {table_of(tag) for tag in tags}


def _plain_table(relation: Relation) -> bool:
    """Whether reading ``relation`` reads only it: a table or materialized view with no
    inheritance children or partitions, and no row security (whose policies may read
    other tables)."""
    return relation.kind in ("r", "m") and not relation.children and not relation.row_security


class ReadOnlyCore(Generic[C]):
    """State and decisions of a read-only transaction (module docstring), of a cache of
    type ``C`` (the sync or the async one)."""

    cache: C

    def __init__(self, cache: C, staleness: float, not_before: int | None) -> None:
        """A transaction of ``cache`` beginning with the pins of its agent's last refresh
        that fit ``staleness`` and ``not_before`` (no round trip)."""
        self.cache = cache
        cache.follow_members()
        self.staleness = staleness
        self.not_before = not_before
        self.frames: list[Frame] = []
        self.snapshot: Pin | None = None
        """The pin the database transaction runs at (``None`` before the first query)."""
        self.uncached = cache.mode == "bypass" or cache.ring is None or cache.agent is None
        """Whether the cache is out of use for the rest of the transaction."""
        self.context: SessionContext | None = None
        """The session context its cache keys name (docs/library.md, "What a key names"):
        set as it begins; ``None`` while it runs uncached."""
        self._written = tokens.written()  # its context's writes, which it must see
        self.moves = 0
        """How often the database transaction moved to another pin."""
        self.hits = 0
        """Cacheable calls answered from the cache."""
        self.misses = 0
        """Cacheable calls that missed and ran (nested ones included)."""
        self.read_cache = False
        """Whether a cached value was used (the transaction is then bound to the pins)."""
        self.sampled: list[SampledCall[Any]] = []
        """Hits kept for the audit, handed to the cache's auditor as the block ends."""
        self.reruns = False
        """Whether this is an audit's transaction (:meth:`_bind_to`): its cacheable calls run
        their functions against the database, and are not counted as the application's."""
        self._rerun_context: SessionContext | None = None  # an audit's: the call's context
        self._closed = False
        self.database_snapshot: str | None = None
        """After a fallback to the database: its snapshot (``pg_current_snapshot()``, as
        ``xmin:xmax:xip,…``). Such a transaction has PostgreSQL's guarantee — one snapshot —
        but under concurrent commits a snapshot need not be a prefix of commit order
        (docs/library.md)."""
        self.wal_position = 0
        """Without DDL triggers: the WAL insert position read after its last analysed
        query; a value it stores waits for a pin taken after it
        (:mod:`txcache._pending_stores`)."""
        self.rewrite_checks = 0
        """How many statements ran with the check for relations rewritten after the
        snapshot (the others read only relations verified earlier in the same database
        transaction)."""
        self._query_tags: set[str] = set()
        self._tags_known = True  # False once a result without tags was used
        self._read_database = False  # whether a query result reached the application
        self._verified: set[str] = set()  # tables checked in this database transaction
        # The policy's last choice: asked again (parking, then a standby), it stands while
        # the set holds it, so a policy that rotates over standbys rotates per transaction.
        self._chosen: Pin | None = None
        self._database_began = 0.0  # time.monotonic() when the database transaction imported
        self._failure: str | None = None  # the error that failed the block
        self._catalog_moved = False
        self._settings_at_start: tuple[bytes | None, ...] | None = None
        self.session_changed = False
        """Whether a statement changed the connection's session (the block then failed, and
        its connection is not given back as it is)."""
        self._ran_unanalysed = False
        """Whether a statement whose tags were not derived ran: code it called may have set
        what lasts until the database transaction ends (``set_config(…, true)``, a tenant
        for row security), which a parked transaction would hand to the next block."""
        self.primary_only = False
        """Whether the transaction left a standby (it then runs on the primary)."""
        agent = cache.agent
        if self.uncached or agent is None:
            self.pin_set = PinSet((), star=True)
        else:
            now = time.time()
            self.pin_set = agent.pin_set(staleness=staleness, not_before=not_before, now=now)
            if cache.replica_health.any_down():
                self._leave_out_down_standbys()

    # -- the block's health -----------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """Whether a statement failed in the database (or the snapshot was lost): the block
        is then failed, and nothing more is stored in the cache."""
        return self._failure is not None

    @property
    def catalog_moved(self) -> bool:
        """Whether a query of a cacheable function ran with another catalog than its
        snapshot's or than the one its tags were derived from — a schema change committed
        after the snapshot, or after the library read the catalog — or one not known to
        be either: nothing more is stored in the cache."""
        return self._catalog_moved

    def check_usable(self) -> None:
        """Raise :class:`~txcache.TransactionError` once the block is failed."""
        if self._failure is not None:
            raise TransactionError(
                f"a statement failed earlier in this read-only transaction ({self._failure}), "
                "so the whole block is failed: leave it and run a new transaction"
            )

    def _fail(self, error: BaseException) -> None:
        """Fail the block: whatever the database transaction saw after ``error``, cache hits
        and misses alike must not decide what the rest of the block does."""
        if self._failure is None:
            first_line = str(error).partition("\n")[0] or "interrupted"
            self._failure = f"{type(error).__name__}: {first_line}"

    def _note_session(self, connection: Any) -> None:
        """The connection's session as the block found it."""
        self._settings_at_start = reported_settings(connection)

    def _check_session(self, connection: Any) -> None:
        """Fail the block if the statement just run changed a reported setting: what the
        block computes from then on depends on a session the library did not analyse it
        under (a ``search_path`` decides which table a name reads), and a read-only
        connection goes back to the pool without a reset."""
        now = reported_settings(connection)
        if self._settings_at_start is None or now == self._settings_at_start:
            return
        changed = [
            name
            for name, before, after in zip(REPORTED_SETTINGS, self._settings_at_start, now,
                                           strict=True)
            if before != after
        ]  # fmt: skip
        self._session_changed(changed)

    def _session_changed(self, changed: list[str]) -> NoReturn:
        """A statement changed the session's ``changed`` parts: fail the block (nothing
        more is stored, the connection is reset, not parked) and raise."""
        self.session_changed = True
        error = TransactionError(
            f"a statement changed the session's {', '.join(changed)} (a function that runs "
            "SET, SET ROLE or set_config?): a read-only transaction must leave the session as "
            "it found it; the block is failed and its connection is reset. Give the cache "
            "the setting instead (the DSN's options=-c …, or ALTER ROLE … SET: "
            'docs/library.md, "Connections and session state"), or run that statement in a '
            "read/write block"
        )
        self._fail(error)
        raise error

    def _context_check(self, tags: frozenset[str] | None) -> str | None:
        """The session check to run after a statement whose tags were not derived (a bare
        query the analysis refused: it may call a user-defined function, directly or
        through a view): such code can ``SET ROLE`` or ``set_config`` what PostgreSQL does
        not report to the client, after which the block's cacheable calls would compute
        under one session and store under another's keys, and its parked transaction
        would carry the change to the next block. ``None`` when nothing will be stored."""
        if tags is not None:
            return None
        self._ran_unanalysed = True
        if self.uncached or self.context is None:
            return None
        return CHECK_CONTEXT

    def _fail_if_session_changed(self, connection: Any, rows: list[Any] | None) -> None:
        """Fail the block if the session context check's ``rows`` (``None``: none ran)
        show that the statement just run changed ``connection``'s session
        (:meth:`_check_session` for what PostgreSQL does not report)."""
        context = self.cache.session_of(connection)
        if rows is None or context is None:
            return
        changed = context_changes(context, rows[0] if rows else None)
        if changed:
            self._session_changed(changed)

    def _failed_by(self, error: psycopg.Error | SnapshotUnavailable) -> BaseException | None:
        """Fail the block after a statement raised ``error``; the error to raise instead of
        it, if any: a prepared statement whose result type a schema change altered, or a
        deadlock this transaction was chosen to end, means a snapshot to retry, not a bug
        (the connection forgets its prepared statements)."""
        self._fail(error)
        if isinstance(error, psycopg.errors.DeadlockDetected):
            # Locks held since the block began (a schema change waiting on one, while this
            # waits on the change's): a read-only transaction, chosen to end the deadlock,
            # lost nothing and may run again.
            return SnapshotUnavailable(
                f"this read-only transaction was chosen to end a deadlock ({error}), most "
                "likely with a schema change; retry the transaction"
            )
        if not isinstance(error, psycopg.errors.FeatureNotSupported):
            return None
        if _CHANGED_RESULT_TYPE not in str(error):
            return None
        self.cache.schema_moved()
        return SnapshotUnavailable(
            "a schema change committed after this transaction's snapshot altered the "
            "result type of a statement prepared earlier on its connection; retry the "
            "transaction (its connection forgets its prepared statements)"
        )

    def _ended_error(self) -> TransactionError:
        return TransactionError("this read-only transaction has ended")

    # -- the cache --------------------------------------------------------------------------

    def _lookup_bounds(self) -> tuple[int, int] | None:
        """The range of commit points a lookup asks for: the pin set's bounds (any point in
        ``no_consistency`` mode after the oldest); ``None`` with only ★ (the driver takes a
        fresh pin and passes it to :meth:`_bounds_at_fresh`)."""
        bounds = self.pin_set.bounds()
        if bounds is None:
            return None
        if self.cache.mode == "no_consistency":
            return bounds[0], _NO_LIMIT
        return bounds

    def _bounds_at_fresh(self, fresh: Pin | None) -> tuple[int, int] | None:
        """★ became ``fresh``: the lookup asks for it alone. Without one the transaction
        goes on without the cache (``None``: the lookup is an ``unavailable`` miss)."""
        if fresh is None:
            self._fall_back("no pin within the staleness limit and no fresh pin")
            return None
        self.pin_set.reify(fresh)
        if self.cache.mode == "no_consistency":
            return fresh.ts, _NO_LIMIT
        return fresh.ts, fresh.ts

    def _accept_here(self, interval: Interval) -> bool | None:
        """Narrow the pin set to a hit's ``interval`` if the active snapshot (if any) lies
        in it; ``False`` when no pin fits (nothing changed), ``None`` when the database
        transaction must move for it (the driver's ``_move``)."""
        if self.cache.mode == "no_consistency":
            return True
        active = self.snapshot
        if active is None or interval.lo <= active.ts < interval.hi:
            return self.pin_set.narrow(interval.lo, interval.hi)
        return None

    def _interval_node(self, ring: NodeRing[N] | None) -> N | None:
        """The node of ``ring`` (the cache's) to ask over which range the query results
        read so far stay valid (``TXINTERVAL``); ``None`` when it cannot be known (a query's
        tags were not derived, or no node is up)."""
        node = ring.any_up() if ring is not None else None
        return node if self._tags_known else None

    def _sorted_query_tags(self) -> list[str]:
        return sorted(self._query_tags)

    def _move_targets(
        self, interval: Interval, known: Interval | None
    ) -> tuple[int, int, list[Pin]] | None:
        """Where a move for a hit valid over ``interval`` may go, given ``known``, the
        range the query results read so far stay valid in: ``(lo, hi, pins newest
        first)``, or ``None`` when nowhere."""
        if known is None:
            return None
        lo, hi = max(interval.lo, known.lo), min(interval.hi, known.hi)
        candidates = self._on_this_server(self.pin_set.within(lo, hi))
        if not candidates:
            return None
        return lo, hi, candidates[::-1]

    def _on_this_server(self, pins: list[Pin]) -> list[Pin]:
        """The ``pins`` a move may import on the database transaction's connection: those of
        the server it runs on (the primary, or a standby)."""
        server = self.snapshot.server if self.snapshot is not None else None
        return [pin for pin in pins if pin.server == server]

    def _moved_to(self, pin: Pin) -> None:
        active = self.snapshot
        if self._read_database and active is not None and pin.fingerprint != active.fingerprint:
            # Without DDL triggers: what was read ran with another catalog than the new
            # pin's, and a value is verified against its pin's fingerprint.
            self._catalog_moved = True
        self.snapshot = pin
        self.moves += 1
        for frame in self.frames:
            if frame.snapshot is not None:
                frame.snapshot = pin.ts  # nothing the frames read changed in between

    def reference_point(self) -> int | None:
        """A timestamp every value read so far is valid at: the active snapshot, else the
        newest pin; ``None`` with only ★."""
        if self.snapshot is not None:
            return self.snapshot.ts
        newest = self.pin_set.newest()
        return newest.ts if newest is not None else None

    # -- choosing a snapshot ----------------------------------------------------------------

    def _choose(self) -> Pin | None:
        """The policy's choice, held to the rules: ★ only while possible, else a pin of
        the set (a policy that breaks them gets the newest pin); a pin once chosen stands
        while the set holds it."""
        chosen = self._chosen
        if chosen is not None and chosen in self.pin_set.within(chosen.ts, chosen.ts + 1):
            return chosen
        choice = self.cache.policy(self.pin_set, time.time())
        if choice is None and self.pin_set.star:
            return None
        if choice is None or choice not in self.pin_set.within(choice.ts, choice.ts + 1):
            choice = self.pin_set.newest()
            if choice is None and self.pin_set.star:
                return None
        self._chosen = choice
        return choice

    def _began_at(self, pin: Pin) -> None:
        self.snapshot = pin
        self.pin_set.star = False  # the transaction now has a concrete time

    def _import_refused(self, pin: Pin) -> bool:
        """``pin`` could not be imported at the first query: whether another choice is
        left (else the transaction falls back to a snapshot of its own, or — bound to the
        pins by cached reads — raises :class:`SnapshotUnavailable`)."""
        self.pin_set.discard(pin)
        if self.pin_set.star or len(self.pin_set):
            return True
        if self.read_cache:
            raise SnapshotUnavailable(
                "every pin this transaction's cached reads are valid at has been "
                "released; retry the transaction"
            )
        self._fall_back("no pin could be imported")
        return False

    def _may_leave_replica(self, *, failed: bool = False) -> bool:
        """Whether a statement on a standby may run on the primary instead: when nothing was
        read from the standby yet (no result binds the transaction to its snapshot), or, if
        the standby ``failed`` (its connection, not its result), at a primary pin where
        everything read so far stays valid (:meth:`_left_replica`)."""
        return self._runs_on_replica() and (failed or not self._read_database)

    def _left_replica(
        self,
        why: str,
        *,
        failed: bool = False,
        valid: tuple[int, int] | None = None,
        fresh: Pin | None = None,
    ) -> None:
        """The transaction leaves its standby (:meth:`_may_leave_replica`) because of
        ``why``: from now on it runs on the primary, at the primary's pin of the same commit
        point if there is one. Bound by what it read there, only that pin will do, or one
        in ``valid`` (where every result read so far is valid), ``fresh`` (a pin just
        taken) among them; none:
        :class:`SnapshotUnavailable`. With ``failed`` the standby is down too, until a probe
        finds it answering."""
        pin = self.snapshot
        assert pin is not None
        assert pin.server is not None
        if failed:
            self.cache.replica_health.failed(pin.server, why)
        else:
            log.info("standby %s: %s; the transaction runs on the primary", pin.server, why)
        self.snapshot = None
        self.primary_only = True
        if self._read_database:
            # Bound by what it read: the primary's pin of that commit point, or one where
            # those results are as valid.
            lo, hi = (pin.ts, pin.ts + 1) if pin.fallback is not None else valid or (0, 0)
            if pin.fallback is not None:
                self.pin_set.substitute(pin, pin.fallback)
            elif fresh is not None and lo <= fresh.ts < hi:
                self.pin_set.reify(fresh)
            primary = [p for p in self.pin_set.within(lo, hi) if p.server is None]
            if not primary or not self.pin_set.restrict(primary):
                raise SnapshotUnavailable(
                    f"standby {pin.server} failed under this transaction ({why}), and no "
                    "primary pin fits what it read there; retry the transaction"
                )
            return
        self._replica_refused(pin)

    def _replica_caught_up(self, pin: Pin) -> bool:
        """Whether ``pin``'s standby had replayed every schema change of the catalog
        reading queries are analysed with — the pin is at or after where the reading began,
        or after the newest schema change the agent decoded below that — so that a query
        there does not run with an older catalog than its analysis (as :meth:`_ran_with`
        then checks)."""
        reading = self.cache.catalog_reading()
        stamp = reading.stamp if reading is not None else None
        if stamp is None or pin.ts >= stamp.position:
            return True
        assert self.cache.agent is not None
        barrier = self.cache.agent.schema_barrier(stamp.position)
        return barrier is not None and pin.ts >= barrier

    def _leave_out_down_standbys(self) -> None:
        """Pins of a standby that is down take no part in the transaction, not even in its
        cache lookups: a hit at one would bind the transaction to a commit point that only
        the primary's pin of it could serve then. Each gives way to that pin, or goes."""
        health = self.cache.replica_health
        for pin in list(self.pin_set):
            if pin.server is None or health.usable(pin.server):
                continue
            if pin.fallback is not None:
                self.pin_set.substitute(pin, pin.fallback)
            else:
                self.pin_set.discard(pin)

    def _replica_refused(self, pin: Pin) -> bool:
        """``pin``, a standby's, could not be used at the first query: the primary's pin at
        its commit point takes its place if there is one (nothing this transaction read
        changes: the commit point is the same); else as :meth:`_import_refused`."""
        if pin.fallback is not None:
            self.pin_set.substitute(pin, pin.fallback)
            return True
        return self._import_refused(pin)

    def _predates_token(self, fresh: Pin | None) -> bool:
        """Whether a fresh pin is older than ``not_before``: the driver then asks the
        database's WAL position and has :meth:`_check_token` judge the token."""
        return fresh is not None and self.not_before is not None and fresh.ts < self.not_before

    def _check_token(self, written: int) -> None:
        """A pin taken now that is older than ``not_before`` means no commit followed the
        token's position, unless the token lies after everything the database has written
        (``written``): a token from before a restore, or a client's cookie from another
        database. Waiting for commits nobody made would fail every read, so the transaction
        reads the newest state — everything ever written, the most a token can ask for —
        and a warning says so (once per token)."""
        assert self.not_before is not None
        if self.not_before <= written:
            return
        if self.cache.note_future_token(self.not_before):
            log.warning(
                "not_before %d lies after everything the database has written (its WAL "
                "position is %d): a token from before a restore, or not a token "
                "(pass a commit_timestamp or a Cache.timestamp()); reading the newest state",
                self.not_before,
                written,
            )
        self.not_before = written

    def _fresh_or_newest(self, fresh: Pin | None) -> Pin | None:
        """★ at the first query: the fresh pin taken for it; without one, the newest pin of
        the set, or the fallback."""
        if fresh is not None:
            self.pin_set.reify(fresh)
            return fresh
        self.pin_set.star = False
        newest = self.pin_set.newest()
        if newest is None:
            self._fall_back("the agent gave no fresh pin")
        return newest

    def _import_sql(self, pin: Pin) -> sql.Composed:
        """:func:`import_statement` for ``pin``; the new database transaction holds no lock
        yet, so no table counts as verified any more."""
        self._verified.clear()
        self._database_began = time.monotonic()  # before it began: it never looks younger
        return import_statement(pin)

    # -- a database transaction kept open between transactions (txcache._parking) ----------

    def _parked_wanted(self) -> tuple[Pin, SessionContext] | None:
        """The pin (and session context) of a parked database transaction this one could
        run in: the policy's choice, before the first query; ``None`` for ★ (a fresh pin)
        or without the cache."""
        if self.uncached or self.context is None or self.cache.parking.hold <= 0:
            return None
        choice = self._choose()
        if choice is None:
            return None
        if choice.server is not None and (self.primary_only or not self._replica_caught_up(choice)):
            return None
        return choice, self.context

    def _resume(self, parked: ParkedSnapshot[Any], pin: Pin) -> None:
        """Run in the parked database transaction: at its snapshot (``pin``, as this
        transaction's set has it), with the tables verified in it (its locks still hold off
        their rewrite)."""
        self._began_at(pin)
        self._verified = set(parked.verified)
        self._database_began = parked.began

    def _pin_used(self) -> Pin | None:
        """The pin this transaction ran at: its database transaction's, or for one that read
        only the cache the newest its hits left (every value it read is valid there);
        ``None`` when it ran at none."""
        return self.snapshot or (self.pin_set.newest() if self.read_cache else None)

    def _report_pin_use(self) -> None:
        """Tell the agent the pin this transaction ran at (:meth:`_pin_used`), so that the
        agent keeps it while it is of use
        (:meth:`~txcache._agent_state.AgentState.note_used`)."""
        agent = self.cache.agent
        if agent is None:
            return
        pin = self._pin_used()
        if pin is not None:
            agent.note_used(pin.ts, standby=pin.server is not None)

    # -- the audit (txcache._audit_core) ----------------------------------------------------

    def _hand_over_sampled(self, *, committing: bool) -> None:
        """As the block ends: the hits sampled for the audit go to the cache's auditor with
        the pin the transaction ran at. A block that failed drops them (counted skipped):
        its pin may be one it could not stay at (a snapshot lost, a move that failed)."""
        if not self.sampled:
            return
        sampled, self.sampled = self.sampled, []
        pin, auditor = self._pin_used(), self.cache.auditor
        if not committing or self._failure is not None or pin is None or auditor is None:
            skip(sampled)
            return
        auditor.submit(AuditBatch(pin, tuple(sampled)))

    def _bind_to(self, pin: Pin, context: SessionContext) -> None:
        """Make this an audit's transaction at ``pin``, for a call read in ``context``
        (:mod:`txcache.aio._audit`): its pin set is that pin alone, and it is bound to it as
        cached reads bind a transaction to its pins — it never takes a fresh pin, moves, or
        falls back to a snapshot of its own; whatever would make it (the pin gone, a rewrite
        or schema change after it, another session) raises :class:`SnapshotUnavailable`.
        Its cacheable calls run their functions (:attr:`reruns`)."""
        self.pin_set = PinSet([pin], star=False)
        self.read_cache = True
        self.reruns = True
        self._rerun_context = context

    def _check_rerun_context(self) -> None:
        """As an audit's transaction begins (:meth:`_adopt_context` done): raise
        :class:`~txcache._audit_core.AuditSkipped` unless it reads in the session context
        the call was read in."""
        if self.uncached:
            raise AuditSkipped(
                "the cache does not cache this database now (its catalog could not be read, "
                "or the agent follows another database)"
            )
        if self.context != self._rerun_context:
            raise AuditSkipped("the database's session context changed since the call")

    def _parkable(self, connection: Any, now: float) -> ParkedSnapshot[Any] | None:
        """The database transaction on ``connection`` as it may be kept for the next
        transaction at its pin: only one that is on a pin, young, in its transaction
        without error, and that met no failure, session change, schema change or statement
        whose code was not analysed."""
        pin, context = self.snapshot, self.context
        if pin is None or context is None or self.uncached or self.database_snapshot:
            return None
        if self._failure is not None or self.session_changed or self._catalog_moved:
            return None
        if self._ran_unanalysed:
            return None
        if not self.cache.parking.young(self._database_began, now) or not holds(connection):
            return None
        verified = frozenset(self._verified)
        return ParkedSnapshot(connection, pin, context, verified, self._database_began)

    def _imported(self, pin: Pin, imported: str | None) -> bool:
        """Whether the snapshot an import got (``imported``: its contents) is ``pin``'s:
        after a PostgreSQL restart its id can name another snapshot (equal contents mean
        equal visibility)."""
        if pin.snapshot_text is None or imported == pin.snapshot_text:
            return True
        log.warning(
            "pin %s: snapshot %s now names another snapshot (%s, not %s): PostgreSQL "
            "restarted since the pin was taken; choosing another",
            pin.ts,
            pin.snapshot_id,
            imported,
            pin.snapshot_text,
        )
        return False

    def _raise_not_before(self, token: int | None) -> None:
        """As the transaction begins: its context's read-your-writes token
        (:mod:`txcache._tokens`) — it must see what its thread or task wrote — joins
        ``not_before``, and the pin set is taken again if that moved it."""
        if token is None or (self.not_before is not None and token <= self.not_before):
            return
        self.not_before = token
        agent = self.cache.agent
        if agent is not None:
            now = time.time()
            self.pin_set = agent.pin_set(staleness=self.staleness, not_before=token, now=now)

    # -- the session context ----------------------------------------------------------------

    def _adopt_context(self, context: SessionContext | None) -> None:
        """As the transaction begins: its keys name ``context`` (the cache's
        :meth:`~txcache._cache_core.CacheCore._context_for`); ``None`` — caching is not
        sound for this cache's database, said once in the log — and it runs uncached."""
        if self.uncached:
            return
        if context is None:
            self.uncached = True
        self.context = context

    def _check_connection(self, connection_context: SessionContext) -> None:
        """The connection the transaction took runs in ``connection_context``: if that is
        not the context its keys name (the database's or a role's settings changed since
        the catalog reading), nothing it computes may be stored under them — it goes on
        without the cache, or, bound to cached values already, raises
        :class:`SnapshotUnavailable`."""
        if self.uncached or self.context is None or connection_context == self.context:
            return
        changed = ", ".join(connection_context.differences(self.context))
        if self.read_cache:
            raise SnapshotUnavailable(
                f"the session of this transaction's connection differs from the one its cached "
                f"values were read under ({changed} changed); retry the transaction"
            )
        self._fall_back(f"its connection's session differs from its keys' ({changed} changed)")

    def _fall_back(self, why: str) -> None:
        """Go on without the cache: only before any cached value was used."""
        assert not self.read_cache
        if not self.uncached:
            _fall_backs.log(
                logging.INFO, "read-only transaction continues without the cache: %s", why
            )
        self.uncached = True

    # -- statements -------------------------------------------------------------------------

    def _statement_count(self, statement: str, params: Params) -> int:
        """How many statements ``statement`` holds, once the block is known usable and
        each is a read (:class:`~txcache.StatementNotAllowed` names what is not)."""
        self.check_usable()
        return check_read_only(statement, params)

    def _may_run_untagged(self) -> bool:
        """A statement's tags cannot be derived: a bare query still runs (``True``; once
        its result is used no move may skip it), one inside a cacheable function does
        not."""
        return not self.frames

    def _catalog_check(self, analysed: Catalog | None) -> Statement | None:
        """The catalog check to run after a statement analysed with ``analysed`` (none
        without an analysis, or without the DDL counter): it tells whether the statement
        ran with the catalog of that reading (:meth:`_stale_read`); without DDL triggers,
        where the WAL was once it ran (:meth:`_ran_with_fingerprint`)."""
        if analysed is None:
            return None
        if self._fingerprinted():
            return WAL_POSITION
        if analysed.stamp is None:
            return None
        if self._runs_on_replica():
            return replica_stamp_check(analysed.stamp)
        return stamp_check(analysed.stamp)

    def _runs_on_replica(self) -> bool:
        """Whether the database transaction runs on a hot standby."""
        return self._server() is not None

    def _server(self) -> str | None:
        """The hot standby the database transaction runs on; ``None`` for the primary."""
        return self.snapshot.server if self.snapshot is not None else None

    def _fingerprinted(self) -> bool:
        """Whether the snapshot is a pin of an agent without DDL triggers: the catalog is
        checked by fingerprints (:mod:`txcache._pending_stores`), not by the DDL counter."""
        return self.snapshot is not None and self.snapshot.fingerprint is not None

    def store_verification(self, frame: Frame) -> tuple[int, str] | None:
        """``(WAL position, fingerprint)`` a pin must be taken after and show before the
        value of ``frame`` is stored, when it read the database at a pin of an agent
        without DDL triggers; ``None``: store it now."""
        fingerprint = self.snapshot.fingerprint if self.snapshot is not None else None
        if frame.snapshot is None or fingerprint is None:
            return None
        return self.wal_position, fingerprint

    def _stale_read(
        self,
        rewritten: list[str],
        analysed: Catalog | None,
        check: tuple[Any, ...] | None,
        *,
        refreshed: bool = False,
    ) -> StaleRead | None:
        """Why the statement just run must be dropped, or ``None`` when its result stands:
        it read relations rewritten after the snapshot, or it may have run with a catalog
        newer than the snapshot's (``check``: the catalog check's row). With
        ``refreshed``, the agent was just asked again: a barrier it still cannot place
        counts as a schema change."""
        if rewritten:
            return StaleRead.rewritten(rewritten)
        if analysed is None:
            return None  # not analysed: a bare query the cache knows nothing of
        verdict = self._ran_with(analysed, check)
        if verdict:
            return None
        self._catalog_moved = True
        return BARRIER_UNKNOWN if verdict is None and not refreshed else SCHEMA_CHANGED

    def _ran_with(self, analysed: Catalog, check: tuple[Any, ...] | None) -> bool | None:
        """Whether the query just run ran with the catalog of its snapshot: with the
        catalog reading ``analysed`` (``check``: the catalog check's row; a newer catalog
        has the library read it again), and that reading no newer than the snapshot — the
        snapshot is at or after where the reading began, or no schema change the agent
        decoded below it is newer than the snapshot. ``None`` when the agent's last
        refresh has not decoded that far."""
        assert self.snapshot is not None
        assert self.cache.agent is not None
        if self._fingerprinted():
            return self._ran_with_fingerprint(analysed, check)
        stamp = analysed.stamp
        if self._runs_on_replica():
            # A standby that shows another count may only lag: no new reading for it.
            if stamp is None or not still_current_on_replica(stamp, check):
                return False
        elif stamp is None or not still_current(stamp, check):
            self.cache.schema_moved()
            return False
        if self.snapshot.ts >= stamp.position:
            return True  # it sees every schema change in the reading
        barrier = self.cache.agent.schema_barrier(stamp.position)
        return None if barrier is None else self.snapshot.ts >= barrier

    def _ran_with_fingerprint(self, analysed: Catalog, check: tuple[Any, ...] | None) -> bool:
        """Without DDL triggers: records where the WAL was once the query ended (its
        values wait for a pin taken after it to verify the catalog). A snapshot older than
        a schema change the agent has announced did not (``False``: the transaction moves
        past it, as with the triggers). A reading whose fingerprint is not the snapshot's
        has the library read the catalog again, and nothing this transaction computes is
        stored; the result stands — it is what PostgreSQL's own REPEATABLE READ gives a
        transaction begun before a schema change no one has seen yet (docs/library.md,
        "Without event triggers")."""
        assert self.snapshot is not None
        if check is not None:
            self.wal_position = max(self.wal_position, int(check[0]))
        agent = self.cache.agent
        assert agent is not None
        barrier = agent.newest_barrier()
        if barrier is not None and self.snapshot.ts < barrier:
            return False
        stamp = analysed.stamp
        if stamp is None or stamp.fingerprint != self.snapshot.fingerprint:
            if not agent.fingerprints:
                agent.fingerprints = True  # the pin says so, maybe before a refresh did
            self.cache.schema_moved()
            self._catalog_moved = True
            self._tags_known = False  # its tags are another catalog's: no move may use them
        return True

    def _rewrite_check(
        self,
        tags: frozenset[str] | None,
        analysed: Catalog | None,
        catalog_check: Statement | None,
    ) -> RewriteCheck | None:
        """The rewrite check a statement needs (``None``: its tables were verified in
        this database transaction already): by oid when its tags name every relation it
        reads and the catalog check proves them current (:func:`rewritten_tables_statement`), else
        over every relation the transaction holds a lock on (:data:`REWRITTEN`)."""
        if self._verified_already(tags):
            return None
        if tags is None or analysed is None or catalog_check is None or self._fingerprinted():
            return ALL_LOCKED  # without DDL triggers no check proves the analysis current
        tables = {}
        for table in _tables(tags):
            relation = analysed.by_tag.get(table)
            if relation is None or not _plain_table(relation):
                return ALL_LOCKED
            tables[relation.oid] = table
        oids = tuple(sorted(tables))
        return RewriteCheck(rewritten_tables_statement(len(oids)), oids, tables)

    def _verified_already(self, tags: frozenset[str] | None) -> bool:
        """Whether the statement can skip the rewrite check: ``bypass`` mode (PostgreSQL's
        own semantics), or tags that name only tables verified in this database
        transaction. Without tags (a bare query that was not analysed) it cannot: the
        statement may read anything. A partitioned table is never verified (its name is
        not among the relations checked), so which partitions a query reads never
        matters."""
        if self.cache.mode == "bypass":
            return True
        if tags is None:
            return False
        return self._verified.issuperset(_tables(tags))

    def _rewritten(self, check: RewriteCheck, rows: list[Any]) -> list[str]:
        """The relations ``check`` found rewritten (its rows); when there are none,
        records the ones it verified."""
        if check.tables is not None:
            return self._rewritten_tables(check.tables, rows)
        rewritten: list[str] = []
        verified: list[str] = []
        for schema, name, is_rewritten, still_named in rows:
            if is_rewritten:
                rewritten.append(name if schema is None else f"{schema}.{name}")
            elif still_named:
                verified.append(table_name(schema, name))
        if not rewritten:
            self._verified.update(verified)
        return rewritten

    def _rewritten_tables(self, tables: dict[int, str], rows: list[Any]) -> list[str]:
        """What :func:`rewritten_tables_statement` found for ``tables``: the rewritten ones and the
        ones the snapshot does not know; when there are none, records them verified."""
        seen = {int(oid): is_rewritten for oid, is_rewritten in rows}
        rewritten = [name for oid, name in tables.items() if seen.get(oid, True)]
        if not rewritten:
            self._verified.update(tables.values())
        return rewritten

    def _record_query(self, tags: frozenset[str] | None) -> None:
        """A statement's result reaches the application: its tags join every frame;
        without tags, nothing tells any more where what was read stays valid."""
        if tags is None:
            self._tags_known = False
        elif self.snapshot is not None:
            self._query_tags.update(tags)
            for frame in self.frames:
                frame.read_database(self.snapshot.ts, tags)
        self._read_database = True

    # -- moving past a rewrite or a schema change -------------------------------------------

    def _results_valid_anywhere(self) -> bool:
        """Whether no query result read so far depends on data (none was read, or every
        one was tagged with no table, as ``SELECT 1``): any later snapshot fits it."""
        return not self._read_database or (self._tags_known and not self._query_tags)

    def _node_behind(self, known: Interval | None, fresh: Pin | None) -> bool:
        """Whether ``known`` (``TXINTERVAL``) ends only because the node has not applied
        the stream as far as the ``fresh`` pin: the driver asks again once it has."""
        return known is not None and known.open and fresh is not None and known.hi <= fresh.ts

    def _later_window(
        self, stale: StaleRead, valid: tuple[int, int] | None, *, last_chance: bool
    ) -> tuple[int, int]:
        """Where the database transaction may move past what made a read ``stale``: after
        the active snapshot (only a later one shows the change) and where every query
        result read so far stays valid (``valid``; ``None``: unknown). Raises when it
        cannot move (on the unpinned fallback there is no pin to move to)."""
        active = self.snapshot
        if active is None or valid is None or last_chance:
            raise stale.error()
        return max(valid[0], active.ts + 1), valid[1]

    def _later_candidates(self, fresh: Pin | None, lo: int, hi: int) -> list[Pin]:
        """The pins to try, in order: the fresh pin (taken only while no cached value was
        used), then the newest pins of the set in ``[lo, hi)``."""
        candidates = [fresh] if fresh is not None and lo <= fresh.ts < hi else []
        return self._on_this_server(candidates + self.pin_set.within(lo, hi)[::-1])

    def _moved_past(self, stale: StaleRead, pin: Pin, hi: int) -> None:
        assert self.snapshot is not None
        log.info(
            "pin %s: %s; the transaction moves to pin %s", self.snapshot.ts, stale.what, pin.ts
        )
        self.pin_set.reify(pin)  # ★ became this pin, or it is in the set already
        self.pin_set.narrow(pin.ts, hi)  # never back before the change
        self._moved_to(pin)

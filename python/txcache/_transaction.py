"""Transactions: read-only ones that read through the cache at one commit point, and
read/write ones that go straight to PostgreSQL (DESIGN.md §1, §7).

A :class:`ReadOnlyTransaction` keeps a :class:`~txcache._pinset.PinSet`. Cache lookups ask
for any version valid between its smallest and largest pin; each hit narrows the set. The
database transaction starts lazily, at the first query, on a pin chosen by the pin policy
(or ★: a pin taken now). Query results are valid at that snapshot; when a later hit is not,
the library asks a node over which range the transaction's query results stay valid
(``TXINTERVAL``) and, if some pin lies in both, moves the database transaction there.

Falling back: when no pin can be had (the agent is down), a read-only transaction runs on a
plain ``REPEATABLE READ READ ONLY`` snapshot without the cache from then on — slower, never
wrong.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import psycopg
from psycopg import sql

from txcache._frame import Frame
from txcache._nodes import CacheNode, Hit, Interval, Miss
from txcache._pinset import Pin, PinSet
from txcache._sql import UncacheableQuery
from txcache.errors import NoTransaction, SnapshotUnavailable, TransactionError

if TYPE_CHECKING:
    from txcache._connect import Cache

__all__ = [
    "Params",
    "ReadOnlyTransaction",
    "ReadWriteTransaction",
    "Row",
    "Transaction",
    "current_transaction",
    "execute",
    "query",
    "query_one",
]

log = logging.getLogger("txcache")

Params = Sequence[Any] | Mapping[str, Any] | None
Row = tuple[Any, ...]
Connection = psycopg.Connection[Row]

_current: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar(
    "txcache_transaction", default=None
)
# snapshot "…" does not exist / invalid snapshot identifier / its exporter just ended
_NO_SNAPSHOT = ("42704", "22023", "55000")
_BEGIN_READ_ONLY = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def current_transaction() -> Transaction | None:
    """The transaction running in this thread or task, if any."""
    return _current.get()


def _require() -> Transaction:
    transaction = _current.get()
    if transaction is None:
        raise NoTransaction(
            "no transaction: run queries inside `with cache.read_only(...)` or "
            "`with cache.read_write()`"
        )
    return transaction


def execute(statement: str, params: Params = None) -> psycopg.Cursor[Row]:
    """Run ``statement`` in the current transaction; returns the cursor."""
    return _require().execute(statement, params)


def query(statement: str, params: Params = None) -> list[Row]:
    """Every row of ``statement``, run in the current transaction."""
    return _require().query(statement, params)


def query_one(statement: str, params: Params = None) -> Row | None:
    """The first row of ``statement`` (or ``None``), run in the current transaction."""
    return _require().query_one(statement, params)


class Transaction:
    """What both kinds of transaction share: a context manager with a database connection
    taken from the cache's pool when first needed. A transaction belongs to the thread that
    began it (its state is not shared between threads, even through a copied context)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._connection: Connection | None = None
        self._token: contextvars.Token[Transaction | None] | None = None
        self.owner = 0
        """The ident of the thread that began it."""

    def __enter__(self) -> Self:
        if _current.get() is not None:
            raise TransactionError("a transaction is already running in this context")
        self.owner = threading.get_ident()
        self._token = _current.set(self)
        try:
            self._begin()
        except BaseException:
            _current.reset(self._token)
            self._token = None
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        try:
            if token is not None:
                _current.reset(token)
        finally:
            self._finish(committing=exc_type is None)

    def check_owner(self) -> None:
        """Refuse use from a thread other than the one that began the transaction."""
        if threading.get_ident() != self.owner:
            raise TransactionError(
                "a transaction belongs to the thread that began it; begin one per thread"
            )

    def execute(self, statement: str, params: Params = None) -> psycopg.Cursor[Row]:
        """Run ``statement``; returns the cursor (rows not fetched)."""
        raise NotImplementedError

    def query(self, statement: str, params: Params = None) -> list[Row]:
        """Every row of ``statement``."""
        return self.execute(statement, params).fetchall()

    def query_one(self, statement: str, params: Params = None) -> Row | None:
        """The first row of ``statement``, or ``None``."""
        return self.execute(statement, params).fetchone()

    def _begin(self) -> None:
        """Whatever must happen on entering the block (nothing, by default)."""

    def _finish(self, *, committing: bool) -> None:
        raise NotImplementedError


# Commit in one round trip, learning the transaction id first. SET CONSTRAINTS ALL
# IMMEDIATE fires the pending deferred triggers now rather than inside COMMIT, so a write of
# theirs assigns the id before it is read (their outcome is the same). A held (WITH HOLD)
# cursor is still run to its end by COMMIT, and can write then: the flag says there is one.
_COMMIT = (
    "SET CONSTRAINTS ALL IMMEDIATE; "
    "SELECT pg_current_xact_id_if_assigned()::text, "
    "EXISTS (SELECT FROM pg_cursors WHERE is_holdable); "
    "COMMIT"
)


class ReadWriteTransaction(Transaction):
    """Straight to PostgreSQL, no cache. After commit, :attr:`commit_timestamp` is the
    token a read-only transaction passes as ``not_before`` to see this transaction's
    writes. Its connection goes back to the pool reset (:meth:`Cache.release`)."""

    def __init__(self, cache: Cache, isolation: str | None = None) -> None:
        super().__init__(cache)
        self._isolation = isolation
        self.xid: int | None = None
        """The transaction's id (``pg_current_xact_id()``), known after commit; ``None``
        if it wrote nothing before ``COMMIT``."""
        self._committed = False
        self._timestamp: int | None = None
        self._commit_may_write = False  # COMMIT ran a held cursor: it may have written

    def _begin(self) -> None:
        connection: Connection = self.cache.pool.getconn()
        isolation = f" ISOLATION LEVEL {self._isolation}" if self._isolation else ""
        try:
            connection.execute(f"BEGIN{isolation}")
        except BaseException:
            self.cache.pool.putconn(connection)
            raise
        self._connection = connection

    def execute(self, statement: str, params: Params = None) -> psycopg.Cursor[Row]:
        """See :meth:`Transaction.execute`."""
        if self._connection is None:
            raise TransactionError("this read/write transaction has ended")
        self.check_owner()
        return self._connection.execute(statement, params)

    def _finish(self, *, committing: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            self._end(connection, committing=committing)
        finally:
            # The block ran the application's SQL: a SET, a temporary table, a lock it left
            # must not change what the connection's next transactions compute.
            self.cache.release(connection, reset=True)

    def _end(self, connection: Connection, *, committing: bool) -> None:
        """Commit (or roll back) the database transaction."""
        try:
            status = connection.info.transaction_status
            if committing and status == psycopg.pq.TransactionStatus.INTRANS:
                self._commit(connection)
            elif status != psycopg.pq.TransactionStatus.IDLE:
                connection.execute("ROLLBACK")
                if committing:  # the block caught a failed statement and went on
                    raise TransactionError(
                        "a statement failed inside the read/write block, so the transaction "
                        "was rolled back: nothing was written"
                    )
        except psycopg.Error:
            if committing:
                raise
            log.debug("rollback failed after an error", exc_info=True)  # keep the user's error

    def _commit(self, connection: Connection) -> None:
        """``_COMMIT``: fire deferred triggers, read the transaction id, commit."""
        cursor = connection.execute(_COMMIT)
        cursor.nextset()  # past SET CONSTRAINTS, to the SELECT
        found = cursor.fetchone()
        assert found is not None
        xid, holds_cursors = found
        self.xid = None if xid is None else int(xid)
        self._committed = True
        self._commit_may_write = self.xid is None and bool(holds_cursors)

    @property
    def commit_timestamp(self) -> int | None:
        """The commit LSN of this transaction (``None`` if it wrote nothing): pass it as
        ``not_before``. Asks the agent, which answers once its stream decoded the commit;
        if the agent cannot answer, or the commit itself may have written without the
        transaction id being known before (a held cursor ran to its end), a WAL position
        at or after the commit stands in (just as safe, possibly newer than needed)."""
        if not self._committed:
            raise TransactionError("commit_timestamp is known only after the commit")
        if self._timestamp is None and (self.xid is not None or self._commit_may_write):
            lsn = self._commit_lsn()
            self._timestamp = lsn if lsn is not None else self._wal_position()
        return self._timestamp

    def _commit_lsn(self) -> int | None:
        """The agent's answer for :attr:`xid`; ``None`` without an xid or an answer."""
        agent = self.cache.agent
        if self.xid is None or agent is None:
            return None
        return agent.commit_lsn(self.xid, timeout=1.0)

    def _wal_position(self) -> int:
        with self.cache.pool.connection() as connection:
            row = connection.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        high, low = str(row[0]).split("/")
        return (int(high, 16) << 32) | int(low, 16)


def _begin_unpinned(connection: Connection) -> str:
    """A read-only transaction on a snapshot of its own; returns the snapshot (its first
    statement takes it)."""
    connection.execute(_BEGIN_READ_ONLY)
    row = connection.execute("SELECT pg_current_snapshot()::text").fetchone()
    assert row is not None
    return str(row[0])


class ReadOnlyTransaction(Transaction):
    """Reads at one commit point, from the cache where possible (module docstring)."""

    def __init__(self, cache: Cache, staleness: float, not_before: int | None) -> None:
        super().__init__(cache)
        self.staleness = staleness
        self.not_before = not_before
        self.frames: list[Frame] = []
        self.snapshot: Pin | None = None
        """The pin the database transaction runs at (``None`` before the first query)."""
        self.uncached = cache.mode == "bypass" or cache.ring is None or cache.agent is None
        """Whether the cache is out of use for the rest of the transaction."""
        self.moves = 0
        """How often the database transaction moved to another pin."""
        self.read_cache = False
        """Whether a cached value was used (the transaction is then bound to the pins)."""
        self._closed = False
        self.database_snapshot: str | None = None
        """After a fallback to the database: its snapshot (``pg_current_snapshot()``, as
        ``xmin:xmax:xip,…``). Such a transaction has PostgreSQL's guarantee — one snapshot —
        but under concurrent commits a snapshot need not be a prefix of commit order
        (docs/library.md)."""
        self._query_tags: set[str] = set()
        self._tags_known = True  # False once a query's tags could not be derived
        agent = cache.agent
        if self.uncached or agent is None:
            self.pin_set = PinSet((), star=True)
        else:
            now = time.time()
            self.pin_set = agent.pin_set(staleness=staleness, not_before=not_before, now=now)

    # -- the cache --------------------------------------------------------------------------

    def lookup(self, node: CacheNode, key: bytes) -> Hit | Miss:
        """The cached version of ``key`` this transaction may use, narrowing the pin set; a
        hit no pin of the set can be serialized with is a ``consistency`` miss."""
        bounds = self._lookup_bounds()
        if bounds is None:
            return Miss("unavailable")
        started = time.perf_counter()
        found = node.lookup(key, bounds[0], bounds[1], with_tags=bool(self.frames))
        self.cache.latency.record_lookup(time.perf_counter() - started)
        if isinstance(found, Hit):
            if not self._accept(found.interval):
                return Miss("consistency")
            self.read_cache = True
        return found

    def _lookup_bounds(self) -> tuple[int, int] | None:
        bounds = self.pin_set.bounds()
        if bounds is None:
            fresh = self.cache.agent.pin_now() if self.cache.agent is not None else None
            if fresh is None:
                self._fall_back("no pin within the staleness limit and no fresh pin")
                return None
            self.pin_set.reify(fresh)
            bounds = (fresh.ts, fresh.ts)
        if self.cache.mode == "no_consistency":
            return bounds[0], 2**63 - 1
        return bounds

    def _accept(self, interval: Interval) -> bool:
        """Narrow the pin set to ``interval``, moving the database transaction if needed;
        ``False`` when no pin fits (nothing changed)."""
        if self.cache.mode == "no_consistency":
            return True
        active = self.snapshot
        if active is None or interval.lo <= active.ts < interval.hi:
            return self.pin_set.narrow(interval.lo, interval.hi)
        return self._move(interval)

    def _move(self, interval: Interval) -> bool:
        """Move the database transaction to a pin where both ``interval`` and every query
        result read so far are valid, if there is one. The same connection is reused (a
        second one could wait forever on a full pool)."""
        active, connection = self.snapshot, self._connection
        assert active is not None
        assert connection is not None
        assert self.cache.ring is not None
        node = self.cache.ring.any_up()
        if not self._tags_known or node is None:
            return False
        known = node.database_interval(active.ts, sorted(self._query_tags))
        if known is None:
            return False
        lo, hi = max(interval.lo, known.lo), min(interval.hi, known.hi)
        candidates = self.pin_set.within(lo, hi)
        if not candidates:
            return False
        for pin in reversed(candidates):
            if self._import(connection, pin):
                self._moved_to(pin)
                self.pin_set.narrow(lo, hi)
                return True
            self.pin_set.discard(pin)
        if not self._import(connection, active):
            raise SnapshotUnavailable(
                "the snapshot this transaction ran at was released while it tried to move; "
                "retry the transaction"
            )
        return False

    def _moved_to(self, pin: Pin) -> None:
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

    # -- the database -----------------------------------------------------------------------

    def execute(self, statement: str, params: Params = None) -> psycopg.Cursor[Row]:
        """See :meth:`Transaction.execute`. Inside a cacheable function the query must be
        cacheable: :class:`~txcache.UncacheableQuery` names what is not."""
        self.check_owner()
        connection = self._database()
        tags = self._tags(statement, params) if not self.uncached else None
        started = time.perf_counter()
        cursor = connection.execute(statement, params)
        self.cache.latency.record_query(time.perf_counter() - started)
        if self.snapshot is not None and tags is not None:
            self._query_tags.update(tags)
            for frame in self.frames:
                frame.read_database(self.snapshot.ts, tags)
        return cursor

    def _tags(self, statement: str, params: Params) -> frozenset[str] | None:
        assert self.snapshot is not None
        try:
            return self.cache.analyze(statement, params, self.snapshot.ts)
        except UncacheableQuery:
            if self.frames:
                raise
            self._tags_known = False  # a bare query: fine to run, but no move may skip it
            return None

    def _database(self) -> Connection:
        if self._closed:
            raise TransactionError("this read-only transaction has ended")
        if self._connection is not None:
            return self._connection
        connection: Connection = self.cache.pool.getconn()
        try:
            if self.uncached or not self._begin_pinned(connection):
                self.database_snapshot = _begin_unpinned(connection)
        except BaseException:
            self._release(connection)
            raise
        self._connection = connection
        return connection

    def _begin_pinned(self, connection: Connection) -> bool:
        """Start the database transaction on ``connection`` at the policy's choice of pin
        (or ★); ``False`` when the transaction falls back to an unpinned snapshot."""
        while True:
            choice = self._choose()
            if choice is None:
                choice = self._take_fresh_pin()
                if choice is None:
                    return False
            if self._import(connection, choice):
                self.snapshot = choice
                self.pin_set.star = False  # the transaction now has a concrete time
                return True
            self.pin_set.discard(choice)
            if self.pin_set.star or len(self.pin_set):
                continue
            if self.read_cache:
                raise SnapshotUnavailable(
                    "every pin this transaction's cached reads are valid at has been "
                    "released; retry the transaction"
                )
            self._fall_back("no pin could be imported")
            return False

    def _choose(self) -> Pin | None:
        """The policy's choice, held to the rules: ★ only while possible, else a pin of
        the set (a policy that breaks them gets the newest pin)."""
        choice = self.cache.policy(self.pin_set, time.time())
        if choice is None and self.pin_set.star:
            return None
        if choice is not None and choice in self.pin_set.within(choice.ts, choice.ts + 1):
            return choice
        newest = self.pin_set.newest()
        return newest if newest is not None or not self.pin_set.star else None

    def _take_fresh_pin(self) -> Pin | None:
        """★: a pin taken now. Without one, the newest pin of the set, or the fallback."""
        fresh = self.cache.agent.pin_now() if self.cache.agent is not None else None
        if fresh is not None:
            self.pin_set.reify(fresh)
            return fresh
        self.pin_set.star = False
        newest = self.pin_set.newest()
        if newest is None:
            self._fall_back("the agent gave no fresh pin")
        return newest

    def _import(self, connection: Connection, pin: Pin) -> bool:
        """Put ``connection`` in a read-only transaction at ``pin`` (ending the one it was
        in); ``False`` if the snapshot can no longer be imported."""
        try:
            if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                connection.execute("ROLLBACK")
            connection.execute(
                sql.SQL("{}; SET TRANSACTION SNAPSHOT {}").format(
                    sql.SQL(_BEGIN_READ_ONLY), sql.Literal(pin.snapshot_id)
                )
            )
        except psycopg.Error as error:
            if error.sqlstate not in _NO_SNAPSHOT:
                raise
            log.info("pin %s is gone (%s); choosing another", pin.ts, error)
            connection.execute("ROLLBACK")
            return False
        return True

    def _finish(self, *, committing: bool) -> None:
        # Nothing to commit: everything was read already, so a failure here (PostgreSQL
        # restarting) must not turn a finished read into an error.
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            self._release(connection)

    def _release(self, connection: Connection) -> None:
        try:
            if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                connection.execute("ROLLBACK")
        except psycopg.Error:
            log.debug("rollback of a left snapshot failed", exc_info=True)
        self.cache.pool.putconn(connection)

    def _fall_back(self, why: str) -> None:
        """Go on without the cache: only before any cached value was used."""
        assert not self.read_cache
        if not self.uncached:
            log.info("read-only transaction continues without the cache: %s", why)
        self.uncached = True

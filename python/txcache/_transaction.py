"""Transactions: read-only ones that read through the cache at one commit point, and
read/write ones that go straight to PostgreSQL.

A :class:`ReadOnlyTransaction` keeps a :class:`~txcache._pinset.PinSet`. Cache lookups ask
for any version valid between its smallest and largest pin; each hit narrows the set. The
database transaction starts lazily, at the first query, on a pin chosen by the pin policy
(or ★: a pin taken now). Query results are valid at that snapshot; when a later hit is not,
the library asks a node over which range the transaction's query results stay valid
(``TXINTERVAL``) and, if some pin lies in both, moves the database transaction there.

Falling back: when no pin can be had (the agent is down), a read-only transaction runs on a
plain ``REPEATABLE READ READ ONLY`` snapshot without the cache from then on — slower, never
wrong.

What a read-only transaction guards against (docs/library.md, "Read-only safety"):

- statements that would end or change the transaction or the session, or write, are
  refused before they reach the database (:mod:`txcache._statements`);
- once a statement failed in the database, the whole block is failed: every later lookup,
  query and cacheable call raises, and nothing more is stored;
- a snapshot taken before a ``TRUNCATE`` (or a table-rewriting ``ALTER TABLE``) that reads
  the table after it committed sees it empty. After a query, the relations it read are
  checked (their file node at the snapshot against the current one; the transaction's lock
  holds off any later rewrite); a rewritten one drops the result, moves the database
  transaction to a later pin and runs the query again, or raises
  :class:`~txcache.SnapshotUnavailable`;
- a pin's snapshot id can name another snapshot after a PostgreSQL restart: an import is
  checked against the pin's snapshot contents in the same round trip.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, Self, TypeVar, overload

import psycopg
from psycopg import sql
from psycopg.rows import RowFactory, tuple_row

from txcache._catalog_stamp import stamp_check, still_current
from txcache._frame import Frame
from txcache._nodes import CacheNode, Hit, Interval, Miss
from txcache._pinset import Pin, PinSet
from txcache._schema import Catalog, table_name
from txcache._sql import UncacheableQuery
from txcache._statements import check_read_only
from txcache.errors import (
    NoTransaction,
    SnapshotUnavailable,
    StatementNotAllowed,
    TransactionError,
)

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
R = TypeVar("R")
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


@overload
def execute(
    statement: str, params: Params = None, *, row_factory: None = None
) -> psycopg.Cursor[Row]: ...
@overload
def execute(
    statement: str, params: Params = None, *, row_factory: RowFactory[R]
) -> psycopg.Cursor[R]: ...
def execute(
    statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
) -> psycopg.Cursor[Any]:
    """Run ``statement`` in the current transaction; returns the cursor. ``row_factory``
    (psycopg's, e.g. ``psycopg.rows.dict_row``) shapes its rows; tuples by default."""
    return _require().execute(statement, params, row_factory=row_factory)


@overload
def query(statement: str, params: Params = None, *, row_factory: None = None) -> list[Row]: ...
@overload
def query(statement: str, params: Params = None, *, row_factory: RowFactory[R]) -> list[R]: ...
def query(
    statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
) -> list[Any]:
    """Every row of ``statement``, run in the current transaction."""
    return _require().query(statement, params, row_factory=row_factory)


@overload
def query_one(statement: str, params: Params = None, *, row_factory: None = None) -> Row | None: ...
@overload
def query_one(statement: str, params: Params = None, *, row_factory: RowFactory[R]) -> R | None: ...
def query_one(
    statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
) -> Any:
    """The first row of ``statement`` (or ``None``), run in the current transaction."""
    return _require().query_one(statement, params, row_factory=row_factory)


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

    def execute(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> psycopg.Cursor[Any]:
        """Run ``statement``; returns the cursor (rows not fetched), its rows made by
        ``row_factory`` (tuples by default; docs/library.md, "Rows")."""
        raise NotImplementedError

    def query(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> list[Any]:
        """Every row of ``statement``."""
        return self.execute(statement, params, row_factory=row_factory).fetchall()

    def query_one(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> Any:
        """The first row of ``statement``, or ``None``."""
        return self.execute(statement, params, row_factory=row_factory).fetchone()

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
        connection: Connection = self.cache.checkout()
        isolation = f" ISOLATION LEVEL {self._isolation}" if self._isolation else ""
        try:
            connection.execute(f"BEGIN{isolation}")
        except BaseException:
            self.cache.pool.putconn(connection)
            raise
        self._connection = connection

    def execute(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> psycopg.Cursor[Any]:
        """See :meth:`Transaction.execute`."""
        if self._connection is None:
            raise TransactionError("this read/write transaction has ended")
        self.check_owner()
        cursor = self._connection.cursor(row_factory=row_factory or tuple_row)
        return cursor.execute(statement, params)

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
            self._timestamp = lsn if lsn is not None else self.cache.timestamp()
        return self._timestamp

    def _commit_lsn(self) -> int | None:
        """The agent's answer for :attr:`xid`; ``None`` without an xid or an answer."""
        agent = self.cache.agent
        if self.xid is None or agent is None:
            return None
        return agent.commit_lsn(self.xid, timeout=1.0)


# The relations the read-only transaction has read (it holds an AccessShareLock on each
# until it ends), with, per relation: whether a TRUNCATE or a table-rewriting ALTER TABLE
# committed after the snapshot — pg_class as the snapshot sees it names another file node
# than the current catalog (pg_relation_filenode) — and whether its name, as of the
# snapshot, still names it (it then counts as verified for the rest of the database
# transaction: the lock holds off any rewrite, rename or drop). A relation the snapshot
# does not know (created, or dropped and created again, since) counts as rewritten unless
# it has no storage or is an index. Catalogs (oid < 16384) cannot be truncated or rewritten
# in a way an MVCC snapshot could not read. docs/library.md, "Rewritten tables".
_REWRITTEN = """
SELECT n.nspname::text, coalesce(c.relname::text, l.relation::regclass::text),
       CASE WHEN c.oid IS NULL
            THEN pg_relation_filenode(l.relation) IS NOT NULL
                 AND pg_get_indexdef(l.relation) IS NULL
            ELSE c.relkind IN ('r', 'm')
                 AND pg_relation_filenode(c.oid) IS DISTINCT FROM c.relfilenode
       END,
       c.oid IS NOT NULL AND to_regclass(format('%I.%I', n.nspname, c.relname)) = c.oid
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_class c ON c.oid = l.relation
LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.relation >= 16384
  AND (c.oid IS NULL OR c.relkind IN ('r', 'm', 'v'))
"""
# PostgreSQL's refusal to run a prepared statement whose result type a schema change altered.
_CHANGED_RESULT_TYPE = "cached plan must not change result type"
# A statement and its parameters.
_Statement = tuple[str, tuple[Any, ...]]
# The snapshot an import ended up with, to compare with the pin's (same round trip).
_IMPORTED_SNAPSHOT = "SELECT pg_current_snapshot()::text"
# How often one statement may move the database transaction past a rewrite: a pin is
# chosen after the rewrite it met, so only rewrites committing meanwhile can need more.
_REWRITE_MOVES = 3
_NO_LIMIT = 2**63 - 1


class _ResultCursor(psycopg.Cursor[Row]):
    """What a read-only transaction's ``execute`` returns: the statement's results. Its own
    ``execute``, ``executemany``, ``copy`` and ``stream`` refuse — a statement sent through
    them would skip the statement check, the rewrite check and the tags the cache needs."""

    def run(self, statement: str, params: Params) -> None:
        """Run ``statement`` (the transaction's own use)."""
        super().execute(statement, params)

    def execute(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: run statements through the transaction (``txcache.execute``)."""
        raise _cursor_refusal()

    def executemany(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise _cursor_refusal()

    def copy(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise _cursor_refusal()

    def stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise _cursor_refusal()


def _cursor_refusal() -> StatementNotAllowed:
    return StatementNotAllowed(
        "the cursor a read-only transaction returns only holds results: run statements "
        "through the transaction (txcache.execute / tx.execute), which checks them"
    )


def _rewritten_error(relations: Sequence[str]) -> SnapshotUnavailable:
    return SnapshotUnavailable(
        f"{', '.join(relations)}: a TRUNCATE / table-rewriting ALTER TABLE committed after "
        "this transaction's snapshot (which would read the table empty), and no later "
        "snapshot fits what the transaction read so far; retry the transaction"
    )


def _tables(tags: frozenset[str]) -> set[str]:
    """The tables and views (``schema.name``, escaped as in tags) that ``tags`` name."""
    return {tag.partition(":")[0] for tag in tags}


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
        self.rewrite_checks = 0
        """How many statements ran with the check for relations rewritten after the
        snapshot (the others read only relations verified earlier in the same database
        transaction)."""
        self._query_tags: set[str] = set()
        self._tags_known = True  # False once a query's tags could not be derived
        self._read_database = False  # whether a query result reached the application
        self._verified: set[str] = set()  # tables checked in this database transaction
        self._failure: str | None = None  # the error that failed the block
        self._catalog_moved = False
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
        if self._failure is not None:
            self.check_usable()
        bounds = self._lookup_bounds()
        if bounds is None:
            return Miss("unavailable")
        started = time.perf_counter()
        found = node.lookup(key, bounds[0], bounds[1], with_tags=bool(self.frames))
        self.cache.latency.record_lookup(time.perf_counter() - started)
        if isinstance(found, Hit):
            try:
                accepted = self._accept(found.interval)
            except (psycopg.Error, SnapshotUnavailable) as error:  # a move failed
                self._fail(error)
                raise
            if not accepted:
                return Miss("consistency")
            self.read_cache = True
        return found

    def _lookup_bounds(self) -> tuple[int, int] | None:
        bounds = self.pin_set.bounds()
        if bounds is None:
            fresh = self._fresh_pin()
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

    def execute(
        self, statement: str, params: Params = None, *, row_factory: RowFactory[Any] | None = None
    ) -> psycopg.Cursor[Any]:
        """See :meth:`Transaction.execute`. Only reads run:
        :class:`~txcache.StatementNotAllowed` names what does not (nothing is sent). Inside
        a cacheable function the query must be cacheable: :class:`~txcache.UncacheableQuery`
        names what is not. A database error (or :class:`~txcache.SnapshotUnavailable`)
        fails the block: every later lookup, query and cacheable call raises
        :class:`~txcache.TransactionError`. The cursor returned holds the results only."""
        self.check_owner()
        self.check_usable()
        statements = check_read_only(statement, params)
        try:
            connection = self._database()
            cursor, tags = self._run(
                connection, statement, params, single=statements == 1, rows=row_factory
            )
        except psycopg.errors.FeatureNotSupported as error:
            self._fail(error)
            if _CHANGED_RESULT_TYPE not in str(error):
                raise
            self.cache.schema_moved()
            raise SnapshotUnavailable(
                "a schema change committed after this transaction's snapshot altered the "
                "result type of a statement prepared earlier on its connection; retry the "
                "transaction (its connection forgets its prepared statements)"
            ) from error
        except (psycopg.Error, SnapshotUnavailable) as error:
            self._fail(error)
            raise
        if self.snapshot is not None and tags is not None:
            self._query_tags.update(tags)
            for frame in self.frames:
                frame.read_database(self.snapshot.ts, tags)
        self._read_database = True
        return cursor

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
            first_line = str(error).partition("\n")[0]
            self._failure = f"{type(error).__name__}: {first_line}"

    def _run(
        self,
        connection: Connection,
        statement: str,
        params: Params,
        *,
        single: bool,
        rows: RowFactory[Any] | None,
    ) -> tuple[_ResultCursor, frozenset[str] | None]:
        """Run ``statement`` and, unless every table it reads was verified earlier in this
        database transaction, check the relations it read for a rewrite after the snapshot.
        A rewritten one drops the result: the database transaction moves past the rewrite
        and the statement runs again (or :class:`SnapshotUnavailable` is raised). Returns
        the cursor and the statement's tags (``None`` if not derived)."""
        for attempt in range(_REWRITE_MOVES + 1):
            tags, analysed = self._tags(statement, params) if not self.uncached else (None, None)
            cursor = _ResultCursor(connection, row_factory=rows or tuple_row)
            # Only what a cacheable function reads is stored: only there does it matter
            # which catalog the query ran with.
            stored = analysed is not None and bool(self.frames) and self.cache.mode != "bypass"
            stamp = analysed.stamp if analysed is not None else None
            check = stamp_check(stamp) if stored and stamp is not None else None
            started = time.perf_counter()
            rewritten, catalog = self._run_with_checks(
                connection,
                cursor,
                statement,
                params,
                single=single,
                rewrite_check=not self._verified_already(tags),
                catalog_check=check,
            )
            self.cache.latency.record_query(time.perf_counter() - started)
            if not rewritten:  # else the result is dropped: what it ran with does not matter
                if stored and analysed is not None and not self._ran_with(analysed, catalog):
                    self._catalog_moved = True
                return cursor, tags
            self._move_past_rewrite(rewritten, last_chance=attempt == _REWRITE_MOVES)
        raise AssertionError("unreachable: the last move past a rewrite raises")

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

    def _ran_with(self, analysed: Catalog, check: tuple[Any, ...] | None) -> bool:
        """Whether the query just run (``check``: the catalog check's row) ran with the
        catalog reading ``analysed`` and that reading is its snapshot's: no schema change
        in it is newer than the snapshot (the query ran the reading's definitions over
        older data otherwise). A newer catalog has the library read it again."""
        assert self.snapshot is not None
        assert self.cache.agent is not None
        stamp = analysed.stamp
        if stamp is None or not still_current(stamp, check):
            self.cache.schema_moved()
            return False
        barrier = self.cache.agent.schema_barrier(stamp.position)
        return barrier is not None and self.snapshot.ts >= barrier

    def _run_with_checks(
        self,
        connection: Connection,
        cursor: _ResultCursor,
        statement: str,
        params: Params,
        *,
        single: bool,
        rewrite_check: bool,
        catalog_check: _Statement | None,
    ) -> tuple[list[str], tuple[Any, ...] | None]:
        """Run ``statement``, then ``_REWRITTEN`` (with ``rewrite_check``) and the catalog
        check (if any) — in one round trip (a pipeline) when it is a single statement
        (several go by the simple protocol, which a pipeline refuses). Returns the
        rewritten relations read (and otherwise records the verified ones) and the catalog
        check's row."""
        checks = rewrite_check or catalog_check is not None
        rewrite: psycopg.Cursor[Any] | None = None
        catalog: psycopg.Cursor[Any] | None = None
        with connection.pipeline() if single and checks else contextlib.nullcontext():
            cursor.run(statement, params)
            if rewrite_check:
                self.rewrite_checks += 1
                rewrite = connection.execute(_REWRITTEN)
            if catalog_check is not None:
                catalog = connection.execute(*catalog_check)
        rewritten = self._rewritten(rewrite.fetchall()) if rewrite is not None else []
        return rewritten, catalog.fetchone() if catalog is not None else None

    def _rewritten(self, rows: list[Any]) -> list[str]:
        """The relations ``_REWRITTEN`` names rewritten; when there are none, records the
        ones it verified."""
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

    def _move_past_rewrite(self, rewritten: list[str], *, last_chance: bool) -> None:
        """The statement read ``rewritten`` relations, rewritten after the snapshot: its
        result is dropped. Move the database transaction to a later snapshot where every
        query result read so far stays valid — a fresh pin (★) if no cached value was used
        yet, else (or failing that) the newest such pin of the set — or raise
        :class:`SnapshotUnavailable` (always on the unpinned fallback: no pin to move to)."""
        active, connection = self.snapshot, self._connection
        assert connection is not None
        valid = self._results_valid_around(active) if active is not None else None
        if active is None or valid is None or last_chance:
            raise _rewritten_error(rewritten)
        lo, hi = max(valid[0], active.ts + 1), valid[1]  # only a later snapshot shows it
        fresh = self._fresh_pin() if not self.read_cache else None
        candidates = [fresh] if fresh is not None and lo <= fresh.ts < hi else []
        candidates += reversed(self.pin_set.within(lo, hi))
        for pin in candidates:
            if self._import(connection, pin):
                log.info(
                    "%s rewritten after pin %s: the transaction moves to pin %s",
                    ", ".join(rewritten),
                    active.ts,
                    pin.ts,
                )
                self.pin_set.reify(pin)  # ★ became this pin, or it is in the set already
                self.pin_set.narrow(pin.ts, hi)  # never back before the rewrite
                self._moved_to(pin)
                return
            if pin is not fresh:  # ★ is not in the set (a listed pin may share its ts)
                self.pin_set.discard(pin)
        raise _rewritten_error(rewritten)

    def _results_valid_around(self, active: Pin) -> tuple[int, int] | None:
        """The range of commit points at which every query result read so far is valid (a
        node's ``TXINTERVAL``, as for a move); ``None`` when it cannot be known."""
        if not self._read_database:
            return 0, _NO_LIMIT
        node = self.cache.ring.any_up() if self.cache.ring is not None else None
        if not self._tags_known or node is None:
            return None
        known = node.database_interval(active.ts, sorted(self._query_tags))
        return None if known is None else (known.lo, known.hi)

    def _tags(self, statement: str, params: Params) -> tuple[frozenset[str] | None, Catalog | None]:
        """The statement's tags (``None`` if not derived) and the catalog reading they were
        derived from."""
        assert self.snapshot is not None
        try:
            return self.cache.analyze(statement, params, self.snapshot.ts)
        except UncacheableQuery:
            if self.frames:
                raise
            self._tags_known = False  # a bare query: fine to run, but no move may skip it
            return None, None

    def _database(self) -> Connection:
        if self._closed:
            raise TransactionError("this read-only transaction has ended")
        if self._connection is not None:
            return self._connection
        connection: Connection = self.cache.checkout()
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

    def _fresh_pin(self) -> Pin | None:
        """★: a pin the agent takes now (``None`` without one). A pin taken now that is
        older than ``not_before`` means no commit followed the token's position, unless the
        token lies after everything the database has written: refused, as it would wait for
        commits nobody made (a token is a ``commit_timestamp`` or a :meth:`Cache.timestamp`)."""
        fresh = self.cache.agent.pin_now() if self.cache.agent is not None else None
        if fresh is not None and self.not_before is not None and fresh.ts < self.not_before:
            written = self.cache.timestamp()
            if self.not_before > written:
                raise ValueError(
                    f"not_before {self.not_before} lies after everything the database has "
                    f"written (its WAL position is {written}): pass a commit_timestamp or a "
                    "Cache.timestamp(), not a number of one's own"
                )
        return fresh

    def _take_fresh_pin(self) -> Pin | None:
        """★: a pin taken now. Without one, the newest pin of the set, or the fallback."""
        fresh = self._fresh_pin()
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
        in); ``False`` if the snapshot can no longer be imported, or if its id now names
        another snapshot (ids are reused after a PostgreSQL restart: the snapshot's
        contents, read in the same round trip, must equal the pin's)."""
        self._verified.clear()  # a new database transaction holds no lock yet
        try:
            if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                connection.execute("ROLLBACK")
            cursor = connection.execute(
                sql.SQL("{}; SET TRANSACTION SNAPSHOT {}; {}").format(
                    sql.SQL(_BEGIN_READ_ONLY),
                    sql.Literal(pin.snapshot_id),
                    sql.SQL(_IMPORTED_SNAPSHOT),
                )
            )
        except psycopg.Error as error:
            if error.sqlstate not in _NO_SNAPSHOT:
                raise
            log.info("pin %s is gone (%s); choosing another", pin.ts, error)
            connection.execute("ROLLBACK")
            return False
        while cursor.nextset():  # past BEGIN and SET TRANSACTION SNAPSHOT
            pass
        row = cursor.fetchone()
        imported = None if row is None else row[0]
        if pin.snapshot_text is None or imported == pin.snapshot_text:
            return True
        # Equal contents mean equal visibility: anything else is another snapshot.
        log.warning(
            "pin %s: snapshot %s now names another snapshot (%s, not %s): PostgreSQL "
            "restarted since the pin was taken; choosing another",
            pin.ts,
            pin.snapshot_id,
            imported,
            pin.snapshot_text,
        )
        connection.execute("ROLLBACK")
        return False

    def _finish(self, *, committing: bool) -> None:
        # Nothing to commit: everything was read already, so a failure here (PostgreSQL
        # restarting) must not turn a finished read into an error.
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            self._release(connection)

    def _release(self, connection: Connection) -> None:
        try:
            status = connection.info.transaction_status
            if status == psycopg.pq.TransactionStatus.INERROR:
                connection.rollback()  # psycopg's own: it also forgets its prepared statements
            elif status != psycopg.pq.TransactionStatus.IDLE:
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

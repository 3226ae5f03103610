"""The ``txcache.django.db`` backend: Django's PostgreSQL backend whose statements run in the
thread's current txcache transaction while there is one (docs/django.md, "The database
backend").

Where a statement runs is decided when Django makes a cursor — the *route*:

- a txcache transaction is current in the thread (``cache.read_only()`` / ``read_write()``
  of the process's cache, the request's transaction of the middleware, the implicit one of
  a cacheable call): its cursors are :class:`~txcache.django.db.cursor.TransactionCursor`
  objects and Django's own connection is not opened;
- none is: Django's own connection, exactly as Django's backend.

Django's transaction management follows the route:

- in a read-only transaction, ``atomic()`` blocks, savepoints, commits and rollbacks do
  nothing in the database (it is one snapshot and writes nothing; a write is refused);
- in a read/write transaction, an outermost ``atomic()`` block is a savepoint (released on
  commit, rolled back to on rollback): the txcache block commits, and an ``atomic()`` that
  fails undoes its own work and nothing else — SQLAlchemy's ``create_savepoint`` pattern
  (:mod:`txcache.sqlalchemy`). Nested blocks are Django's own savepoints;
- ``transaction.on_commit`` callbacks of a read/write transaction run after it commits,
  and ``transaction.set_rollback(True)`` outside any ``atomic()`` block rolls it back,
  when it was opened by :func:`txcache.django.read_write` (or the middleware); elsewhere
  both are refused, since nothing would act on them. An ``atomic(durable=True)`` block's
  statements and ``transaction.set_autocommit(False)`` are refused: what they promise,
  a commit before the txcache block ends, cannot be kept.

A Django transaction belongs to the route it began on: a statement of an ``atomic()`` block
used on another route is refused (:class:`~txcache.TransactionError`) — it would run in a
different database transaction than the block's. While one is open on Django's own
connection, no txcache transaction of the process's cache begins
(:class:`~txcache.django.conf.DjangoCache`) and a cacheable call made outside any runs
directly there, uncached (:func:`in_django_transaction`). Refused too: a statement of a
cursor made on Django's own connection before the txcache transaction began, and one on
another database inside a cacheable function being computed
(:mod:`txcache.django.db.guards`). What Django's own connection commits is recorded for
the context's read-your-writes (:func:`txcache.django.conf.wrote_on_own_connection`): its
next read-only transactions see it. Its test databases keep the process's cache on the
database the alias names (:mod:`txcache.django.db.creation`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.backends.postgresql import base as postgresql
from django.db.backends.postgresql import operations as postgresql_operations
from django.db.backends.postgresql.psycopg_any import get_adapters_template
from psycopg.adapt import AdaptersMap

from txcache import ReadOnlyTransaction, ReadWriteTransaction, Transaction, current_transaction
from txcache._session_watch import reported_settings
from txcache.django import conf, transactions
from txcache.django.db import guards
from txcache.django.db.binding import Params, bind_client_side
from txcache.django.db.creation import DatabaseCreation
from txcache.django.db.cursor import TransactionCursor
from txcache.errors import StatementNotAllowed, TransactionError
from txcache.integration import changes_settings, check_read_only, run_directly_when

__all__ = ["DatabaseOperations", "DatabaseWrapper", "in_django_transaction"]

_IDLE = object()
"""The route of no Django transaction (``DatabaseWrapper._began_on``)."""

_savepoints = itertools.count(1)

guards.watch_other_databases()  # with this backend in use, other databases are guarded too


class DatabaseOperations(postgresql_operations.DatabaseOperations):  # type: ignore[misc]
    """Django's PostgreSQL operations; SQL with its parameters merged in is composed
    without a database connection while a txcache transaction holds the statements, and
    queries are compiled by :mod:`txcache.django.db.compiler`."""

    compiler_module = "txcache.django.db.compiler"

    def compose_sql(self, sql: str, params: Params) -> str:
        """``sql`` with ``params`` merged in as literals (schema editors, ``SET`` …)."""
        if self.connection.txcache_route() is None:
            composed: str = super().compose_sql(sql, params)
            return composed
        return bind_client_side(sql, params, self.connection.adapters())

    def last_executed_query(self, cursor: Any, sql: str, params: Params) -> str | None:
        """The statement as run, for ``connection.queries`` and the debug log."""
        if not isinstance(cursor, TransactionCursor):
            last: str | None = super().last_executed_query(cursor, sql, params)
            return last
        try:
            return bind_client_side(sql, params, self.connection.adapters())
        except Exception:  # a parameter psycopg cannot quote: the log shows the template
            return sql


class DatabaseWrapper(postgresql.DatabaseWrapper):  # type: ignore[misc]
    """A Django PostgreSQL connection whose statements follow the route (the module
    docstring). ``TXCACHE["DATABASE"]`` names its alias; a connection of another alias with
    this engine never routes (the checks report it)."""

    ops_class = DatabaseOperations
    creation_class = DatabaseCreation

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As Django's; nothing is routed yet. Every statement of its cursors passes
        :meth:`_guard` first."""
        super().__init__(*args, **kwargs)
        self._began_on: Any = _IDLE  # the route of the Django transaction open now
        self._outer_savepoint: str | None = None
        self._wrote_uncommitted = False  # a write in Django's own transaction, not committed
        self._changed_session: tuple[Any, str] | None = None  # (its connection, the SET)
        self._reported: tuple[bytes | None, ...] = ()  # as Django left its connection's session
        self.execute_wrappers.append(self._guard)

    # -- the route -------------------------------------------------------------------------

    @property
    def in_own_transaction(self) -> bool:
        """Whether a Django transaction (an ``atomic()`` block, or autocommit turned off) is
        open on Django's own connection, outside any txcache transaction. One whose
        connection was closed in it (and dropped at the block's end) is over."""
        return self._began_on is None and self.connection is not None

    def txcache_route(self) -> Transaction | None:
        """The txcache transaction this connection's statements run in now (``None``:
        Django's own connection). Raises :class:`~txcache.TransactionError` for a
        transaction the ORM cannot use, and for a Django transaction used across routes."""
        current = current_transaction()
        if current is not None:
            current = self._usable(current)
        if current is not None:
            self.refuse_changed_session()
        if self._began_on is None and self.connection is None:
            # Its connection was closed in it (and dropped at its atomic() block's end): that
            # transaction is over, rolled back by the server.
            self._began_on = _IDLE
            self._wrote_uncommitted = False
        if self._began_on is not _IDLE and self._began_on is not current:
            if self._began_on is not None and not self.in_atomic_block:
                self._end_outlived_transaction(current)
            raise TransactionError(
                "this Django transaction (an atomic() block, or autocommit turned off) began "
                f"{_where(self._began_on)} and is used {_where(current)}: a Django "
                "transaction must begin and end inside the same txcache transaction (or "
                "outside any)"
            )
        return current

    def _end_outlived_transaction(self, current: Transaction | None) -> None:
        """Forget a Django transaction whose txcache transaction ended under it — an
        ``atomic()`` block left after the block it began in, as a generator can — and refuse
        the statement that ends it: its savepoint was committed or rolled back with that
        transaction, whatever this end says. Forgotten, so that the thread goes on."""
        began_on = self._began_on
        self._began_on = _IDLE
        self._outer_savepoint = None
        raise TransactionError(
            f"this Django transaction (an atomic() block, or autocommit turned off) began "
            f"{_where(began_on)}, which ended before it, and ends {_where(current)}: what it "
            "did was committed or rolled back with that txcache transaction. End the atomic() "
            "block inside the txcache block it began in"
        )

    @functools.cached_property
    def routed(self) -> bool:
        """Whether this is ``TXCACHE["DATABASE"]`` (another alias never routes)."""
        return bool(self.alias == conf.txcache_settings().database)

    def _usable(self, current: Any) -> Transaction | None:
        if not self.routed:
            return None  # another database: never part of txcache transactions
        if not isinstance(current, Transaction):
            raise TransactionError(
                "the current txcache transaction is async; the Django ORM runs in sync "
                "transactions (txcache.django.read_only() / read_write())"
            )
        if current.cache is not conf.get_cache():
            raise TransactionError(
                "the current txcache transaction belongs to another cache than "
                "txcache.django.get_cache(): open it with txcache.django.read_only() / "
                "read_write()"
            )
        return current

    def _guard(
        self, execute: guards.Execute, sql: str, params: Any, many: bool, context: dict[str, Any]
    ) -> Any:
        """The execute wrapper of this connection: a statement of a cursor of Django's own
        connection is refused while a txcache transaction is current (the cursor was made
        before it began: its statement would run outside it) — on an alias that does not
        route, as on any other database (:mod:`~txcache.django.db.guards`) — and one run
        outside any that may have written is reported (:meth:`_note_write`)."""
        if isinstance(context["cursor"].cursor, TransactionCursor):
            return execute(sql, params, many, context)  # the route
        current = current_transaction()
        if current is not None:
            if not self.routed:
                guards.refuse_in_computation(self.alias, current)
            else:
                raise TransactionError(
                    "a cursor of Django's own connection, made before the current txcache "
                    "transaction began, is used inside it: its statement would run outside "
                    "that transaction (unchecked, untagged, or committed on its own); make "
                    "the cursor inside the block"
                )
        result = execute(sql, params, many, context)
        if current is None and self.routed:
            self._note_write(sql, params, many)
            self._note_session_change(sql, params)
        return result

    def _note_session_change(self, sql: str, params: Any) -> None:
        """Remember a statement of Django's own connection that changed its session: a
        ``SET`` or ``set_config`` seen in it, or one whose change PostgreSQL reports (a
        ``DO`` block's or a function's ``set_config`` of ``search_path`` from version 18,
        of the time zone or the role in any)."""
        noted = self._changed_session
        if noted is not None and noted[0] is self.connection:
            return  # the first statement that changed it is the one to name
        if changes_settings(sql, params) or reported_settings(self.connection) != self._reported:
            self._changed_session = (self.connection, sql)

    def init_connection_state(self) -> None:
        """Django's; the session as it leaves it is the one txcache transactions match."""
        super().init_connection_state()
        self._reported = reported_settings(self.connection)

    def ensure_timezone(self) -> bool:
        """Django's (a changed ``TIME_ZONE``: the cache follows it too)."""
        changed: bool = super().ensure_timezone()
        if self.connection is not None:
            self._reported = reported_settings(self.connection)
        return changed

    def refuse_changed_session(self, *, beginning: bool = False) -> None:
        """Refuse a txcache transaction — as it begins, and at each statement — after
        Django's own (still open) connection changed a session setting: it runs on the
        cache's pooled connections, which the setting does not reach — a tenant
        middleware's ``SET search_path`` would leave every tenant reading the cache's
        schemas, hits and misses alike, silently. ``beginning``: also compare what
        PostgreSQL reports (only there: inside a txcache transaction Django's psycopg
        connection is not reachable, and each statement need not pay for it)."""
        if self.connection is None or self.connection.closed:
            return
        changed = self._changed_session
        if changed is not None and changed[0] is self.connection:
            what = f"ran {changed[1][:80]!r}, which changes its session"
        elif beginning and reported_settings(self.connection) != self._reported:
            # Through the psycopg connection itself (``connection.connection.execute``),
            # past Django's cursors: only what PostgreSQL reports shows it.
            what = "had its session changed past Django's cursors (on its psycopg connection)"
        else:
            return
        raise TransactionError(
            f"Django's own connection of {self.alias!r} {what} "
            "(a tenant middleware's SET search_path, say), and the "
            "txcache transactions the ORM runs in do not carry it: they run on the cache's "
            "pooled connections, with the cache's settings. Give the settings to the cache "
            "instead — OPTIONS['options'] = '-c search_path=…' or ALTER ROLE … SET, one "
            'process per tenant (docs/django.md, "Tenants") — or mark the views that need '
            "them @bypass"
        )

    def _note_write(self, sql: str, params: Any, many: bool) -> None:
        """Record a statement of Django's own connection that may have written
        (:func:`~txcache.django.conf.wrote_on_own_connection`): at once in autocommit, at
        the commit of the Django transaction it belongs to."""
        if not (many or _may_write(sql, params)):
            return
        if self.in_own_transaction:
            self._wrote_uncommitted = True
        else:
            conf.wrote_on_own_connection()

    # -- connections and cursors -----------------------------------------------------------

    def ensure_connection(self) -> None:
        """Django's own connection, unless a txcache transaction holds the statements."""
        if self.txcache_route() is None:
            super().ensure_connection()
        elif self.connection is None and self._began_on is _IDLE:
            # Django's own connection, had it been opened, would be in autocommit mode here —
            # and not closed in a transaction (which would have atomic() skip its savepoint).
            self.autocommit = self.settings_dict["AUTOCOMMIT"]
            self.closed_in_transaction = False

    def create_cursor(self, name: str | None = None) -> Any:
        """Django's cursor, or a :class:`TransactionCursor` of the route (``name``, a
        server-side cursor for ``iterator()``, is not opened there: results come whole)."""
        route = self.txcache_route()
        if route is None:
            return super().create_cursor(name)
        if isinstance(route, ReadWriteTransaction):
            self._refuse_durable()
        binding = self.settings_dict["OPTIONS"].get("server_side_binding") is True
        return TransactionCursor(route, self.adapters(), server_side_binding=binding)

    def adapters(self) -> AdaptersMap:
        """Django's adapters for this connection (``USE_TZ`` and its time zone): what its
        own connection dumps parameters and loads rows with."""
        adapters: AdaptersMap = get_adapters_template(settings.USE_TZ, self.timezone)
        return adapters

    @functools.cached_property
    def pg_version(self) -> int:
        """The server's version, from a pooled connection of the cache when a txcache
        transaction holds the statements (Django's own connection is not opened then)."""
        if self.txcache_route() is None:
            version: int = super().pg_version
            return version
        with conf.get_cache().pool.connection() as connection:
            pooled: int = connection.info.server_version
            return pooled

    # -- transactions ----------------------------------------------------------------------

    def _refuse_durable(self) -> None:
        """Refuse the statements of an ``atomic(durable=True)`` block in a read/write
        txcache transaction: the block is a savepoint there, and what it writes commits (or
        not) with that transaction, not when the block ends. Django makes the same promise
        impossible under ``ATOMIC_REQUESTS`` (a durable block inside another). Checked at
        each statement — Django tells no backend that a block is durable before it holds
        one — so nothing of the block is written."""
        if any(block.durable for block in self.atomic_blocks):
            raise TransactionError(
                "atomic(durable=True) inside a read/write txcache transaction: its writes "
                "would commit when that transaction does, not when the block ends; run it "
                "outside the transaction (a view marked @bypass, say)"
            )

    def set_autocommit(
        self, autocommit: bool, force_begin_transaction_with_broken_autocommit: bool = False
    ) -> None:
        """Django's, but ``transaction.set_autocommit(False)`` by hand (``atomic()`` passes
        the flag, a caller does not) is refused in a read/write txcache transaction: the
        database transaction is that one, committed when its block ends, so the
        ``transaction.commit()`` that follows could not commit anything earlier."""
        by_hand = not autocommit and not force_begin_transaction_with_broken_autocommit
        if by_hand and isinstance(self.txcache_route(), ReadWriteTransaction):
            raise TransactionError(
                "transaction.set_autocommit(False) inside a read/write txcache transaction: "
                "it is the database transaction, committed when its block ends — a "
                "transaction.commit() could not commit earlier; use atomic() (a savepoint "
                "there) or end the txcache block"
            )
        super().set_autocommit(autocommit, force_begin_transaction_with_broken_autocommit)

    def _set_autocommit(self, autocommit: bool) -> None:
        route = self.txcache_route()
        if autocommit:  # a Django transaction ended (committed or rolled back)
            if route is None:
                super()._set_autocommit(True)
            self._began_on = _IDLE
            return
        if route is None:
            super()._set_autocommit(False)
        elif isinstance(route, ReadWriteTransaction):
            name = f"txcache_django_{next(_savepoints)}"
            self._in_route(f"SAVEPOINT {name}")
            self._outer_savepoint = name
        self._began_on = route

    def _commit(self) -> None:
        if self.txcache_route() is None:
            super()._commit()
            if self._wrote_uncommitted:
                conf.wrote_on_own_connection()
            self._wrote_uncommitted = False
        elif self._outer_savepoint is not None:
            name, self._outer_savepoint = self._outer_savepoint, None
            self._in_route(f"RELEASE SAVEPOINT {name}")

    def _rollback(self) -> None:
        if self.txcache_route() is None:
            super()._rollback()
            self._wrote_uncommitted = False
        elif self._outer_savepoint is not None:
            name, self._outer_savepoint = self._outer_savepoint, None
            self._in_route(f"ROLLBACK TO SAVEPOINT {name}")
            self._in_route(f"RELEASE SAVEPOINT {name}")

    def _in_route(self, statement: str) -> None:
        with self.cursor() as cursor:
            cursor.execute(statement)

    def _savepoint(self, sid: str) -> None:
        if not self._read_only_route():
            super()._savepoint(sid)

    def _savepoint_rollback(self, sid: str) -> None:
        if not self._read_only_route():
            super()._savepoint_rollback(sid)

    def _savepoint_commit(self, sid: str) -> None:
        if not self._read_only_route():
            super()._savepoint_commit(sid)

    def _read_only_route(self) -> bool:
        """A read-only transaction writes nothing: its savepoints are not needed (and the
        library refuses ``SAVEPOINT`` there)."""
        return isinstance(self.txcache_route(), ReadOnlyTransaction)

    def set_rollback(self, rollback: bool) -> None:
        """Django's ``transaction.set_rollback``; outside any ``atomic()`` block of a
        read/write txcache transaction (a request's) it marks that transaction, which then
        rolls back at the end of its block instead of committing — as the request's
        ``atomic()`` block would under ``ATOMIC_REQUESTS``."""
        route = self.txcache_route()
        if isinstance(route, ReadWriteTransaction) and not self.in_atomic_block:
            transactions.set_rollback(route, rollback)
            return
        super().set_rollback(rollback)

    def get_rollback(self) -> bool:
        """Django's ``transaction.get_rollback``, reading that mark likewise."""
        route = self.txcache_route()
        if isinstance(route, ReadWriteTransaction) and not self.in_atomic_block:
            return transactions.get_rollback(route)
        flag: bool = super().get_rollback()
        return flag

    # -- on_commit -------------------------------------------------------------------------

    def on_commit(self, func: Callable[[], Any], robust: bool = False) -> None:
        """Django's ``transaction.on_commit``: in a read/write txcache transaction outside
        an ``atomic()`` block, ``func`` runs after that transaction commits."""
        route = self.txcache_route()
        if isinstance(route, ReadWriteTransaction) and not self.in_atomic_block:
            if not callable(func):
                raise TypeError("on_commit()'s callback must be a callable.")
            transactions.defer(route, [(func, robust)])
            return
        super().on_commit(func, robust)

    def run_and_clear_commit_hooks(self) -> None:
        """Run the callbacks of a committed Django transaction — or, when it was a
        savepoint of a read/write txcache transaction, hand them to that transaction."""
        route = self.txcache_route()
        if not isinstance(route, ReadWriteTransaction):
            super().run_and_clear_commit_hooks()
            return
        self.validate_no_atomic_block()
        hooks: Sequence[tuple[Any, Callable[[], Any], bool]] = self.run_on_commit[:]
        del self.run_on_commit[:]
        transactions.defer(route, [(func, robust) for _, func, robust in hooks])


def _may_write(sql: str, params: Any) -> bool:
    """Whether a statement may write: whatever a read-only transaction refuses (the
    library's classifier, memoized per statement text), and whatever it cannot classify.
    A ``SELECT`` of a function that writes is not seen as one."""
    try:
        check_read_only(sql, params)
    except StatementNotAllowed:
        return True
    except Exception:  # parameters of a shape it does not read: it ran, so it may have written
        return True
    return False


def in_django_transaction() -> bool:
    """Whether this thread's connection of ``TXCACHE["DATABASE"]`` has a Django transaction
    open on Django's own connection (:attr:`DatabaseWrapper.in_own_transaction`). Its
    uncommitted writes are seen only there: a cacheable call made outside any txcache
    transaction then runs directly on it, uncached, and no txcache transaction may begin."""
    wrapper = connections[conf.database_alias()]
    return isinstance(wrapper, DatabaseWrapper) and wrapper.in_own_transaction


run_directly_when(in_django_transaction)


def _where(route: Any) -> str:
    if route is None:
        return "outside any txcache transaction"
    return f"inside the txcache transaction {route!r}"

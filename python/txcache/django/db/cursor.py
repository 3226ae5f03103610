"""The cursor a Django connection hands out while a txcache transaction is current.

Every statement goes through the transaction's ``execute`` — in a read-only transaction the
library checks it, derives its tags from the SQL and its parameters and runs it at the
pinned snapshot, exactly as ``txcache.query`` would — so there is one source of truth for
the checks. Its parameters are bound as Django's own connection binds them
(:mod:`txcache.django.db.binding`).

Rows are loaded with Django's adapters, not those of txcache's pooled connections: Django
reads ``jsonb``, ``inet`` and ``cidr`` as text and ``timestamptz`` in its connection time
zone (which the pooled connections are given in their startup options,
:func:`txcache.django.conf.database_dsn`), so a model field's ``from_db_value`` gets what
it gets from Django's own connection. The rows of a result are loaded as they are
fetched, from the result psycopg received whole (no server-side cursor is opened).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import AdaptersMap, Transformer

from txcache import ReadWriteTransaction, Transaction
from txcache.django import transactions
from txcache.django.db.binding import AdaptContext, Params, bind
from txcache.errors import StatementNotAllowed

__all__ = ["TransactionCursor"]

Row = tuple[Any, ...]


class _Rows:
    """The rows of one result, loaded on demand."""

    def __init__(self, cursor: psycopg.Cursor[Any], adapters: AdaptersMap) -> None:
        result = cursor.pgresult
        self._loader = Transformer(AdaptContext(adapters, cursor.connection))
        self._count = 0
        if result is not None:
            self._loader.set_pgresult(result)
            self._count = result.ntuples
        self._position = 0

    def take(self, count: int | None) -> list[Row]:
        """The next ``count`` rows (``None``: all that are left)."""
        end = self._count if count is None else min(self._count, self._position + count)
        rows: list[Row] = self._loader.load_rows(self._position, end, tuple)
        self._position = end
        return rows


class TransactionCursor:
    """A DB-API cursor whose statements run in a txcache transaction (the module
    docstring); Django's ``CursorWrapper`` wraps it as it wraps psycopg's."""

    arraysize = 1
    """Rows :meth:`fetchmany` returns by default (DB-API)."""

    def __init__(
        self, transaction: Transaction, adapters: AdaptersMap, *, server_side_binding: bool
    ) -> None:
        """A cursor of ``transaction``, binding parameters as Django's connection does (with
        ``server_side_binding``, its ``OPTIONS``) and loading rows with ``adapters``
        (Django's)."""
        self.transaction = transaction
        """The txcache transaction the statements run in."""
        self.description: Any = None
        """The last result's columns (psycopg's ``Column`` objects), ``None`` without."""
        self.rowcount = -1
        """Rows the last statement returned or changed (-1: none ran)."""
        self.closed = False
        self._adapters = adapters
        self._server_side_binding = server_side_binding
        self._rows: _Rows | None = None

    def execute(self, query: str, params: Params = None) -> None:
        """Run ``query`` in the transaction, its parameters bound as Django binds them (a
        read-only transaction checks and tags it; a refusal is noted for the middleware,
        :func:`txcache.django.transactions.note_refusal`)."""
        query, params = bind(query, params, self._adapters, server_side=self._server_side_binding)
        try:
            result = self.transaction.execute(query, params)
        except StatementNotAllowed as refusal:
            transactions.note_refusal(str(refusal))
            raise
        self._take(result)

    def executemany(
        self, query: str, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> None:
        """Run ``query`` once per parameter set: one pipeline in a read/write transaction,
        one checked statement after another in a read-only one."""
        if isinstance(self.transaction, ReadWriteTransaction):
            self._execute_many(query, params_seq)
            return
        changed = 0
        for params in params_seq:
            self.execute(query, params)
            changed += max(self.rowcount, 0)
        self.rowcount = changed

    def _execute_many(
        self, query: str, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> None:
        """A read/write transaction's ``executemany``: one pipeline of ``query`` with each
        parameter set bound — or, when a set had to be merged into the text, each
        statement on its own."""
        binding = self._server_side_binding
        bound = [bind(query, params, self._adapters, server_side=binding) for params in params_seq]
        assert isinstance(self.transaction, ReadWriteTransaction)
        sets = [params for statement, params in bound if statement is query and params is not None]
        if len(sets) == len(bound):
            self._take(self.transaction.executemany(query, sets))
            return
        changed = 0
        for statement, params in bound:
            self._take(self.transaction.execute(statement, params))
            changed += max(self.rowcount, 0)
        self.rowcount = changed

    def callproc(self, name: str, args: Sequence[Any] | None = None) -> Sequence[Any] | None:
        """``SELECT * FROM name(args...)``, as Django's psycopg cursor runs a procedure."""
        placeholders = ", ".join(["%s"] * len(args or ()))
        self.execute(f"SELECT * FROM {sql.Identifier(name).as_string(None)}({placeholders})", args)
        return args

    def _take(self, cursor: psycopg.Cursor[Any]) -> None:
        self.description = cursor.description
        self.rowcount = cursor.rowcount
        self._rows = _Rows(cursor, self._adapters) if cursor.description is not None else None

    def _fetch(self, count: int | None) -> list[Row]:
        if self._rows is None:
            raise psycopg.ProgrammingError("the last statement returned no rows")
        return self._rows.take(count)

    def fetchone(self) -> Row | None:
        """The next row, or ``None``."""
        rows = self._fetch(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[Row]:
        """The next ``size`` rows (default :attr:`arraysize`)."""
        return self._fetch(self.arraysize if size is None else size)

    def fetchall(self) -> list[Row]:
        """Every row left."""
        return self._fetch(None)

    def __iter__(self) -> Iterator[Row]:
        while rows := self.fetchmany(100):
            yield from rows

    def nextset(self) -> None:
        """No further result sets: each ``execute`` has one."""
        return None

    def setinputsizes(self, sizes: Any) -> None:
        """DB-API; nothing to do."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """DB-API; nothing to do."""

    def close(self) -> None:
        """Forget the result (the transaction holds the database connection)."""
        self._rows = None
        self.closed = True

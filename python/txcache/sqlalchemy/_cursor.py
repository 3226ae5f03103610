"""The DBAPI cursor of the facade (:mod:`txcache.sqlalchemy._dbapi`): ``execute`` runs the
statement in the connection's txcache transaction and keeps what comes back — the
transaction's cursor, or the rows already fetched (:class:`Results`)."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import psycopg
from psycopg.pq import TransactionStatus

from txcache.integration import Params

if TYPE_CHECKING:
    from txcache.sqlalchemy._dbapi import Facade

__all__ = ["Info", "Results", "TxcacheCursor"]


class Info:
    """What ``connection.info`` tells SQLAlchemy: only the transaction status is read (by
    the dialect's isolation-level probe during its initialisation)."""

    def __init__(self, status: TransactionStatus) -> None:
        self.transaction_status = status


class Results:
    """A statement's results held in memory (the dialect's initialisation statements, and
    every result of the async facade: SQLAlchemy's result objects are not async)."""

    def __init__(self, description: Any, rows: list[Any], rowcount: int) -> None:
        self.description = description
        self.rowcount = rowcount
        self._rows = collections.deque(rows)

    def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int = 1) -> list[Any]:
        return [self._rows.popleft() for _ in range(min(size, len(self._rows)))]

    def fetchall(self) -> list[Any]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    def close(self) -> None:
        self._rows.clear()


class TxcacheCursor:
    """A DBAPI cursor over a facade: ``execute`` runs the statement in the connection's
    txcache transaction and keeps the cursor (or results) it returns."""

    arraysize = 1
    lastrowid = None

    def __init__(self, connection: Facade[Any]) -> None:
        self._connection = connection
        self._results: Any = None

    @property
    def description(self) -> Any:
        """The result's columns (``None`` for a statement without rows)."""
        return None if self._results is None else self._results.description

    @property
    def rowcount(self) -> int:
        """The rows the last statement returned or changed (``-1`` before one ran)."""
        return -1 if self._results is None else int(self._results.rowcount)

    def execute(self, operation: str, parameters: Params = None) -> TxcacheCursor:
        """Run ``operation`` in the connection's txcache transaction."""
        self._results = self._connection.run(operation, parameters)
        return self

    def executemany(
        self, operation: str, seq_of_parameters: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> None:
        """Run ``operation`` once per parameter set."""
        self._results = self._connection.run_many(operation, seq_of_parameters)

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        return self._require().fetchone()

    def fetchmany(self, size: int | None = None) -> list[Any]:
        """The next ``size`` rows (``arraysize`` by default)."""
        rows: list[Any] = self._require().fetchmany(self.arraysize if size is None else size)
        return rows

    def fetchall(self) -> list[Any]:
        """Every row left."""
        rows: list[Any] = self._require().fetchall()
        return rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchone, None)

    def close(self) -> None:
        """Drop the results."""
        results, self._results = self._results, None
        if results is not None:
            results.close()

    async def _async_soft_close(self) -> None:
        """Nothing to do: SQLAlchemy's asyncio results call this to close a driver cursor
        early, and the async facade's results are already in memory."""

    def setinputsizes(self, sizes: Sequence[Any]) -> None:
        """Ignored (DBAPI)."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """Ignored (DBAPI)."""

    def nextset(self) -> NoReturn:
        """Not supported: one statement's results at a time."""
        raise psycopg.NotSupportedError("nextset() is not supported by txcache's DBAPI facade")

    def _require(self) -> Any:
        if self._results is None:
            raise psycopg.ProgrammingError("no results: execute a statement first")
        return self._results

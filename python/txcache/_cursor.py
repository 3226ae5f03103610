# Generated from python/txcache/aio/_cursor.py by tools/async_to_sync.py. Do not edit:
# change the source and run `make generate` (`make lint` fails if this file differs).
"""What a transaction's ``execute`` returns. A read-only transaction's: the statement's
results, in a :class:`psycopg.Cursor` that refuses statements of its own (a statement
sent through it would skip the read-only check, the rewrite check and the tags the cache
needs). A read/write transaction's: a cursor whose every statement its session watch sees
(:mod:`txcache._session_watch`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, Self, TypeVar

import psycopg

from txcache._current import Params, Row
from txcache._session_watch import SessionWatch
from txcache._statements import cursor_refusal

__all__ = ["ResultCursor", "WriteCursor"]

R = TypeVar("R")


class ResultCursor(psycopg.Cursor[Row]):
    """Results only: ``execute``, ``executemany``, ``copy`` and ``stream`` refuse."""

    def run(self, statement: str, params: Params) -> None:
        """Run ``statement`` (the transaction's own use)."""
        super().execute(statement, params)

    def execute(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: run statements through the transaction (``txcache.execute``)."""
        raise cursor_refusal()

    def executemany(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()

    def copy(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()

    def stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()


class WriteCursor(psycopg.Cursor[R]):
    """A read/write transaction's cursor: each statement it sends is classified by
    :attr:`session` before it runs and the reported settings compared after, so that the
    connection is reset as much as the block needs (:mod:`txcache._session_watch`)."""

    session: SessionWatch

    def execute(self, *args: Any, **kwargs: Any) -> Self:
        """psycopg's ``execute``, watched."""
        self.session.statement(_query(args, kwargs), _params(args, kwargs))
        try:
            return super().execute(*args, **kwargs)
        finally:
            self.session.ran(self.connection)

    def executemany(
        self, query: Any, params_seq: Iterable[Any], *, returning: bool = False
    ) -> None:
        """psycopg's ``executemany``, watched (the statement classified once, with its
        first parameter set)."""
        sets = list(params_seq)
        self.session.statement(query, sets[0] if sets else None)
        try:
            super().executemany(query, sets, returning=returning)
        finally:
            self.session.ran(self.connection)

    @contextmanager
    def copy(
        self, statement: Any, params: Params = None, *, writer: Any = None
    ) -> Iterator[psycopg.Copy]:
        """psycopg's ``copy``; the connection is then reset in full."""
        self.session.unclassified()
        with super().copy(statement, params, writer=writer) as copy:
            yield copy

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[R]:
        """psycopg's ``stream``; the connection is then reset in full."""
        self.session.unclassified()
        return super().stream(*args, **kwargs)


def _query(args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    """The statement of a cursor call's arguments."""
    return args[0] if args else kwargs.get("query")


def _params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Params:
    """The parameters of a cursor call's arguments (``None`` if none)."""
    params: Params = args[1] if len(args) > 1 else kwargs.get("params")
    return params

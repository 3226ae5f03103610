"""What an async read-only transaction's ``execute`` returns: the statement's results in an
:class:`psycopg.AsyncCursor` that refuses statements of its own, as the sync transaction's
cursor does (a statement sent through it would skip the checks and the tags)."""

from __future__ import annotations

from typing import Any, NoReturn

import psycopg

from txcache._transaction import Params, Row, cursor_refusal

__all__ = ["AsyncResultCursor"]


class AsyncResultCursor(psycopg.AsyncCursor[Row]):
    """Results only: ``execute``, ``executemany``, ``copy`` and ``stream`` refuse."""

    async def run(self, statement: str, params: Params) -> None:
        """Run ``statement`` (the transaction's own use)."""
        await super().execute(statement, params)

    async def execute(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: run statements through the transaction (``txcache.aio.execute``)."""
        raise cursor_refusal()

    async def executemany(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()

    def copy(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()

    def stream(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused, as :meth:`execute`."""
        raise cursor_refusal()

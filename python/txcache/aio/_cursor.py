"""What a read-only transaction's ``execute`` returns: the statement's results, in a
:class:`psycopg.AsyncCursor` that refuses statements of its own (a statement sent through
it would skip the read-only check, the rewrite check and the tags the cache needs)."""

from __future__ import annotations

from typing import Any, NoReturn

import psycopg

from txcache._current import Params, Row
from txcache._statements import cursor_refusal

__all__ = ["AsyncResultCursor"]


class AsyncResultCursor(psycopg.AsyncCursor[Row]):
    """Results only: ``execute``, ``executemany``, ``copy`` and ``stream`` refuse."""

    async def run(self, statement: str, params: Params) -> None:
        """Run ``statement`` (the transaction's own use)."""
        await super().execute(statement, params)

    async def execute(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: run statements through the transaction (``txcache.execute``)."""
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

# Generated from python/txcache/aio/_cursor.py by tools/async_to_sync.py. Do not edit:
# change the source and run `make generate` (`make lint` fails if this file differs).
"""What a read-only transaction's ``execute`` returns: the statement's results, in a
:class:`psycopg.Cursor` that refuses statements of its own (a statement sent through
it would skip the read-only check, the rewrite check and the tags the cache needs)."""

from __future__ import annotations

from typing import Any, NoReturn

import psycopg

from txcache._current import Params, Row
from txcache._statements import cursor_refusal

__all__ = ["ResultCursor"]


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

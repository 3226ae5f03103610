"""hstore as SQLAlchemy's own psycopg dialect has it, without touching shared connections.

The stock dialect's ``initialize`` registers psycopg's hstore adapters on every connection
it makes: a ``dict`` parameter is sent typed ``hstore``, and ``hstore`` and ``hstore[]``
columns come back as dicts (and lists of them) whatever the statement's SQLAlchemy types
say — ``text()`` included; its ``HSTORE`` type then leaves the values to psycopg. The
cache's pooled connections are shared by every user of the cache (a ``txcache.query``
must keep getting hstore as text), so nothing is registered on them: :class:`Hstore`
does the same conversions per statement, with psycopg's own dumpers and loaders —

- a ``dict`` parameter (or a list holding dicts) is dumped by psycopg's hstore dumper and
  its placeholder cast to ``hstore`` (``hstore[]``): a parameter of that type, as the
  stock dialect sends it;
- the ``hstore`` and ``hstore[]`` columns of a result, told by their type oid, are loaded
  by psycopg's hstore loaders from the text the connection returned.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.abc import Loader
from psycopg.adapt import AdaptersMap, PyFormat, Transformer
from psycopg.pq import Format
from psycopg.rows import RowMaker
from psycopg.types import TypeInfo
from psycopg.types.hstore import register_hstore

from txcache.integration import Params

__all__ = ["Hstore", "read_hstore", "read_hstore_async"]

# psycopg's placeholders: %% is a literal percent sign, the rest name a parameter.
_PLACEHOLDER = re.compile(r"%%|%\((?P<name>[^)]*)\)[sbt]|%[sbt]")

_TYPE = "hstore"


def read_hstore(connection: psycopg.Connection[Any]) -> Hstore | None:
    """The database's hstore type, read on ``connection`` (``None`` without the
    extension), as the stock dialect reads it once, at its first connection."""
    return Hstore.of(TypeInfo.fetch(connection, _TYPE))


async def read_hstore_async(connection: psycopg.AsyncConnection[Any]) -> Hstore | None:
    """:func:`read_hstore` on an async connection."""
    return Hstore.of(await TypeInfo.fetch(connection, _TYPE))


class Hstore:
    """The database's hstore type and psycopg's adapters for it (module docstring)."""

    def __init__(self, info: TypeInfo) -> None:
        adapters = AdaptersMap(psycopg.adapters)
        register_hstore(info, adapters)
        self._adapt = Transformer(adapters)
        self._cast: dict[type, str] = {dict: f"::{info.regtype}", list: f"::{info.regtype}[]"}
        self._loaders: dict[int, Loader] = {
            oid: self._adapt.get_loader(oid, Format.TEXT) for oid in (info.oid, info.array_oid)
        }

    @classmethod
    def of(cls, info: TypeInfo | None) -> Hstore | None:
        """An :class:`Hstore` of ``info``; ``None`` for none."""
        return None if info is None else cls(info)

    # -- parameters -------------------------------------------------------------------------

    def statement(self, operation: str, params: Params) -> tuple[str, Params]:
        """``operation`` and ``params`` with every hstore parameter dumped and cast."""
        if not params:
            return operation, params
        kinds = self._kinds([params])
        if not kinds:
            return operation, params
        return self._cast_placeholders(operation, kinds), self._dumped(params, kinds)

    def statements(
        self, operation: str, seq_of_params: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> tuple[str, list[Sequence[Any] | Mapping[str, Any]]]:
        """:meth:`statement` for ``executemany``: one placeholder cast for every set."""
        sets = list(seq_of_params)
        kinds = self._kinds(sets)
        if not kinds:
            return operation, sets
        dumped = [self._dumped(params, kinds) for params in sets]
        return self._cast_placeholders(operation, kinds), dumped

    def _kinds(self, sets: Sequence[Sequence[Any] | Mapping[str, Any]]) -> dict[str | int, type]:
        """The parameters (by name or position) that are hstore in some set: ``dict`` for
        a dict, ``list`` for a list holding one."""
        kinds: dict[str | int, type] = {}
        for params in sets:
            for key, value in _items(params):
                kind = _hstore_kind(value)
                if kind is not None:
                    kinds.setdefault(key, kind)
        return kinds

    def _dumped(
        self, params: Sequence[Any] | Mapping[str, Any], kinds: Mapping[str | int, type]
    ) -> Sequence[Any] | Mapping[str, Any]:
        """``params`` with its hstore values as their text (psycopg's text dump)."""

        def dump(key: str | int, value: Any) -> Any:
            if key not in kinds or value is None or isinstance(value, str):
                return value
            data = self._adapt.get_dumper(value, PyFormat.TEXT).dump(value)
            return None if data is None else bytes(data).decode()

        if isinstance(params, Mapping):
            return {key: dump(key, value) for key, value in params.items()}
        return [dump(index, value) for index, value in enumerate(params)]

    def _cast_placeholders(self, operation: str, kinds: Mapping[str | int, type]) -> str:
        positions = itertools.count()

        def cast(match: re.Match[str]) -> str:
            token = match.group(0)
            if token == "%%":
                return token
            name = match.group("name")
            kind = kinds.get(next(positions) if name is None else name)
            return token if kind is None else token + self._cast[kind]

        return _PLACEHOLDER.sub(cast, operation)

    # -- results ----------------------------------------------------------------------------

    def row_factory(self, cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[Any]:
        """Rows as tuples, hstore columns loaded as psycopg loads them (a psycopg row
        factory: called once per result)."""
        columns = [
            (index, loader)
            for index, column in enumerate(cursor.description or ())
            if (loader := self._loaders.get(column.type_code)) is not None
        ]
        if not columns:
            return tuple
        return _loading(columns, cursor.connection.info.encoding)


def _loading(columns: list[tuple[int, Loader]], encoding: str) -> RowMaker[Any]:
    """A row maker loading ``columns`` from the text psycopg gave them (their type oid was
    unknown to the connection)."""

    def make(values: Sequence[Any]) -> tuple[Any, ...]:
        row = list(values)
        for index, loader in columns:
            text = row[index]
            if text is not None:
                data = text if isinstance(text, bytes) else text.encode(encoding)
                row[index] = loader.load(data)
        return tuple(row)

    return make


def _items(params: Sequence[Any] | Mapping[str, Any]) -> Iterable[tuple[str | int, Any]]:
    if isinstance(params, Mapping):
        return params.items()
    return enumerate(params)


def _hstore_kind(value: Any) -> type | None:
    """``dict`` for a value psycopg would dump as hstore, ``list`` for hstore[]."""
    if isinstance(value, dict):
        return dict
    if isinstance(value, list) and any(_hstore_kind(item) is not None for item in value):
        return list
    return None

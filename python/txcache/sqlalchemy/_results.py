"""Plain data from SQLAlchemy results, for what a cacheable function returns.

The cache stores exact plain types only — no code is read from it, so it never rebuilds
instances of a class — and a hit must return exactly what the miss returned. ORM
instances, ``Row`` and ``RowMapping`` objects are instances of classes: a function turns
them into tuples and dicts before returning (docs/sqlalchemy.md, "What a cached query
returns").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy
import sqlalchemy.orm
from sqlalchemy.engine import Row

__all__ = ["dicts", "rows", "to_dict"]


def rows(result: Iterable[Row[*tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """Every row of ``result`` (a ``Result``, or a list of ``Row``) as a tuple."""
    return [tuple(_row("rows()", row)) for row in result]


def dicts(result: Iterable[Row[*tuple[Any, ...]]]) -> list[dict[str, Any]]:
    """Every row of ``result`` as a dict of its columns by label, in column order (what
    ``result.mappings()`` gives, as plain dicts)."""
    return [dict(_row("dicts()", row)._mapping) for row in result]


def _row(function: str, row: object) -> Row[*tuple[Any, ...]]:
    if isinstance(row, Row):
        return row
    hint = (
        "to_dict() each instance (a .scalars() result holds instances)"
        if _is_mapped(row)
        else "pass a Result or a list of Row objects"
    )
    raise TypeError(f"{function} takes rows, got a {type(row).__name__}: {hint}")


def _is_mapped(value: object) -> bool:
    """Whether ``value`` is an instance of a mapped class."""
    return isinstance(sqlalchemy.inspect(value, raiseerr=False), sqlalchemy.orm.InstanceState)


def to_dict(instance: object) -> dict[str, Any]:
    """The column attributes of an ORM instance, by attribute name in the mapper's order
    (relationships are not followed: return them as their own dicts)."""
    if not _is_mapped(instance):
        hint = (
            "a Row is not an instance: dicts([row]) or dict(row._mapping)"
            if isinstance(instance, Row)
            else "pass an instance of a mapped class"
        )
        raise TypeError(f"to_dict() takes an ORM instance, got a {type(instance).__name__}: {hint}")
    mapper = sqlalchemy.inspect(instance).mapper
    return {column.key: getattr(instance, column.key) for column in mapper.column_attrs}

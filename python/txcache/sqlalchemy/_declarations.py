"""What a SQLAlchemy mapped class declares, in cacheable functions' code hash
(docs/sqlalchemy.md, "Keys and code changes").

A mapping lives in objects — the ``Mapper``, its ``Table`` and properties — which the code
hash reads by class only. A deploy that changes a column's name or type, a
``column_property`` expression or a relationship's ``order_by`` often runs no SQL that
would invalidate anything, so without them in the hash the functions reading the class
would keep their keys and serve what the old code computed. :func:`mapping_declaration` is
what the hash reads of a mapped class: its tables' columns (name, type), and each mapped
property with the SQL it stands for, compiled with its literal values.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import ColumnProperty, Mapper, RelationshipProperty

__all__ = ["mapping_declaration"]


def mapping_declaration(cls: type) -> object:
    """What the mapped class ``cls`` declares, as data; ``None`` for any other class."""
    mapper: Any = sqlalchemy.inspect(cls, raiseerr=False)
    if not isinstance(mapper, Mapper) or mapper.class_ is not cls:
        return None
    try:
        properties = tuple(_property(prop) for prop in mapper.attrs.values())  # configures
    except SQLAlchemyError as error:  # a mapping that cannot configure: its queries fail too
        properties = (("unconfigured", type(error).__name__),)
    tables = tuple(_table(table) for table in mapper.tables)
    return ("sqlalchemy mapping", tables, tuple(sorted(properties, key=lambda p: str(p[0]))))


def _table(table: Any) -> object:
    columns = tuple((column.name, column.key, _type(column.type)) for column in table.columns)
    return (table.schema, getattr(table, "name", None), columns)


def _property(prop: Any) -> tuple[object, ...]:
    if isinstance(prop, ColumnProperty):
        return (prop.key, "column", tuple(_sql(column) for column in prop.columns))
    if isinstance(prop, RelationshipProperty):
        order_by = prop.order_by or ()
        return (
            prop.key,
            "relationship",
            prop.mapper.class_,
            prop.direction.name,
            _sql(prop.primaryjoin),
            _sql(prop.secondaryjoin),
            tuple(_sql(each) for each in order_by),
            bool(prop.uselist),
        )
    return (prop.key, type(prop))


def _type(kind: Any) -> object:
    """A column type: its class (an application's ``TypeDecorator`` is read as code) and
    its arguments as SQLAlchemy writes them — unless that names an object by its address,
    which differs in every process (a key nobody else computes): then by its class only."""
    written = repr(kind)
    return (type(kind), None if " at 0x" in written else written)


def _sql(clause: Any) -> str | None:
    """``clause`` as SQL, its bound values written in: ``price + 1`` is not ``price + 5``."""
    if clause is None:
        return None
    try:
        return str(clause.compile(compile_kwargs={"literal_binds": True}))
    except (SQLAlchemyError, NotImplementedError, TypeError):  # a value without a literal
        return str(clause)

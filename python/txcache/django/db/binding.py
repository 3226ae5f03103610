"""How the route binds a statement's parameters: with the types Django's own connection gives
them (docs/django.md, "The database backend").

Django's PostgreSQL backend binds on the client by default: psycopg's ``ClientCursor`` merges
each parameter into the statement as a SQL literal, dumped by Django's adapters — a Python
``float`` becomes the numeric literal ``1.1``, an ``int`` the literal ``3`` (an ``integer``,
or a ``bigint`` or ``numeric`` when larger). The library's transactions bind on the server
(psycopg's default cursor), where the same values would be a ``float8`` and a ``smallint``:
``F("qty") * 1.1`` would give ``3.3000000000000003`` instead of ``3.3``. So the route
(:func:`bind`) hands the library the statement as Django compiled it and each parameter
typed as its literal would be — ints as ``Int4``/``Int8`` or ``Decimal``, finite floats as
the ``Decimal`` of their text; text, ``NULL`` and every quoted literal keep psycopg's own
type, which is the literal's cast — so PostgreSQL computes what it computes on Django's
connection, and the library's analysis reads one statement text per query shape (its plan
memo) and the values PostgreSQL gets. A value Django's adapters dump otherwise than the
pooled connections' (psycopg's defaults) — a range, which Django sends as a ``tstzrange``
when its bounds are naive — cannot be typed so: such a statement is merged on the client
as Django merges it (:func:`bind_client_side`), a text of its own per value.

With ``OPTIONS["server_side_binding"]: True`` Django's own connection binds on the server
(psycopg's default cursor), and so does the route: parameters go as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg._queries import PostgresClientQuery
from psycopg.adapt import AdaptersMap, PyFormat, Transformer
from psycopg.types.numeric import Int4, Int8

__all__ = ["AdaptContext", "Params", "bind", "bind_client_side"]

Params = Sequence[Any] | Mapping[str, Any] | None
"""A statement's parameters, as DB-API cursors take them."""

_INT4 = range(-(2**31), 2**31)
_INT8 = range(-(2**63), 2**63)
# Types psycopg dumps alike with Django's adapters and its defaults: no lookup needed.
_PLAIN = frozenset((str, int, float, Decimal, bool, type(None), bytes, Int4, Int8))


@dataclass(frozen=True)
class AdaptContext:
    """What a psycopg ``Transformer`` reads its dumpers and loaders from: Django's
    adapters, and the connection a result came from (its encoding and ``TimeZone``), if
    any."""

    adapters: AdaptersMap
    connection: psycopg.Connection[Any] | None = None


def bind(
    statement: str, params: Params, adapters: AdaptersMap, *, server_side: bool
) -> tuple[str, Params]:
    """``statement`` and ``params`` as the library's ``execute`` takes them, bound as
    Django's own connection binds them with ``adapters`` (the module docstring)."""
    if params is None:
        return statement, None
    values = params.values() if isinstance(params, Mapping) else params
    if any(_dumped_otherwise(value, adapters) for value in values):
        return bind_client_side(statement, params, adapters), None
    if server_side:
        return statement, params
    if isinstance(params, Mapping):
        return statement, {name: _like_literal(value) for name, value in params.items()}
    return statement, [_like_literal(value) for value in params]


def _like_literal(value: Any) -> Any:
    """``value``, typed as PostgreSQL types the literal psycopg's ``ClientCursor`` writes
    for it: a number without quotes is an ``integer``, ``bigint`` or ``numeric`` constant,
    whatever Python type it came from."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value  # a quoted literal: psycopg's type is its cast (or unknown, as text)
    if isinstance(value, int):
        number = int(value)
        if number in _INT4:
            return Int4(number)
        return Int8(number) if number in _INT8 else Decimal(number)
    real = float(value)
    return Decimal(str(real)) if math.isfinite(real) else real  # 'NaN'::float8 quoted


def _dumped_otherwise(value: Any, adapters: AdaptersMap) -> bool:
    """Whether Django's ``adapters`` dump ``value`` with another dumper than psycopg's
    defaults (the pooled connections'), for it or, in a list, an element."""
    kind = type(value)
    if kind in _PLAIN:
        return False
    if kind is list:
        return any(_dumped_otherwise(each, adapters) for each in value)
    try:
        django = adapters.get_dumper(kind, PyFormat.AUTO)
        default = psycopg.adapters.get_dumper(kind, PyFormat.AUTO)
    except psycopg.ProgrammingError:  # no dumper at all: psycopg says so when it runs
        return False
    return django is not default


def bind_client_side(statement: str, params: Params, adapters: AdaptersMap) -> str:
    """``statement`` with ``params`` merged in as SQL literals, exactly as psycopg's
    ``ClientCursor`` — Django's default cursor — merges them (``%s`` and ``%(name)s``
    placeholders, ``%%``), dumped by ``adapters``: what the route runs for a value
    :func:`bind` cannot type, and what Django's ``compose_sql`` and
    ``last_executed_query`` return while a txcache transaction holds the connection.
    Without a connection a string literal may be written ``E'…'``: the same value."""
    if params is None:
        return statement
    # psycopg's own merge (ClientCursor.mogrify runs it) on a transformer of Django's
    # adapters instead of a connection's: one rule for placeholders, quoting and casts.
    query = PostgresClientQuery(Transformer(AdaptContext(adapters)))
    query.convert(statement, params)
    return bytes(query.query).decode()

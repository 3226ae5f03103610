"""Queryset caching: ``Item.objects.filter(...).txcache(staleness=30)`` (docs/django.md,
"Cached querysets").

A cached queryset's reads — evaluation, ``get()``, ``first()``, ``count()``, ``exists()``,
``aggregate()``, ``values()`` … — go through a cacheable function of the model, keyed by
the SQL Django compiled, its parameters, and how Django loads the rows (``USE_TZ`` and the
connection's time zone) — not by the active time zone and language: the SQL names the zone
where it converts to it, and no language reaches it. A ``count()`` or ``aggregate()``
Django computes over a subquery (of a sliced, ``distinct()``, grouped or combined queryset,
or one with aggregate annotations) runs through another compiler, uncached. What is stored
is the rows as the database returned them (loaded as Django's connection loads them: plain
values), never model instances: a hit rebuilds the instances from the rows in code,
through the same converters and ``Model.from_db`` as a miss, so a hit equals a miss. The
results are tagged from that SQL and invalidated by the agent like any cached value: by
``.update()``, ``bulk_update``, ``bulk_create``, ``save()``, raw SQL and other programs'
writes alike.

Where a cached read runs:

- in a read-only txcache transaction: through the cache, at its snapshot (the block's
  staleness governs);
- in a read/write one: straight to the database (the library runs cacheable functions
  uncached there: writes must see the database);
- outside any, in a read-only transaction of its own, ``staleness`` seconds at most (default:
  the ``STALENESS`` setting) — unless Django's own connection has a transaction open (an
  ``atomic()`` block, or autocommit turned off), whose uncommitted writes the read must
  see: then on that connection, uncached (as a cacheable call there runs).

Reads made for a write — ``delete()``'s collection, ``get_or_create()``,
``update_or_create()``, ``select_for_update()`` — never use the cache.
"""

from __future__ import annotations

import threading
from typing import Any, Self

from django.conf import settings
from django.core.exceptions import EmptyResultSet, ImproperlyConfigured
from django.db import connections, models
from django.db.models.sql import Query
from django.db.models.sql.constants import GET_ITERATOR_CHUNK_SIZE, MULTI, SINGLE
from psycopg.types import numeric

from txcache import CacheableFunction, cacheable, current_transaction
from txcache.django import conf, contexts
from txcache.django.db.base import DatabaseWrapper
from txcache.django.db.compiler import SQLCompiler

__all__ = ["CachedManager", "CachedQuery", "CachedQuerySet", "rows_function"]

Row = tuple[Any, ...]
Params = tuple[tuple[str, Any], ...]
"""A statement's parameters as a cacheable function's argument: ``(type, value)`` pairs."""
Loading = tuple[bool, str]
"""How Django loads a row's values: ``(USE_TZ, the connection's time zone)`` — a
``timestamptz`` comes back aware under ``USE_TZ``, naive in that zone without."""
RowsFunction = CacheableFunction[[str, Loading, str, Params], list[Row]]

# psycopg's int and float subclasses that Django passes to give a parameter its type (an
# IntegerField's values are Int4): a key keeps the type by name, the statement gets it back.
_TYPED: dict[str, type[Any]] = {
    kind.__name__: kind
    for kind in (numeric.Int2, numeric.Int4, numeric.Int8, numeric.Float4, numeric.Float8)
}


class CachedQuerySet(models.QuerySet):  # type: ignore[misc]
    """A ``QuerySet`` with :meth:`txcache`; as a manager: ``objects = CachedManager()``,
    or ``CachedQuerySet.as_manager()``."""

    query: Query
    _iterable_class: type[Any]

    def txcache(self, staleness: float | None = None) -> Self:
        """This queryset, its reads through the cache (the module docstring).
        ``staleness``: seconds, for reads outside any txcache transaction (default: the
        ``STALENESS`` setting); inside one, the transaction's own applies."""
        if staleness is not None and (isinstance(staleness, bool) or not staleness >= 0):
            raise ValueError(f"staleness must be a number of seconds >= 0, not {staleness!r}")
        clone: Self = self._chain()
        query = clone.query.chain(CachedQuery)
        query.txcache_staleness = staleness
        clone._replace_query(query)
        return clone

    def _fetch_all(self) -> None:
        if self._for_write and isinstance(self.query, CachedQuery):
            # Read for a write (delete()'s collection, get_or_create()): the database's rows.
            self._replace_query(self.query.chain(Query))
        super()._fetch_all()

    def _replace_query(self, query: Query) -> None:
        """Use ``query``, an equal query of another class, keeping what rows become:
        Django's ``query`` setter makes those of a ``values_list()`` dicts."""
        iterable = self._iterable_class
        self.query = query
        self._iterable_class = iterable


CachedManager = models.Manager.from_queryset(CachedQuerySet)
"""A manager whose querysets have :meth:`CachedQuerySet.txcache`."""


class CachedQuery(Query):  # type: ignore[misc]
    """A ``Query`` whose rows are read through the cache, and its clones (a write turns a
    clone into another kind of query: ``UpdateQuery``, ``DeleteQuery``…)."""

    txcache_staleness: float | None = None
    """Seconds of staleness outside any txcache transaction (``None``: the setting)."""

    def get_compiler(
        self, using: str | None = None, connection: Any = None, elide_empty: bool = True
    ) -> SQLCompiler:
        """A :class:`CachingCompiler` for ``using`` (or ``connection``)."""
        if using is None and connection is None:
            raise ValueError("Need either using or connection")
        if using:
            connection = connections[using]
        return CachingCompiler(self, connection, using, elide_empty)


class CachingCompiler(SQLCompiler):
    """Django's compiler; its row-returning reads come from :func:`cached_rows`."""

    def execute_sql(
        self,
        result_type: str = MULTI,
        chunked_fetch: bool = False,
        chunk_size: int = GET_ITERATOR_CHUNK_SIZE,
    ) -> Any:
        """Django's ``execute_sql``, for ``MULTI`` and ``SINGLE`` results from the cache
        (shaped as Django shapes them: rows in one chunk, the columns of extra selects cut
        off); other results, ``EXPLAIN`` and ``SELECT … FOR UPDATE`` straight."""
        if result_type not in (MULTI, SINGLE) or self._not_cached():
            return super().execute_sql(result_type, chunked_fetch, chunk_size)
        try:
            statement, params = self.as_sql()
            if not statement:
                raise EmptyResultSet
        except EmptyResultSet:
            return iter([]) if result_type == MULTI else None
        rows = cached_rows(self, statement, tuple(params))
        if result_type == SINGLE:
            return rows[0][: self.col_count] if rows else None
        if self.has_extra_select:
            rows = [row[: self.col_count] for row in rows]
        return [rows]

    def _not_cached(self) -> bool:
        return bool(self.query.explain_info or self.query.select_for_update)


def cached_rows(compiler: SQLCompiler, statement: str, params: tuple[Any, ...]) -> list[Row]:
    """The rows of ``statement`` through the model's :func:`rows_function`, in the
    transaction the module docstring describes."""
    wrapper = compiler.connection
    alias: str = wrapper.alias
    if not isinstance(wrapper, DatabaseWrapper):
        raise ImproperlyConfigured(
            f"database {alias!r} does not use the txcache.django.db engine: a .txcache() "
            "queryset reads through the cache on that engine's database"
        )
    if not wrapper.routed:  # its statements would run on Django's own connection
        routed = conf.txcache_settings().database
        raise ImproperlyConfigured(
            f"database {alias!r} is not TXCACHE['DATABASE'] ({routed!r}): a .txcache() "
            f"queryset reads through the cache only there (.using({routed!r}))"
        )
    function = rows_function(compiler.query.model)
    loading = (bool(settings.USE_TZ), str(wrapper.timezone_name))
    typed = tuple(_typed(value) for value in params)
    if current_transaction() is not None:
        return function(alias, loading, statement, typed)
    if wrapper.in_own_transaction:
        return run_rows(alias, statement, typed)  # its uncommitted writes must be seen
    staleness = compiler.query.txcache_staleness
    with conf.get_cache().read_only(staleness):
        return function(alias, loading, statement, typed)


def _typed(value: Any) -> tuple[str, Any]:
    kind = type(value)
    if _TYPED.get(kind.__name__) is kind:
        return kind.__name__, (int if issubclass(kind, int) else float)(value)
    return "", value


def run_rows(alias: str, statement: str, params: Params) -> list[Row]:
    """Every row of ``statement`` on the connection ``alias``, where it routes now."""
    values = tuple(_TYPED[kind](value) if kind else value for kind, value in params)
    with connections[alias].cursor() as cursor:
        cursor.execute(statement, values)
        rows: list[Row] = cursor.fetchall()
        return rows


_functions: dict[str, RowsFunction] = {}
_functions_lock = threading.Lock()


def rows_function(model: type[models.Model]) -> RowsFunction:
    """The cacheable function that reads ``model``'s cached querysets: one per model, so
    that its statistics (``txcache.function_stats()``, the metrics) are the model's —
    ``txcache.django.queryset.rows[app_label.Model]``."""
    label: str = model._meta.label
    found = _functions.get(label)
    if found is not None:
        return found
    with _functions_lock:
        if label not in _functions:
            _functions[label] = _make_rows_function(label)
        return _functions[label]


def _make_rows_function(label: str) -> RowsFunction:
    def rows(alias: str, loading: Loading, statement: str, params: Params) -> list[Row]:
        # ``loading`` is in the key only: the rows it loads differently are other values.
        return run_rows(alias, statement, params)

    rows.__qualname__ = f"rows[{label}]"
    # The statement and its parameters are the key: they name the time zone wherever the
    # SQL converts to it, and the language reaches no SQL.
    return cacheable(independent_of=(contexts.TIMEZONE, contexts.LANGUAGE))(rows)

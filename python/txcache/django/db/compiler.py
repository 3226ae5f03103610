"""The SQL compilers of the ``txcache.django.db`` backend (its operations'
``compiler_module``): Django's PostgreSQL compilers, whose reading compilers check each
expression they compile against the key contexts the function being computed declared
itself independent of (:func:`txcache.django.contexts.refuse_undeclared`). The compiler is
where Django still knows whether a date/time expression reads the active time zone or was
given a ``tzinfo=``: the SQL of both is the same."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import compiler as postgresql

from txcache.django import contexts

__all__ = [
    "SQLAggregateCompiler",
    "SQLCompiler",
    "SQLDeleteCompiler",
    "SQLInsertCompiler",
    "SQLUpdateCompiler",
]

SQLDeleteCompiler = postgresql.SQLDeleteCompiler
SQLInsertCompiler = postgresql.SQLInsertCompiler
SQLUpdateCompiler = postgresql.SQLUpdateCompiler


class ContextChecks:
    """Checks every expression a compiler compiles (a mixin of Django's compilers)."""

    def compile(self, node: Any) -> Any:
        """Django's ``compile``, after :func:`~txcache.django.contexts.refuse_undeclared`."""
        contexts.refuse_undeclared(node)
        return super().compile(node)  # type: ignore[misc]


class SQLCompiler(ContextChecks, postgresql.SQLCompiler):  # type: ignore[misc]
    """Django's PostgreSQL ``SQLCompiler``, checked."""


class SQLAggregateCompiler(ContextChecks, postgresql.SQLAggregateCompiler):  # type: ignore[misc]
    """Django's ``SQLAggregateCompiler`` (an aggregate over a subquery), checked."""

"""Statements that would leave a txcache transaction by another way than the route.

The backend routes the cursors of ``TXCACHE["DATABASE"]`` into the thread's txcache
transaction when they are made (:mod:`txcache.django.db.base`). Django can still reach a
database around it:

- **another database** — ``.using("replica")``, a ``DATABASE_ROUTERS`` router, a second
  alias: its statements run on its own Django connection, outside the transaction. Inside a
  cacheable function being computed in a read-only transaction that is unsound — the result
  would be stored with the tags of the other queries only, and no write to that database
  would ever invalidate it — so such a statement is refused (:func:`refuse_in_computation`).
  Elsewhere it is plain Django: nothing of it is cached;
- **a cursor of Django's own connection made before the txcache transaction began**, used
  inside it: its statements would run outside the transaction (unchecked, untagged, or
  committed on their own). The backend refuses them (``DatabaseWrapper``).

Both are caught by an execute wrapper (Django's hook around every ``execute()`` and
``executemany()`` of its cursors): the backend installs its own on each of its connections,
and :func:`watch_other_databases` has :func:`guard_other_database` installed on every other
connection Django opens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.backends.signals import connection_created

from txcache import current_transaction
from txcache.errors import TransactionError
from txcache.integration import ReadOnlyCore

__all__ = ["guard_other_database", "refuse_in_computation", "watch_other_databases"]

Execute = Callable[[str, Any, bool, dict[str, Any]], Any]
"""What an execute wrapper calls to run the statement (Django's ``execute_wrapper``)."""


def refuse_in_computation(alias: str, current: Any) -> None:
    """Refuse a statement on the database ``alias`` (not ``TXCACHE["DATABASE"]``) while a
    cacheable function is being computed in the current read-only transaction."""
    if not isinstance(current, ReadOnlyCore) or not current.frames:
        return
    from txcache.django import conf  # the settings are read only when refusing

    routed = conf.txcache_settings().database
    raise TransactionError(
        f"a query on the database {alias!r} inside a cacheable function: only "
        f"TXCACHE['DATABASE'] ({routed!r}) is read in txcache transactions, so the result "
        f"would be cached without this query's tags and no write to {alias!r} would "
        "invalidate it; read it outside the function (or use the "
        f"{routed!r} database inside it)"
    )


def guard_other_database(
    execute: Execute, sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """The execute wrapper of every connection but the backend's own: a statement is
    refused inside a cacheable function's computation (the module docstring)."""
    current = current_transaction()
    if current is not None:
        refuse_in_computation(context["connection"].alias, current)
    return execute(sql, params, many, context)


def _install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: guard a connection of another backend than txcache's (whose
    connections install their own guard)."""
    if hasattr(connection, "txcache_route"):
        return
    if guard_other_database not in connection.execute_wrappers:  # a reconnection keeps it
        connection.execute_wrappers.insert(0, guard_other_database)


def watch_other_databases() -> None:
    """Have every connection Django opens to another database guarded (idempotent)."""
    connection_created.connect(_install, dispatch_uid="txcache.django.guard_other_database")

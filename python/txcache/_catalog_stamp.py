"""Whether the catalog a query ran with is the one the library analysed it with.

PostgreSQL's catalog is not versioned: a query at an old snapshot runs with the *current*
view definitions, partition trees, functions and policies. The library analyses a query
(its tags) with the catalog it read last; a schema change committed since then would make
it store a value computed under one definition with another definition's tags.

Every notifying DDL holds the advisory lock :data:`~txcache._ddl_notice.DDL_LOCK` in share
mode and then advances the sequence :data:`~txcache._ddl_notice.DDL_COUNTER`, both before
it commits. A catalog reading is stamped with the count and with the transactions holding
that lock (schema changes not committed, so not in the reading). After a query — which
holds its relations' locks, so that a schema change on them has either committed before it
or waits for the transaction to end — the catalog it ran with is the stamped one if the
count did not move and every transaction of the stamp still holds the lock.

Without the triggers (the agent's ``--ddl-tracking fingerprint``) nothing counts schema
changes: a reading is stamped with the catalog's fingerprint
(``txcache.schema_fingerprint(true)``, which every committed change alters for good), and
the check after a query reads the WAL insert position instead, for the value's store to
wait until a later pin shows the same fingerprint (:mod:`txcache._pending_stores`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import psycopg

from txcache import _lsn
from txcache._ddl_notice import DDL_COUNTER, DDL_LOCK

__all__ = [
    "UNTRACKED",
    "WAL_POSITION",
    "CatalogStamp",
    "read_stamp",
    "replica_stamp_check",
    "stamp_check",
    "still_current",
    "still_current_on_replica",
]

_HOLDERS = f"""
SELECT coalesce(array_agg(DISTINCT virtualtransaction ORDER BY virtualtransaction), '{{}}')
FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND granted AND classid = {DDL_LOCK[0]} AND objid = {DDL_LOCK[1]}
  AND objsubid = 2
"""
# How many times the sequence advanced (before the first nextval it shows 1, not called).
_ADVANCED = "CASE WHEN is_called THEN last_value ELSE 0 END"
_STAMP = f"""
SELECT (SELECT {_ADVANCED} FROM {DDL_COUNTER}), ({_HOLDERS}),
       (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint
"""
_COUNT = f"SELECT {_ADVANCED}, 0 FROM {DDL_COUNTER}"
_COUNT_AND_HOLDERS = f"""
SELECT {_ADVANCED}, (SELECT count(DISTINCT virtualtransaction) FROM pg_catalog.pg_locks
                      WHERE locktype = 'advisory' AND granted AND classid = {DDL_LOCK[0]}
                        AND objid = {DDL_LOCK[1]} AND objsubid = 2
                        AND virtualtransaction = ANY(%s::text[]))
FROM {DDL_COUNTER} s
"""

_FINGERPRINT = "SELECT txcache.schema_fingerprint(true)"
WAL_POSITION: tuple[str, tuple[Any, ...]] = (_lsn.WAL_POSITION, ())
"""The check after a query without DDL triggers: the WAL insert position once it ended."""


@dataclass(frozen=True)
class CatalogStamp:
    """When a catalog reading was taken, in schema changes."""

    count: int
    """:data:`~txcache._ddl_notice.DDL_COUNTER` when the reading began and ended."""
    uncommitted: tuple[str, ...]
    """Virtual transaction ids of schema changes running throughout the reading."""
    position: int = field(default=0, compare=False)
    """The WAL insert position when the reading began: every schema change in it committed
    below (the others were running, or changed the count)."""
    fingerprint: str | None = None
    """The catalog's fingerprint (``txcache.schema_fingerprint(true)``) when it was read
    for an agent without DDL triggers; ``None`` otherwise (or without the function)."""

    @property
    def tracked(self) -> bool:
        """Whether the database counts schema changes: without the DDL trigger (set up
        without a superuser) there is nothing to count, and nothing to check."""
        return self.count != _UNTRACKED


_UNTRACKED = -1
UNTRACKED = CatalogStamp(_UNTRACKED, ())
"""The stamp of every reading of a database without the DDL counter."""


def read_stamp(conn: psycopg.Connection[Any], *, fingerprint: bool = False) -> CatalogStamp:
    """The stamp as of now, outside any transaction (:data:`UNTRACKED` when the database
    has no DDL counter), with the catalog's fingerprint if ``fingerprint``."""
    try:
        row = conn.execute(_STAMP).fetchone()
    except psycopg.errors.UndefinedTable:
        stamp = UNTRACKED
    else:
        assert row is not None
        stamp = CatalogStamp(int(row[0]), tuple(row[1]), int(row[2]))
    if not fingerprint:
        return stamp
    return dataclasses.replace(stamp, fingerprint=_read_fingerprint(conn))


def _read_fingerprint(conn: psycopg.Connection[Any]) -> str | None:
    """``txcache.schema_fingerprint(true)`` now; ``None`` where setup did not install it."""
    try:
        row = conn.execute(_FINGERPRINT).fetchone()
    except psycopg.errors.UndefinedFunction:
        return None
    return None if row is None else str(row[0])


def stamp_check(stamp: CatalogStamp) -> tuple[str, tuple[Any, ...]] | None:
    """The statement (and its parameters) to run after a query, in its transaction, whose
    row :func:`still_current` takes; ``None`` when there is nothing to check."""
    if not stamp.tracked:
        return None
    if not stamp.uncommitted:
        return _COUNT, ()
    return _COUNT_AND_HOLDERS, (list(stamp.uncommitted),)


def replica_stamp_check(stamp: CatalogStamp) -> tuple[str, tuple[Any, ...]] | None:
    """:func:`stamp_check` for a query that ran on a hot standby, whose row
    :func:`still_current_on_replica` takes: the count as the standby replayed it (exact:
    the trigger logs it with ``setval``, not only ``nextval``'s value logged ahead)."""
    return (_COUNT, ()) if stamp.tracked else None


def still_current_on_replica(stamp: CatalogStamp, row: tuple[Any, ...] | None) -> bool:
    """Whether a query on a hot standby ran with no schema change after the reading
    ``stamp`` names: the standby replayed the reading's count, not a later one (a schema
    change advances it before its commit). That it replayed every change *in* the reading
    follows from the snapshot: the caller requires it to be at or after them, and a
    standby's snapshot is behind its replay. A reading taken while a schema change ran
    cannot be judged there (the change's lock is the primary's): it counts as another
    catalog."""
    if not stamp.tracked:
        return True
    return row is not None and not stamp.uncommitted and int(row[0]) == stamp.count


def still_current(stamp: CatalogStamp, row: tuple[Any, ...] | None) -> bool:
    """Whether the catalog the query ran with is the one ``stamp`` names (``row``: what
    :func:`stamp_check`'s statement returned)."""
    if not stamp.tracked:
        return True
    return row is not None and int(row[0]) == stamp.count and row[1] == len(stamp.uncommitted)

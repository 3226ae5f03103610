"""The session a query runs in, as far as it can change the query's result.

The same SQL returns different rows in another database, as another role (privileges, row
security), with another ``search_path`` (which table a name reads) or under other settings
(``TimeZone`` turns a ``timestamptz`` into another date, ``extra_float_digits`` another
text, ``lc_numeric`` another ``to_char``). A :class:`SessionContext` names all of it; its
:attr:`~SessionContext.digest` is part of every cache key (docs/library.md, "What a key
names"), so a value stored under one context is never served under another.

A context is read in the session itself (:data:`READ_CONTEXT`, one statement): the catalog
reading's fresh session gives the cache's context, and each pooled connection is read once
when first used, in the same round trip that *pins* its settings — sets each to the value it
has, at session level, so that a configuration reload cannot change them under the library
(only a ``SET`` can, which read-only transactions refuse and read/write ones undo).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

__all__ = [
    "CHECK_CONTEXT",
    "CONTEXT_DIGEST_BYTES",
    "FORGET_BLOCK_STATE",
    "PIN_AND_READ_CONTEXT",
    "READ_CONTEXT",
    "RESULT_SETTINGS",
    "SessionContext",
    "SessionReset",
    "context_changes",
    "context_from_row",
    "deallocation",
    "pin_statement",
    "reset_statement",
]

RESULT_SETTINGS: tuple[str, ...] = (
    # name resolution
    "search_path",
    # the text and the parsing of values
    "TimeZone",
    "timezone_abbreviations",
    "DateStyle",
    "IntervalStyle",
    "extra_float_digits",
    "bytea_output",
    "xmlbinary",
    "xmloption",
    "standard_conforming_strings",
    "backslash_quote",
    "array_nulls",
    "client_encoding",
    "quote_all_identifiers",
    # locale-dependent functions (to_char, money, full-text search)
    "lc_monetary",
    "lc_numeric",
    "lc_time",
    "default_text_search_config",
    # which rows a query returns
    "transform_null_equals",
    "row_security",
    "gin_fuzzy_search_limit",
    "pg_trgm.similarity_threshold",
    "pg_trgm.word_similarity_threshold",
    "pg_trgm.strict_word_similarity_threshold",
    # how the server computes at all
    "server_version_num",
)
"""Every setting a read query's result can depend on (docs/library.md, "What a key names",
says why each). Read with ``current_setting(name, true)``: an extension's setting reads
``NULL`` until set or loaded."""

CONTEXT_DIGEST_BYTES = 16

_NAMES = sql.Literal(list(RESULT_SETTINGS))

READ_CONTEXT = sql.SQL(
    """SELECT s.system_identifier::text, d.oid::int8, d.datname::text, r.oid::int8,
       r.rolname::text,
       ARRAY(SELECT n.oid::int8
             FROM unnest(pg_catalog.current_schemas(true)) WITH ORDINALITY AS p(name, i)
             JOIN pg_catalog.pg_namespace n ON n.nspname = p.name
             WHERE p.name NOT LIKE 'pg\\_temp\\_%' ORDER BY p.i),
       ARRAY(SELECT pg_catalog.current_setting(name, true) FROM unnest({names}::text[]) name),
       pg_catalog.pg_postmaster_start_time()::text
FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d, pg_catalog.pg_roles r
WHERE d.datname = pg_catalog.current_database() AND r.rolname = current_user"""
).format(names=_NAMES)
"""The session's context, one row (:func:`context_from_row`)."""

CHECK_CONTEXT = "SELECT current_user::text, " + ", ".join(
    f"pg_catalog.current_setting('{name}', true)" for name in RESULT_SETTINGS
)
"""What of the session's context a statement can change — its role and settings (the
search path's text among them) — in one row of plain columns, cheap to run
(:func:`context_changes`): after a statement that may have run code the library cannot
see (a user-defined function's ``SET``, ``set_config`` or ``SET ROLE``; a trigger's), whose
effect PostgreSQL reports to the client only for a few settings."""

# Sets every result setting to the value it has, at session level: PostgreSQL applies a
# reloaded configuration file only to settings not set in the session. server_version_num
# is read-only.
_PIN = sql.SQL(
    """SELECT count(pg_catalog.set_config(name, value, false))
FROM (SELECT name, pg_catalog.current_setting(name, true) AS value
      FROM unnest({names}::text[]) name) settings
WHERE value IS NOT NULL AND name <> 'server_version_num'"""
).format(names=_NAMES)

PIN_AND_READ_CONTEXT = sql.SQL("; ").join((_PIN, READ_CONTEXT))
"""Pin the session's result settings, then read its context: one round trip, the context
the last result."""


@dataclass(frozen=True)
class SessionContext:
    """What a session's query results depend on besides the data and the SQL."""

    system_identifier: str
    """The cluster's ``pg_control_system().system_identifier``: another cluster (a restored
    dump, another server) has another."""
    database_oid: int
    database: str
    role_oid: int
    """The role statements run as (``current_user``): privileges and row security."""
    role: str
    search_path: tuple[int, ...]
    """The schemas names resolve in (``current_schemas(true)``, as oids, in order)."""
    settings: tuple[tuple[str, str | None], ...]
    """Each of :data:`RESULT_SETTINGS` with its value."""
    server_started: str = field(default="", compare=False)
    """When the server answering started (``pg_postmaster_start_time()``): tells apart two
    running copies of one cluster (a clone made from its files has its identifier). Not
    part of the key: a restart changes nothing cached."""
    digest: bytes = field(init=False, repr=False)
    """The part of every cache key that names this context."""

    def __post_init__(self) -> None:
        parts = (
            self.system_identifier,
            str(self.database_oid),
            str(self.role_oid),
            ",".join(map(str, self.search_path)),
            *(f"{name}={'' if value is None else 'v' + value}" for name, value in self.settings),
        )
        digest = hashlib.blake2b(digest_size=CONTEXT_DIGEST_BYTES, person=b"txcache-context")
        for part in parts:
            encoded = part.encode()
            digest.update(len(encoded).to_bytes(4, "little"))
            digest.update(encoded)
        object.__setattr__(self, "digest", digest.digest())

    @property
    def database_identity(self) -> tuple[str, int]:
        """The cluster and the database: what the agent must follow for this session's
        results to be invalidated."""
        return self.system_identifier, self.database_oid

    @property
    def running_database(self) -> tuple[str, int, str]:
        """The database on the server running now: the DSNs whose sessions share it write
        to one WAL, so their read-your-writes tokens compare."""
        return self.system_identifier, self.database_oid, self.server_started

    def differences(self, other: SessionContext) -> list[str]:
        """What differs from ``other``, for a log line (``database``, ``role``,
        ``search_path``, each setting by name)."""
        found = []
        if self.database_identity != other.database_identity:
            found.append("database")
        if self.role_oid != other.role_oid:
            found.append("role")
        if self.search_path != other.search_path:
            found.append("search_path (resolved)")
        found += [
            mine[0]
            for mine, theirs in zip(self.settings, other.settings, strict=True)
            if mine != theirs
        ]
        return found

    def describe(self) -> str:
        """The context in one phrase, for logs."""
        return f"database {self.database!r} as role {self.role!r}"


def context_from_row(row: tuple[Any, ...] | None) -> SessionContext:
    """The :class:`SessionContext` of a :data:`READ_CONTEXT` row."""
    if row is None:
        raise ValueError("the session context query returned no row (no such role?)")
    system, database_oid, database, role_oid, role, path, values, started = row
    return SessionContext(
        system_identifier=str(system),
        database_oid=int(database_oid),
        database=str(database),
        role_oid=int(role_oid),
        role=str(role),
        search_path=tuple(int(oid) for oid in path),
        settings=tuple(zip(RESULT_SETTINGS, values, strict=True)),
        server_started=str(started),
    )


def context_changes(context: SessionContext, row: tuple[Any, ...] | None) -> list[str]:
    """What a :data:`CHECK_CONTEXT` row shows changed in a session of ``context``, named
    as :meth:`SessionContext.differences` names it (empty when nothing did)."""
    if row is None:
        return ["role", *RESULT_SETTINGS]  # no row: nothing is known to be as it was
    role, *values = row
    changed = [] if role == context.role else ["role"]
    return changed + [
        name for (name, before), now in zip(context.settings, values, strict=True) if now != before
    ]


def pin_statement(context: SessionContext) -> sql.Composed:
    """Set the session's result settings to ``context``'s values, at session level: after
    ``RESET ALL`` (a read/write transaction's connection is reset before it goes back to the
    pool) the session is back in the context it was read in."""
    pinned = [(n, v) for n, v in context.settings if v is not None and n != "server_version_num"]
    # Only those that differ: after RESET ALL most are back at the context's values already,
    # and setting one can cost much (TimeZone reads its zone file again).
    return sql.SQL(
        "SELECT count(pg_catalog.set_config(name, value, false)) "
        "FROM unnest({}::text[], {}::text[]) AS pinned(name, value) "
        "WHERE pg_catalog.current_setting(name) IS DISTINCT FROM value"
    ).format(sql.Literal([n for n, _ in pinned]), sql.Literal([v for _, v in pinned]))


# What DISCARD ALL does (PostgreSQL documents it as this sequence) in one round trip, but
# DEALLOCATE ALL: it would also drop psycopg's own prepared statements behind its back (its
# cache notices a DISCARD ALL only the first time it sees the statement), so only those the
# application PREPAREd in SQL are deallocated, by the names the last statement lists.
# DISCARD PLANS stays: a statement psycopg prepared meanwhile was analysed under the
# application's settings (a timestamptz literal under its TimeZone) and must be re-analysed.
# Then the session's result settings are pinned again to its context's values
# (txcache._session), and the application's prepared statements listed.
_RESET_SESSION = "; ".join(
    (
        "CLOSE ALL",
        "SET SESSION AUTHORIZATION DEFAULT",  # also ends SET ROLE, which RESET ALL keeps
        "RESET ALL",
        "UNLISTEN *",
        "SELECT pg_catalog.pg_advisory_unlock_all()",
        "DISCARD PLANS",
        "DISCARD TEMP",
        "DISCARD SEQUENCES",
    )
)
_PREPARED_IN_SQL = "SELECT name FROM pg_catalog.pg_prepared_statements WHERE from_sql"


# What a read/write block that left the rest of its session alone may still have changed:
# nextval (a serial column's default, unseen in the statement) sets what currval and lastval
# return, and a function it called may have created a temporary table — which would shadow
# a table of its name in later blocks' queries, unseen by their keys. Both are cheap to
# forget when there is nothing to forget.
FORGET_BLOCK_STATE = ("DISCARD TEMP", "DISCARD SEQUENCES")


class SessionReset(enum.Enum):
    """What a connection's session needs before it goes back to the pool."""

    NONE = "none"
    """Nothing: a read-only transaction, which refuses what would change it."""
    SEQUENCES = "sequences"
    """:data:`FORGET_BLOCK_STATE` (sequences' state, temporary tables): a read/write block
    whose statements left the rest alone (:class:`~txcache._session_watch.SessionWatch`)."""
    FULL = "full"
    """:func:`reset_statement`: anything else."""


def reset_statement(context: SessionContext | None) -> sql.Composed:
    """What resets a session (``_RESET_SESSION``), pins its result settings back to
    ``context`` (if known) and lists the statements the application PREPAREd (the last
    result)."""
    parts: list[sql.Composable] = [sql.SQL(_RESET_SESSION)]
    if context is not None:
        parts.append(pin_statement(context))
    parts.append(sql.SQL(_PREPARED_IN_SQL))
    return sql.SQL("; ").join(parts)


def deallocation(names: list[str]) -> sql.Composed | None:
    """``DEALLOCATE`` of the statements the application prepared in SQL (``names``, the
    last result of ``_RESET_SESSION``); ``None`` when there are none."""
    if not names:
        return None
    deallocate = sql.SQL("DEALLOCATE {}")
    return sql.SQL("; ").join(deallocate.format(sql.Identifier(n)) for n in names)

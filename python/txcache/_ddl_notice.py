"""The SQL side of DDL notices: the functions ``txcache setup`` installs in schema ``txcache``
so that schema changes reach the agent through the replication stream.

Two sources write notices, both as transactional logical messages with the prefix
:data:`DDL_MESSAGE_PREFIX`, decoded inside the transaction that caused them:

- ``txcache.ddl_notice()``, an event trigger on ``ddl_command_end`` and ``sql_drop`` (and on
  ``ddl_command_start``, where it only records inheritance links): one line per object a DDL
  command created, altered or dropped;
- ``txcache.truncate_notice()``, an ``AFTER TRUNCATE`` trigger on every partition of a tracked
  partitioned table: a ``TRUNCATE`` run on a partition directly is not replicated at all
  when the publication publishes via the partition root, so the trigger names the partition
  and its ancestors.

The line format and what the agent does with each kind are in ``docs/setup.md``.

The functions' bodies are package data, one file per function in ``txcache/sql/`` (with the
larger queries of ``txcache setup``), read by :func:`read_sql`; this module keeps their
declarations and the constants the bodies name.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from psycopg import sql

__all__ = [
    "DDL_COUNTER",
    "DDL_LOCK",
    "DDL_MESSAGE_PREFIX",
    "IDENTITIES_BEFORE",
    "INHERITS_BEFORE",
    "SCHEMA_BEFORE",
    "SCHEMA_MESSAGE_PREFIX",
    "TRUNCATE_TRIGGER",
    "function_signatures",
    "functions",
    "read_sql",
]

DDL_MESSAGE_PREFIX = "txcache-ddl"
"""The prefix of the logical messages both triggers emit (``docs/setup.md``)."""

SCHEMA_MESSAGE_PREFIX = "txcache-schema"
"""The prefix of the message ``txcache.ddl_notice()`` writes at the end of every DDL command:
``txcache.schema_digest()`` as the command left the catalog — and at its start, after
:data:`SCHEMA_BEFORE`, as the command found it. The agent tells a schema change no trigger
saw by a digest that no such message explains, or a digest found that is not the one the
DDL before left (docs/agent.md)."""

SCHEMA_BEFORE = "before:"
"""What starts the content of the schema message a DDL command writes as it starts."""

TRUNCATE_TRIGGER = "txcache_truncate_notice"
"""The name of the ``AFTER TRUNCATE`` trigger on partitions."""

DDL_COUNTER = "txcache.ddl_counter"
"""A sequence every notifying DDL advances before it commits. Sequences are not
transactional, so a library reads the current count from inside any snapshot and can tell
whether its catalog (stamped with the count it was read at) may be older than the catalog
a query just ran with (docs/library.md, "Schema changes under a running query")."""

INHERITS_BEFORE = "txcache.inherits_before"
"""The session setting in which the ``ddl_command_start`` trigger keeps the inheritance
edges as an ``ALTER TABLE`` or ``DROP TABLE`` starts (``edges:`` and ``child:parent`` oids,
comma-separated; empty once the command ended)."""

IDENTITIES_BEFORE = "txcache.identities_before"
"""The session setting in which the ``ddl_command_start`` trigger keeps, as an ``ALTER
TABLE`` starts, the replica identity of every tracked table that is not FULL
(``identities:`` and ``oid:relreplident``, comma-separated; empty once the command ended):
the end trigger tells a table whose identity the command changed from one left as it was."""

DDL_LOCK = (0x74786361, 0x64646C00)  # 'txca', 'ddl'
"""The advisory lock key (two ``int4``) a notifying DDL holds in share mode from before it
advances :data:`DDL_COUNTER` until it ends: ``pg_locks`` shows which schema changes are
still uncommitted, so a catalog read while one runs is known not to contain it."""

# The constants the .sql files write as ``{name}``: substituted by read_sql, so that each has
# one definition, above. None holds a quote or a brace: each is pasted in as it is.
_PLACEHOLDERS = {
    "counter": DDL_COUNTER,
    "identities_before": IDENTITIES_BEFORE,
    "inherits_before": INHERITS_BEFORE,
    "lock": f"{DDL_LOCK[0]}, {DDL_LOCK[1]}",
    "prefix": DDL_MESSAGE_PREFIX,
    "schema_before": SCHEMA_BEFORE,
    "schema_prefix": SCHEMA_MESSAGE_PREFIX,
    "truncate_trigger": TRUNCATE_TRIGGER,
}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_HEADER = re.compile(r"\A(?:--[^\n]*\n)*")


def read_sql(name: str) -> str:
    """The SQL of ``txcache/sql/<name>.sql``, as sent to PostgreSQL.

    The file's leading ``--`` lines document it and are dropped; the rest, from the empty line
    after them (a function's body begins with a newline), is the SQL exactly, with each
    ``{name}`` of :data:`_PLACEHOLDERS` replaced by its value: setup compares a function's
    body so made with ``pg_proc.prosrc``. An unknown ``{name}`` raises :class:`ValueError`.
    """
    text = (resources.files("txcache") / "sql" / f"{name}.sql").read_text(encoding="utf-8")
    body = _HEADER.sub("", text, count=1)

    def value(match: re.Match[str]) -> str:
        if match[1] not in _PLACEHOLDERS:
            raise ValueError(f"txcache/sql/{name}.sql: unknown placeholder {match[0]}")
        return _PLACEHOLDERS[match[1]]

    return _PLACEHOLDER.sub(value, body)


# Every function, in creation order (each calls only the ones before it): name, then what
# follows ``CREATE OR REPLACE FUNCTION txcache.`` — signature, result type, language and
# attributes. All but ddl_count are SECURITY INVOKER: they run as the DDL's or the
# TRUNCATE's user.
_DECLARATIONS = (
    ("ddl_escape", "ddl_escape(text)", "text", "sql", "IMMUTABLE STRICT PARALLEL SAFE"),
    ("ddl_line", "ddl_line(text, text, text, oid)", "text", "sql", "STABLE PARALLEL SAFE"),
    ("ddl_kind", "ddl_kind(text, text)", "text", "sql", "IMMUTABLE PARALLEL SAFE"),
    ("ddl_ancestors", "ddl_ancestors(oid)", "SETOF oid", "sql", "STABLE"),
    ("ddl_family", "ddl_family(oid)", "SETOF oid", "sql", "STABLE"),
    ("ddl_edges", "ddl_edges(text)", "TABLE (child oid, parent oid)", "sql", "IMMUTABLE"),
    ("ddl_changed_edge_ends", "ddl_changed_edge_ends(text)", "SETOF oid", "sql", "STABLE"),
    ("ddl_tracked", "ddl_tracked(oid)", "boolean", "sql", "STABLE"),
    ("ddl_joined_partitions", "ddl_joined_partitions(text)", "SETOF oid", "sql", "STABLE"),
    (
        "identity_problems",
        "identity_problems(oid[], name)",
        "TABLE (relation oid, problem text, keyed boolean)",
        "sql",
        "STABLE",
    ),
    ("ddl_identity", "ddl_identity(oid, boolean, text)", "void", "plpgsql", ""),
    ("ddl_count", "ddl_count()", "bigint", "sql", "SECURITY DEFINER"),
    (
        "row_version",
        "row_version(versions boolean, xmin xid)",
        "text",
        "sql",
        "IMMUTABLE PARALLEL SAFE",
    ),
    (
        "schema_fingerprint",
        "schema_fingerprint(versions boolean)",
        "text",
        "sql",
        "STABLE PARALLEL SAFE",
    ),
    ("schema_digest", "schema_digest()", "text", "sql", "STABLE PARALLEL SAFE"),
    ("truncate_notice", "truncate_notice()", "trigger", "plpgsql", ""),
    ("prepare_partitions", "prepare_partitions(oid)", "void", "plpgsql", ""),
    ("ddl_notice", "ddl_notice()", "event_trigger", "plpgsql", ""),
    (
        "standby_snapshot",
        "standby_snapshot(OUT replay_lsn pg_lsn, OUT snapshot text, OUT snapshot_id text)",
        "record",
        "plpgsql",
        "VOLATILE",
    ),
)

_SAFE_PATH = "SET search_path = pg_catalog, pg_temp"


@functools.cache
def functions() -> tuple[tuple[str, str, sql.Composed], ...]:
    """``(name, body, CREATE OR REPLACE statement)`` of every function, in creation order:
    setup compares each body with ``pg_proc.prosrc`` and replaces the ones that differ.

    Read on first use rather than at import: the library imports this module for its
    constants alone.
    """
    result = []
    for name, signature, returns, language, attributes in _DECLARATIONS:
        body = read_sql(name)
        create = sql.SQL(
            f"CREATE OR REPLACE FUNCTION txcache.{signature} RETURNS {returns} "
            f"LANGUAGE {language} {attributes} {_SAFE_PATH} AS {{}}"
        )
        result.append((name, body, create.format(sql.Literal(body))))
    return tuple(result)


def function_signatures() -> tuple[str, ...]:
    """Every function's identity as ``to_regprocedure`` reads it (``txcache.name(types)``:
    the input arguments' types, without names or ``OUT`` arguments)."""
    signatures = []
    for _, signature, _, _, _ in _DECLARATIONS:
        name, _, arguments = signature.partition("(")
        types = []
        for argument in arguments.removesuffix(")").split(","):
            words = argument.split()
            if not words or words[0] == "OUT":
                continue
            types.append(words[-1])  # a name, if any, comes first; each type is one word
        signatures.append(f"txcache.{name}({', '.join(types)})")
    return tuple(signatures)

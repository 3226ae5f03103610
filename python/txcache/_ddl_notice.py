"""The SQL side of DDL notices: the functions ``txcache setup`` installs in schema ``txcache``
so that schema changes reach the agent through the replication stream.

Two sources write notices, both as transactional logical messages with the prefix
:data:`DDL_MESSAGE_PREFIX`, decoded inside the transaction that caused them:

- ``txcache.ddl_notice()``, an event trigger on ``ddl_command_end`` and ``sql_drop``: one line
  per object a DDL command created, altered or dropped;
- ``txcache.truncate_notice()``, an ``AFTER TRUNCATE`` trigger on every partition of a tracked
  partitioned table: a ``TRUNCATE`` run on a partition directly is not replicated at all
  when the publication publishes via the partition root, so the trigger names the partition
  and its ancestors.

The line format and what the agent does with each kind are in ``docs/setup.md``.
"""

from __future__ import annotations

from psycopg import sql

__all__ = [
    "DDL_COUNTER",
    "DDL_LOCK",
    "DDL_MESSAGE_PREFIX",
    "FUNCTIONS",
    "INHERITS_BEFORE",
    "TRUNCATE_TRIGGER",
]

DDL_MESSAGE_PREFIX = "txcache-ddl"
"""The prefix of the logical messages both triggers emit (``docs/setup.md``)."""

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

DDL_LOCK = (0x74786361, 0x64646C00)  # 'txca', 'ddl'
"""The advisory lock key (two ``int4``) a notifying DDL holds in share mode from before it
advances :data:`DDL_COUNTER` until it ends: ``pg_locks`` shows which schema changes are
still uncommitted, so a catalog read while one runs is known not to contain it."""

# Escapes a name for one tab-separated field: backslash, tab, newline, carriage return.
_ESCAPE_BODY = r"""
SELECT replace(replace(replace(replace($1, E'\\', E'\\\\'), E'\t', E'\\t'), E'\n', E'\\n'),
               E'\r', E'\\r')
"""

# One line of a notice: kind, schema, name, oid.
_LINE_BODY = r"""
SELECT $1 || E'\t' || txcache.ddl_escape(coalesce($2, '')) || E'\t'
       || txcache.ddl_escape(coalesce($3, '')) || E'\t' || coalesce($4, 0)::oid::text
"""

# A relation and every table it inherits from (its partition ancestors, up to the root).
_ANCESTORS_BODY = r"""
WITH RECURSIVE up(rel) AS (
    SELECT $1
    UNION
    SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.rel
)
SELECT rel FROM up
"""

# A relation, its ancestors and its descendants (partitions and inheritance children): a
# partition attached or detached is named by its parent's ALTER TABLE only, yet reads of it
# under its own name change their tags' meaning (an attached partition's writes go out
# under its root's name).
_FAMILY_BODY = r"""
WITH RECURSIVE down(rel) AS (
    SELECT $1
    UNION
    SELECT i.inhrelid FROM pg_inherits i JOIN down ON i.inhparent = down.rel
)
SELECT txcache.ddl_ancestors($1)
UNION
SELECT rel FROM down
"""

# What a DDL (object type $1, command tag $2) on an object that is not a relation or an
# index means for cached results: ``none`` for objects and commands no read result depends
# on (privileges and comments included: results are not cached per role), ``all`` (every
# cached result) for the rest — functions, types, policies, publications, schemas, rules,
# extensions, … — whose dependents cannot be told from the catalog alone.
_KIND_BODY = r"""
SELECT CASE
    WHEN $1 IN ('table', 'view', 'materialized view', 'foreign table') THEN 'table'
    WHEN $1 = 'index' THEN 'index'
    WHEN $1 IN ('sequence', 'trigger', 'statistics object', 'event trigger',
                'table constraint', 'domain constraint', 'default value')
         OR $2 IN ('GRANT', 'REVOKE', 'COMMENT', 'SECURITY LABEL',
                   'ALTER DEFAULT PRIVILEGES') THEN 'none'
    ELSE 'all'
END
"""

# The inheritance edges (``child:parent``, comma-separated) when an ``ALTER TABLE`` or
# ``DROP TABLE`` starts, kept in the session setting INHERITS_BEFORE: at its end a
# ``DETACH PARTITION``, ``NO INHERIT`` or dropped child shows only the edges left, yet reads
# of the other side (the detached partition under its own name, the parent) change meaning.
# A session setting survives the transactions of ``DETACH PARTITION … CONCURRENTLY``.
_EDGES = "SELECT string_agg(inhrelid::text || ':' || inhparent::text, ',') FROM pg_inherits"

# Both ends of every edge added or removed since the command started (none when no start
# was recorded: a command the start trigger skips).
_CHANGED_EDGE_ENDS_BODY = r"""
WITH before(child, parent) AS (
    SELECT split_part(edge, ':', 1)::oid, split_part(edge, ':', 2)::oid
    FROM unnest(string_to_array(substr($1, length('edges:') + 1), ',')) edge
    WHERE $1 LIKE 'edges:%' AND edge <> ''
), now(child, parent) AS (
    SELECT inhrelid, inhparent FROM pg_inherits WHERE $1 LIKE 'edges:%'
), changed AS (
    (SELECT * FROM before EXCEPT SELECT * FROM now)
    UNION (SELECT * FROM now EXCEPT SELECT * FROM before)
)
SELECT child FROM changed UNION SELECT parent FROM changed
"""

# Lines for relations a ddl_command_end touched: each relation (an index counts as its table)
# with its ancestors and descendants, and ``all`` when another schema has a relation of the
# same name (the change may alter which one an unqualified name resolves to).
_RELATION_LINES = r"""
SELECT txcache.ddl_line('table', rn.nspname, r.relname, r.oid)
FROM targets t
CROSS JOIN LATERAL txcache.ddl_family(t.rel) a(rel)
JOIN pg_class r ON r.oid = a.rel
JOIN pg_namespace rn ON rn.oid = r.relnamespace
UNION
SELECT txcache.ddl_line('all', tn.nspname, tc.relname, tc.oid)
FROM targets t
JOIN pg_class tc ON tc.oid = t.rel
JOIN pg_namespace tn ON tn.oid = tc.relnamespace
WHERE EXISTS (SELECT 1 FROM pg_class o JOIN pg_namespace n ON n.oid = o.relnamespace
              WHERE o.relname = tc.relname AND o.relnamespace <> tc.relnamespace
                AND o.relkind IN ('r', 'p', 'v', 'm', 'f')
                AND n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema')
"""

# The event trigger function. Runs as the user who issued the DDL (who owns the tables it
# alters). ``txcache.in_ddl_notice`` keeps its own ALTER TABLE and CREATE TRIGGER from
# notifying again.
_NOTICE_BODY = (
    (
        r"""
DECLARE
    tracked name[] := ARRAY(SELECT schema_name FROM txcache.tracked_schemas);
    target oid;
    lines text[];
BEGIN
    IF current_setting('txcache.in_ddl_notice', true) = 'on' THEN
        RETURN;
    END IF;
    IF TG_EVENT = 'ddl_command_start' THEN
        IF TG_TAG IN ('ALTER TABLE', 'DROP TABLE') THEN
            PERFORM set_config('{inherits_before}',
                               'edges:' || coalesce(({edges}), ''), false);
        END IF;
        RETURN;
    END IF;
    IF TG_EVENT = 'sql_drop' THEN
        lines := ARRAY(
            SELECT DISTINCT txcache.ddl_line(
                txcache.ddl_kind(d.object_type, NULL), d.schema_name,
                CASE WHEN txcache.ddl_kind(d.object_type, NULL) IN ('table', 'index')
                     THEN d.object_name ELSE d.object_identity END,
                d.objid)
            FROM pg_event_trigger_dropped_objects() d
            WHERE d.objsubid = 0 AND NOT d.is_temporary
              AND coalesce(d.schema_name, '') <> 'txcache'
              AND coalesce(d.schema_name, '') NOT LIKE 'pg\_toast%'
              AND (txcache.ddl_kind(d.object_type, NULL) IN ('table', 'index')
                   OR d.original OR d.normal)
            ORDER BY 1);
    ELSE
        FOR target IN
            SELECT DISTINCT c.oid
            FROM pg_event_trigger_ddl_commands() d
            JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
              AND (n.nspname = ANY (tracked)
                   OR (c.relispartition AND (
                       SELECT rn.nspname FROM pg_class rc
                       JOIN pg_namespace rn ON rn.oid = rc.relnamespace
                       WHERE rc.oid = pg_partition_root(c.oid)) = ANY (tracked)))
        LOOP
            PERFORM set_config('txcache.in_ddl_notice', 'on', true);
            IF (SELECT relreplident FROM pg_class WHERE oid = target) <> 'f' THEN
                EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', target::regclass);
            END IF;
            PERFORM txcache.prepare_partitions(target);
            PERFORM set_config('txcache.in_ddl_notice', 'off', true);
        END LOOP;
        lines := ARRAY(
            WITH commands AS (
                SELECT d.*, c.relkind, c.relpersistence, i.indrelid
                FROM pg_event_trigger_ddl_commands() d
                LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
                LEFT JOIN pg_index i ON i.indexrelid = c.oid
                WHERE coalesce(d.schema_name, '') <> 'txcache'
                  AND coalesce(d.schema_name, '') NOT LIKE 'pg\_temp%'
                  AND coalesce(d.schema_name, '') NOT LIKE 'pg\_toast%'
                  AND coalesce(c.relpersistence, 'p') <> 't'
            ), targets AS (
                SELECT CASE WHEN relkind IN ('i', 'I') THEN indrelid ELSE objid END AS rel
                FROM commands WHERE relkind IN ('r', 'p', 'v', 'm', 'f', 'i', 'I')
                UNION
                SELECT rel FROM txcache.ddl_changed_edge_ends(
                    current_setting('{inherits_before}', true)) rel
                WHERE EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = rel)
            )
            SELECT line FROM ("""
        + _RELATION_LINES
        + r"""
                UNION
                SELECT txcache.ddl_line(txcache.ddl_kind(object_type, command_tag), schema_name,
                                        object_identity, objid)
                FROM commands
                WHERE relkind IS NULL OR relkind NOT IN ('r', 'p', 'v', 'm', 'f', 'i', 'I')
            ) found(line)
            ORDER BY 1);
        PERFORM set_config('{inherits_before}', '', false);
    END IF;
    IF cardinality(lines) > 0 THEN
        -- The lock first: a count advanced by a transaction not yet ended is always seen
        -- together with that transaction in pg_locks.
        PERFORM pg_advisory_xact_lock_shared({lock});
        PERFORM nextval('{counter}');
        PERFORM pg_logical_emit_message(true, 'txcache-ddl', array_to_string(lines, E'\n'));
    END IF;
END
"""
    )
    .replace("{inherits_before}", INHERITS_BEFORE)
    .replace("{edges}", _EDGES)
    .replace("{lock}", f"{DDL_LOCK[0]}, {DDL_LOCK[1]}")
    .replace("{counter}", DDL_COUNTER)
)

# Prepares every partition in the partition tree of ``$1``: the TRUNCATE trigger where it
# lacks it, and REPLICA IDENTITY FULL (a table attached from an untracked schema has neither).
# Its own DDL notifies nothing: the event trigger would prepare the same tree meanwhile.
_PREPARE_PARTITIONS_BODY = rf"""
DECLARE
    part record;
    notifying text := coalesce(current_setting('txcache.in_ddl_notice', true), 'off');
BEGIN
    PERFORM set_config('txcache.in_ddl_notice', 'on', true);
    FOR part IN
        SELECT p.relid::regclass AS name, c.relreplident <> 'f' AS needs_identity,
               NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = p.relid
                           AND g.tgname = '{TRUNCATE_TRIGGER}') AS needs_trigger
        FROM pg_partition_tree(pg_partition_root($1)) p
        JOIN pg_class c ON c.oid = p.relid
        WHERE c.relispartition AND c.relkind IN ('r', 'p')
    LOOP
        IF part.needs_identity THEN
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', part.name);
        END IF;
        IF part.needs_trigger THEN
            EXECUTE format('CREATE TRIGGER {TRUNCATE_TRIGGER} AFTER TRUNCATE ON %s '
                           'FOR EACH STATEMENT EXECUTE FUNCTION txcache.truncate_notice()',
                           part.name);
            EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER {TRUNCATE_TRIGGER}',
                           part.name);
        END IF;
    END LOOP;
    PERFORM set_config('txcache.in_ddl_notice', notifying, true);
END
"""

# The TRUNCATE trigger function: the truncated partition and its ancestors, as ``truncate``.
_TRUNCATE_BODY = r"""
BEGIN
    PERFORM pg_logical_emit_message(true, 'txcache-ddl', array_to_string(ARRAY(
        SELECT txcache.ddl_line('truncate', n.nspname, c.relname, c.oid)
        FROM txcache.ddl_ancestors(TG_RELID) a(rel)
        JOIN pg_class c ON c.oid = a.rel
        JOIN pg_namespace n ON n.oid = c.relnamespace
        ORDER BY 1), E'\n'));
    RETURN NULL;
END
"""

_SAFE_PATH = "SET search_path = pg_catalog, pg_temp"


def _function(signature: str, returns: str, language: str, attributes: str) -> sql.SQL:
    return sql.SQL(
        f"CREATE OR REPLACE FUNCTION txcache.{signature} RETURNS {returns} "
        f"LANGUAGE {language} {attributes} {_SAFE_PATH} AS {{}}"
    )


FUNCTIONS: tuple[tuple[str, str, sql.Composed], ...] = tuple(
    (name, body, create.format(sql.Literal(body)))
    for name, body, create in (
        (
            "ddl_escape",
            _ESCAPE_BODY,
            _function("ddl_escape(text)", "text", "sql", "IMMUTABLE STRICT PARALLEL SAFE"),
        ),
        (
            "ddl_line",
            _LINE_BODY,
            _function("ddl_line(text, text, text, oid)", "text", "sql", "STABLE PARALLEL SAFE"),
        ),
        (
            "ddl_kind",
            _KIND_BODY,
            _function("ddl_kind(text, text)", "text", "sql", "IMMUTABLE PARALLEL SAFE"),
        ),
        (
            "ddl_ancestors",
            _ANCESTORS_BODY,
            _function("ddl_ancestors(oid)", "SETOF oid", "sql", "STABLE"),
        ),
        (
            "ddl_family",
            _FAMILY_BODY,
            _function("ddl_family(oid)", "SETOF oid", "sql", "STABLE"),
        ),
        (
            "ddl_changed_edge_ends",
            _CHANGED_EDGE_ENDS_BODY,
            _function("ddl_changed_edge_ends(text)", "SETOF oid", "sql", "STABLE"),
        ),
        (
            "truncate_notice",
            _TRUNCATE_BODY,
            _function("truncate_notice()", "trigger", "plpgsql", ""),
        ),
        (
            "prepare_partitions",
            _PREPARE_PARTITIONS_BODY,
            _function("prepare_partitions(oid)", "void", "plpgsql", ""),
        ),
        ("ddl_notice", _NOTICE_BODY, _function("ddl_notice()", "event_trigger", "plpgsql", "")),
    )
)
"""``(name, body, CREATE OR REPLACE statement)`` of every function, in creation order: setup
compares each body with ``pg_proc.prosrc`` and replaces the ones that differ."""

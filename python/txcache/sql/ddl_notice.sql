-- txcache.ddl_notice() RETURNS event_trigger: the event trigger function (ddl_command_start,
-- ddl_command_end, sql_drop). Runs as the user who issued the DDL, who owns the tables it
-- alters; the setting txcache.in_ddl_notice keeps its own ALTER TABLE and CREATE TRIGGER
-- from notifying again. At ddl_command_end it sees to the replica identity of the tracked
-- tables the command touched (txcache.ddl_identity: FULL for new ones where PostgreSQL
-- allows it, a WARNING where a table is left without) and gives partitions the TRUNCATE
-- trigger; at ddl_command_end and sql_drop it sends one notice naming what the command
-- touched (docs/setup.md, "DDL messages"); at ddl_command_end, then, the catalog's digest
-- (txcache.schema_digest), and at ddl_command_start the digest of the catalog the command
-- finds: the agent tells a change no trigger saw between two DDL commands by a digest found
-- that is not the one the DDL before left.

DECLARE
    target oid;
    joined boolean;
    lines text[];
BEGIN
    IF current_setting('txcache.in_ddl_notice', true) = 'on' THEN
        RETURN;
    END IF;
    IF TG_EVENT = 'ddl_command_start' THEN
        PERFORM pg_logical_emit_message(true, '{schema_prefix}',
                                        '{schema_before}' || txcache.schema_digest());
        IF TG_TAG IN ('ALTER TABLE', 'DROP TABLE') THEN
            -- The inheritance edges as the command starts ('edges:' and comma-separated
            -- child:parent oids): at its end a DETACH PARTITION, NO INHERIT or dropped child
            -- shows only the edges left, yet reads of the other side (the detached partition
            -- under its own name, the parent) change meaning. A session setting survives the
            -- transactions of DETACH PARTITION ... CONCURRENTLY.
            PERFORM set_config('{inherits_before}', 'edges:' || coalesce((
                SELECT string_agg(inhrelid::text || ':' || inhparent::text, ',')
                FROM pg_inherits), ''), false);
        END IF;
        IF TG_TAG = 'ALTER TABLE' THEN
            -- The tracked tables not FULL as the command starts (oid:relreplident): at its
            -- end a table whose identity the command changed is told from one left as it
            -- was (txcache.ddl_identity).
            PERFORM set_config('{identities_before}', 'identities:' || coalesce((
                SELECT string_agg(oid::text || ':' || relreplident::text, ',') FROM pg_class
                WHERE relkind IN ('r', 'p') AND relreplident <> 'f'
                  AND txcache.ddl_tracked(oid)), ''), false);
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
        PERFORM set_config('txcache.in_ddl_notice', 'on', true);
        -- Each tracked table the command touched, and whether it joined the tracked tables
        -- with it: created, or a partition attached from outside the tracked schemas.
        FOR target, joined IN
            SELECT rel, bool_or(created) FROM (
                SELECT d.objid, d.command_tag IN ('CREATE TABLE', 'CREATE TABLE AS',
                                                  'SELECT INTO')
                FROM pg_event_trigger_ddl_commands() d
                WHERE d.classid = 'pg_class'::regclass AND txcache.ddl_tracked(d.objid)
                UNION ALL
                SELECT part, true FROM txcache.ddl_joined_partitions(
                    current_setting('{inherits_before}', true)) part
            ) touched(rel, created)
            GROUP BY rel
        LOOP
            PERFORM txcache.ddl_identity(target, joined,
                                         current_setting('{identities_before}', true));
            PERFORM txcache.prepare_partitions(target);
        END LOOP;
        PERFORM set_config('txcache.in_ddl_notice', 'off', true);
        PERFORM set_config('{identities_before}', '', false);
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
            SELECT line FROM (
                -- Each relation touched (an index counts as its table) with its ancestors and
                -- descendants, and `all` when another schema has a relation of the same name
                -- (the change may alter which one an unqualified name resolves to).
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
                WHERE EXISTS (
                    SELECT 1 FROM pg_class o JOIN pg_namespace n ON n.oid = o.relnamespace
                    WHERE o.relname = tc.relname AND o.relnamespace <> tc.relnamespace
                      AND o.relkind IN ('r', 'p', 'v', 'm', 'f')
                      AND n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema')
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
        PERFORM txcache.ddl_count();
        PERFORM pg_logical_emit_message(true, '{prefix}', array_to_string(lines, E'\n'));
    END IF;
    IF TG_EVENT = 'ddl_command_end' THEN
        -- The catalog as this command left it: the agent tells a change no trigger saw by a
        -- catalog that no such digest explains.
        PERFORM pg_logical_emit_message(true, '{schema_prefix}', txcache.schema_digest());
    END IF;
END

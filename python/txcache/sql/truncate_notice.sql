-- txcache.truncate_notice() RETURNS trigger: the AFTER TRUNCATE trigger function on
-- partitions. Emits the truncated partition and its ancestors, as `truncate` lines: a
-- partition truncated directly is not replicated when the publication publishes via the
-- partition root.

BEGIN
    PERFORM pg_logical_emit_message(true, '{prefix}', array_to_string(ARRAY(
        SELECT txcache.ddl_line('truncate', n.nspname, c.relname, c.oid)
        FROM txcache.ddl_ancestors(TG_RELID) a(rel)
        JOIN pg_class c ON c.oid = a.rel
        JOIN pg_namespace n ON n.oid = c.relnamespace
        ORDER BY 1), E'\n'));
    RETURN NULL;
END

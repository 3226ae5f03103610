-- txcache.ddl_tracked(oid) RETURNS boolean: whether a relation is a table txcache tracks: an
-- ordinary or partitioned table, not temporary, in a tracked schema or a partition of a
-- partitioned table in one (wherever the partition itself lives).

SELECT c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
       AND (n.nspname IN (SELECT schema_name FROM txcache.tracked_schemas)
            OR (c.relispartition AND (
                SELECT rn.nspname FROM pg_class rc
                JOIN pg_namespace rn ON rn.oid = rc.relnamespace
                WHERE rc.oid = pg_partition_root(c.oid))
                IN (SELECT schema_name FROM txcache.tracked_schemas)))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1

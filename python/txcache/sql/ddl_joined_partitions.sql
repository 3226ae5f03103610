-- txcache.ddl_joined_partitions(before text) RETURNS SETOF oid: the partitions that joined a
-- tracked partition tree in the command, from outside the tracked schemas: those of every
-- subtree attached since the command started (given the edges recorded then,
-- txcache.ddl_edges), the attached table included. txcache had never prepared them.

SELECT DISTINCT t.relid
FROM pg_inherits i
CROSS JOIN LATERAL pg_partition_tree(i.inhrelid) t
JOIN pg_class c ON c.oid = t.relid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE $1 LIKE 'edges:%'
  AND (i.inhrelid, i.inhparent) NOT IN (SELECT * FROM txcache.ddl_edges($1))
  AND c.relispartition AND txcache.ddl_tracked(c.oid)
  AND n.nspname NOT IN (SELECT schema_name FROM txcache.tracked_schemas)

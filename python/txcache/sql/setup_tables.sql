-- The tables txcache setup tracks: ordinary and partitioned tables of the tracked schemas
-- (%(schemas)s, a name[]) and partitions of tracked roots, wherever they live; temporary
-- tables left out. Columns in the order of _setup._Table, up to its replica identity
-- (relreplident); %% is a literal % for psycopg.

SELECT c.oid, format('%%I.%%I', n.nspname, c.relname), n.nspname, c.relname,
       c.relispartition, pg_has_role(c.relowner, 'USAGE'), pg_get_userbyid(c.relowner),
       c.relreplident::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
  AND (n.nspname = ANY(%(schemas)s)
       OR (c.relispartition AND (
           SELECT rn.nspname FROM pg_class rc JOIN pg_namespace rn ON rn.oid = rc.relnamespace
           WHERE rc.oid = pg_partition_root(c.oid)) = ANY(%(schemas)s)))
ORDER BY 2

-- txcache.ddl_ancestors(oid) RETURNS SETOF oid: a relation and every table it inherits from
-- (its partition ancestors, up to the root).

WITH RECURSIVE up(rel) AS (
    SELECT $1
    UNION
    SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.rel
)
SELECT rel FROM up

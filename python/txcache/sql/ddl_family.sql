-- txcache.ddl_family(oid) RETURNS SETOF oid: a relation, its ancestors and its descendants
-- (partitions and inheritance children). A partition attached or detached is named by its
-- parent's ALTER TABLE only, yet reads of it under its own name change their tags' meaning
-- (an attached partition's writes go out under its root's name).

WITH RECURSIVE down(rel) AS (
    SELECT $1
    UNION
    SELECT i.inhrelid FROM pg_inherits i JOIN down ON i.inhparent = down.rel
)
SELECT txcache.ddl_ancestors($1)
UNION
SELECT rel FROM down

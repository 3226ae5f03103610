-- txcache.ddl_changed_edge_ends(before text) RETURNS SETOF oid: both ends of every
-- inheritance edge added or removed since the command started, given the edges recorded
-- then (txcache.ddl_edges); none when no start was recorded.

WITH before(child, parent) AS (
    SELECT * FROM txcache.ddl_edges($1)
), now(child, parent) AS (
    SELECT inhrelid, inhparent FROM pg_inherits WHERE $1 LIKE 'edges:%'
), changed AS (
    (SELECT * FROM before EXCEPT SELECT * FROM now)
    UNION (SELECT * FROM now EXCEPT SELECT * FROM before)
)
SELECT child FROM changed UNION SELECT parent FROM changed

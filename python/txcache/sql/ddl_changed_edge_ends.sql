-- txcache.ddl_changed_edge_ends(before text) RETURNS SETOF oid: both ends of every
-- inheritance edge added or removed since the command started, given the edges recorded
-- then ('edges:' and comma-separated child:parent oids, see ddl_notice.sql); none when no
-- start was recorded (a command the start trigger skips).

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

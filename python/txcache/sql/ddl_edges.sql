-- txcache.ddl_edges(before text) RETURNS TABLE (child oid, parent oid): the inheritance edges
-- recorded as a command started ('edges:' and comma-separated child:parent oids, see
-- ddl_notice.sql); none when no start was recorded (a command the start trigger skips).

SELECT split_part(edge, ':', 1)::oid, split_part(edge, ':', 2)::oid
FROM unnest(string_to_array(substr($1, length('edges:') + 1), ',')) edge
WHERE $1 LIKE 'edges:%' AND edge <> ''

-- txcache.ddl_line(kind text, schema text, name text, oid oid) RETURNS text: one line of a
-- notice, its four fields tab-separated; a missing schema or name is empty, a missing oid 0.

SELECT $1 || E'\t' || txcache.ddl_escape(coalesce($2, '')) || E'\t'
       || txcache.ddl_escape(coalesce($3, '')) || E'\t' || coalesce($4, 0)::oid::text

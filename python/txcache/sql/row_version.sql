-- txcache.row_version(versions boolean, xmin xid) RETURNS text: what
-- txcache.schema_fingerprint() appends to a catalog row's text: ':' and the row's xmin with
-- versions, else nothing (the digest of content alone).

SELECT CASE WHEN versions THEN ':' || xmin::text ELSE '' END

-- txcache.identity_problems(oid[], name) RETURNS TABLE (rel oid, problem text, keyed boolean):
-- for each table of $1, why REPLICA IDENTITY FULL would make PostgreSQL refuse its UPDATE
-- and DELETE (NULL when it would not), and whether it has a primary key, with which
-- REPLICA IDENTITY DEFAULT keeps them working. PostgreSQL refuses them under FULL when a
-- publication of the table's updates or deletes lists its columns (15+), or does not publish
-- a stored generated column it has (18+: publish_generated_columns), and whenever it has a
-- virtual generated column (18+). It checks the partition a row is in, against the
-- publications of the partition and of its ancestors, never a partitioned table itself.
-- $2 names a publication taken to publish stored generated columns: the one txcache setup
-- is about to set so. Written for PostgreSQL 14 to 18 alike: columns that only some
-- versions have are read through to_jsonb.

WITH tables(rel) AS (
    SELECT DISTINCT c.oid FROM pg_class c WHERE c.oid = ANY ($1) AND c.relkind <> 'p'
), publications AS (
    SELECT p.oid, p.pubname,
           coalesce(to_jsonb(p) ->> 'pubgencols', 's') = 's'
               OR p.pubname IS NOT DISTINCT FROM $2 AS gencols
    FROM pg_publication p
    WHERE p.pubupdate OR p.pubdelete
), lineage(rel, ancestor) AS (
    SELECT rel, rel FROM tables
    UNION
    SELECT t.rel, a.ancestor FROM tables t, pg_partition_ancestors(t.rel) a(ancestor)
)
SELECT c.oid,
       CASE WHEN v.attname IS NOT NULL
                THEN format('virtual generated column %I', v.attname)
            WHEN s.attname IS NOT NULL
                THEN format('stored generated column %I, which publication %I does not '
                            'publish', s.attname, s.pubname)
            WHEN l.pubname IS NOT NULL
                THEN format('publication %I lists its columns', l.pubname)
       END,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_class c
LEFT JOIN tables t ON t.rel = c.oid
LEFT JOIN LATERAL (
    SELECT a.attname FROM pg_attribute a
    WHERE a.attrelid = t.rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = 'v'
    ORDER BY a.attnum LIMIT 1
) v ON true
LEFT JOIN LATERAL (
    SELECT a.attname, p.pubname FROM pg_attribute a, publications p
    WHERE a.attrelid = t.rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = 's'
      AND NOT p.gencols
      AND EXISTS (SELECT 1 FROM pg_get_publication_tables(p.pubname) g
                  JOIN lineage l ON l.ancestor = g.relid WHERE l.rel = t.rel)
    ORDER BY a.attnum, p.pubname LIMIT 1
) s ON true
LEFT JOIN LATERAL (
    SELECT p.pubname FROM publications p
    JOIN pg_publication_rel r ON r.prpubid = p.oid
    JOIN lineage l ON l.ancestor = r.prrelid AND l.rel = t.rel
    WHERE to_jsonb(r) ->> 'prattrs' IS NOT NULL
    ORDER BY 1 LIMIT 1
) l ON true
WHERE c.oid = ANY ($1)

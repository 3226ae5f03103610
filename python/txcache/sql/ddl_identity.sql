-- txcache.ddl_identity(rel oid, joined boolean, before text) RETURNS void: the replica
-- identity of a tracked table a DDL command touched, kept right for txcache without breaking
-- the application's writes or undoing its DDL (docs/setup.md, "Replica identity"). A table
-- that joined the tracked tables in the command ($2: created, or attached from an untracked
-- schema) with the default identity gets FULL, unless FULL would make PostgreSQL refuse its
-- UPDATE and DELETE (txcache.identity_problems); a FULL table the command made refused (a
-- generated column added) gets DEFAULT if it has a primary key. Nothing else is changed: a
-- WARNING says when the command left the table without FULL — its changes then invalidate
-- more coarsely — or without an identity under which it can be updated. $3 is the setting
-- recorded as the command started ('identities:' and comma-separated oid:relreplident of
-- the tracked tables not FULL), or anything else when none was: the identity did not change.

DECLARE
    tab text := $1::regclass::text;
    current "char" := (SELECT relreplident FROM pg_class WHERE oid = $1);
    words text := CASE current WHEN 'd' THEN 'DEFAULT' WHEN 'n' THEN 'NOTHING'
                               WHEN 'i' THEN 'USING INDEX' ELSE 'FULL' END;
    before "char" := current;
    problem text;
    keyed boolean;
    coarse text := 'Updates and deletes of its rows invalidate every cached result that read '
                   'the table wherever the stream does not carry the old values of its '
                   'indexed columns.';
BEGIN
    IF $3 LIKE 'identities:%' THEN
        before := coalesce((
            SELECT split_part(entry, ':', 2)
            FROM unnest(string_to_array(substr($3, length('identities:') + 1), ',')) entry
            WHERE split_part(entry, ':', 1) = $1::text), 'f');
    END IF;
    SELECT p.problem, p.keyed INTO problem, keyed
    FROM txcache.identity_problems(ARRAY[$1], NULL) p;
    IF problem IS NULL THEN
        IF $2 AND current = 'd' THEN
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', tab);
        ELSIF current <> 'f' AND ($2 OR before = 'f') THEN
            RAISE WARNING 'txcache: table % has REPLICA IDENTITY %, not FULL', tab, words
                USING DETAIL = coarse,
                      HINT = format('ALTER TABLE %s REPLICA IDENTITY FULL restores fine '
                                    'invalidation.', tab);
        END IF;
    ELSIF current = 'f' AND before <> 'f' THEN
        RAISE WARNING 'txcache: UPDATE and DELETE on table % fail under REPLICA IDENTITY FULL',
                tab
            USING DETAIL = format('PostgreSQL refuses them: %s.', problem),
                  HINT = 'REPLICA IDENTITY DEFAULT keeps them working (txcache then '
                         'invalidates the table''s changes more coarsely).';
    ELSIF current = 'f' AND keyed THEN
        EXECUTE format('ALTER TABLE %s REPLICA IDENTITY DEFAULT', tab);
        RAISE WARNING 'txcache: set REPLICA IDENTITY DEFAULT on table %', tab
            USING DETAIL = format('Under REPLICA IDENTITY FULL PostgreSQL would refuse its '
                                  'UPDATE and DELETE: %s. %s', problem, coarse);
    ELSIF current = 'i' OR (current = 'd' AND keyed) THEN
        IF $2 OR before <> current THEN
            RAISE WARNING 'txcache: table % has REPLICA IDENTITY %, not FULL', tab, words
                USING DETAIL = format('FULL would make PostgreSQL refuse its UPDATE and '
                                      'DELETE: %s. %s', problem, coarse);
        END IF;
    ELSE
        RAISE WARNING 'txcache: UPDATE and DELETE on table % fail', tab
            USING DETAIL = format('It has REPLICA IDENTITY %s and no primary key, and '
                                  'PostgreSQL refuses REPLICA IDENTITY FULL: %s.', words,
                                  problem),
                  HINT = 'Add a primary key (REPLICA IDENTITY DEFAULT), or a unique index '
                         'on NOT NULL columns and use REPLICA IDENTITY USING INDEX.';
    END IF;
END

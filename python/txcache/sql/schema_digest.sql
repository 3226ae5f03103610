-- txcache.schema_digest() RETURNS text: a digest of everything in the database's own schemas
-- a cached result can depend on — schemas, relations (not indexes) and their columns,
-- defaults, rules (view definitions), inheritance, row security policies, functions, types,
-- enum labels, constraints, operators, casts, extensions, foreign tables — and nothing
-- VACUUM, ANALYZE or a rewrite changes (no statistics, file nodes or frozen ids). Each row
-- is hashed on its own and the hashes combined by XOR: no sort. At ddl_command_end
-- txcache.ddl_notice() writes it as a '{schema_prefix}' message; the agent compares it with
-- the catalog a pin shows, and a difference no such message explains is a schema change
-- no trigger saw (docs/agent.md, "Schema changes the triggers miss").

WITH spaces AS (
    SELECT oid FROM pg_namespace
    WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'txcache')
      AND nspname NOT LIKE 'pg\_toast%' AND nspname NOT LIKE 'pg\_temp\_%'
), relations AS (
    SELECT c.* FROM pg_class c
    WHERE c.relnamespace IN (SELECT oid FROM spaces) AND c.relpersistence <> 't'
      AND c.relkind NOT IN ('i', 'I')
)
SELECT to_hex(
    coalesce((SELECT bit_xor(hashtextextended(n::text, 0)) FROM pg_namespace n
              WHERE n.oid IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s:%s:%s:%s:%s:%s:%s',
                                 oid, relname, relnamespace, relkind, reltype, relowner,
                                 relacl, reloptions, relrowsecurity, relforcerowsecurity,
                                 relispartition, relpartbound), 1))
              FROM relations), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s.%s:%s:%s:%s:%s:%s:%s:%s:%s:%s',
                                 attrelid, attnum, attname, atttypid, atttypmod, attcollation,
                                 attisdropped, attgenerated, attnotnull, attacl,
                                 attmissingval), 2))
              FROM pg_attribute
              WHERE attrelid IN (SELECT oid FROM relations) AND attnum > 0), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s.%s:%s', adrelid, adnum, adbin), 3))
              FROM pg_attrdef WHERE adrelid IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s:%s', ev_class,
                                 rulename, ev_type, ev_enabled, is_instead, ev_action,
                                 ev_qual), 4))
              FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(i::text, 5)) FROM pg_inherits i
              WHERE i.inhrelid IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(p::text, 6)) FROM pg_policy p
              WHERE p.polrelid IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', p.oid, p::text), 7))
              FROM pg_proc p WHERE p.pronamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s:%s:%s', oid, typname,
                                 typnamespace, typtype, typbasetype, typtypmod, typnotnull,
                                 typdefaultbin), 8))
              FROM pg_type WHERE typnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(e::text, 9)) FROM pg_enum e
              WHERE e.enumtypid IN (SELECT oid FROM pg_type
                                    WHERE typnamespace IN (SELECT oid FROM spaces))), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s', oid, conname,
                                 contype, conrelid, contypid, conbin), 10))
              FROM pg_constraint WHERE connamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', o.oid, o::text), 11))
              FROM pg_operator o WHERE o.oprnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', c.oid, c::text), 12))
              FROM pg_cast c WHERE c.oid >= 16384), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text), 13))
              FROM pg_extension x), 0)
    # coalesce((SELECT bit_xor(hashtextextended(f::text, 14)) FROM pg_foreign_table f), 0))

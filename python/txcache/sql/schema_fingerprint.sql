-- txcache.schema_fingerprint(versions boolean) RETURNS text: a digest of everything in the
-- database's own schemas a cached result can depend on — schemas, relations (not indexes)
-- and their columns, defaults, rules (view definitions), inheritance, row security
-- policies, functions, types, enum labels, constraints, operators, casts, extensions,
-- foreign tables, text search configurations and dictionaries, collations, operator classes
-- and families, aggregates, ranges, foreign data wrappers and servers, languages,
-- transforms, security labels (not user mappings: no role but a superuser may read them, and
-- a query of a foreign table is not cached) — and what decides the invalidations of its
-- tables: the columns their indexes lead with (the tag columns) and the publications. Not
-- sequences: reading one is not cached, and RESTART gives it a new file node. Each row is
-- hashed on its own and the hashes combined by XOR: no sort.
--
-- Without versions it is the catalog's content, which VACUUM, ANALYZE and rewrites leave
-- alone (no statistics, file nodes or frozen ids): txcache.schema_digest(), which the DDL
-- trigger writes as a '{schema_prefix}' message at the end of every DDL command.
--
-- With versions each row's xmin is hashed too: a committed change to these rows that
-- persists (an UPDATE writes a new row version) alters it for good, even one a later change
-- undoes, and so does anything that rewrites a relation (a new file node is a new pg_class
-- row). VACUUM's and ANALYZE's in-place updates keep xmin. What it cannot show: rows
-- inserted and deleted again between two readings (an object created and dropped). Without event triggers the agent
-- computes it at every pin (docs/agent.md, "Without event triggers"): two pins with equal
-- fingerprints saw no schema change between them.

WITH spaces AS (
    SELECT oid FROM pg_namespace
    WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'txcache')
      AND nspname NOT LIKE 'pg\_toast%' AND nspname NOT LIKE 'pg\_temp\_%'
), relations AS (
    SELECT c.*, c.xmin AS row_version FROM pg_class c
    WHERE c.relnamespace IN (SELECT oid FROM spaces) AND c.relpersistence <> 't'
      AND c.relkind NOT IN ('i', 'I', 'S')
)
SELECT to_hex(
    coalesce((SELECT bit_xor(hashtextextended(n::text || txcache.row_version(versions, n.xmin), 0)) FROM pg_namespace n
              WHERE n.oid IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s:%s:%s:%s:%s:%s:%s',
                                 oid, relname, relnamespace, relkind, reltype, relowner,
                                 relacl, reloptions, relrowsecurity, relforcerowsecurity,
                                 relispartition, relpartbound) || txcache.row_version(versions, row_version), 1))
              FROM relations), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s.%s:%s:%s:%s:%s:%s:%s:%s:%s:%s',
                                 attrelid, attnum, attname, atttypid, atttypmod, attcollation,
                                 attisdropped, attgenerated, attnotnull, attacl,
                                 attmissingval) || txcache.row_version(versions, pg_attribute.xmin), 2))
              FROM pg_attribute
              WHERE attrelid IN (SELECT oid FROM relations) AND attnum > 0), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s.%s:%s', adrelid, adnum, adbin) || txcache.row_version(versions, pg_attrdef.xmin), 3))
              FROM pg_attrdef WHERE adrelid IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s:%s', ev_class,
                                 rulename, ev_type, ev_enabled, is_instead, ev_action,
                                 ev_qual) || txcache.row_version(versions, pg_rewrite.xmin), 4))
              FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(i::text || txcache.row_version(versions, i.xmin), 5)) FROM pg_inherits i
              WHERE i.inhrelid IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(p::text || txcache.row_version(versions, p.xmin), 6)) FROM pg_policy p
              WHERE p.polrelid IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', p.oid, p::text) || txcache.row_version(versions, p.xmin), 7))
              FROM pg_proc p WHERE p.pronamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s:%s:%s', oid, typname,
                                 typnamespace, typtype, typbasetype, typtypmod, typnotnull,
                                 typdefaultbin) || txcache.row_version(versions, pg_type.xmin), 8))
              FROM pg_type WHERE typnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(e::text || txcache.row_version(versions, e.xmin), 9)) FROM pg_enum e
              WHERE e.enumtypid IN (SELECT oid FROM pg_type
                                    WHERE typnamespace IN (SELECT oid FROM spaces))), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s:%s:%s', oid, conname,
                                 contype, conrelid, contypid, conbin) || txcache.row_version(versions, pg_constraint.xmin), 10))
              FROM pg_constraint WHERE connamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', o.oid, o::text) || txcache.row_version(versions, o.xmin), 11))
              FROM pg_operator o WHERE o.oprnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', c.oid, c::text) || txcache.row_version(versions, c.xmin), 12))
              FROM pg_cast c WHERE c.oid >= 16384), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 13))
              FROM pg_extension x), 0)
    # coalesce((SELECT bit_xor(hashtextextended(f::text || txcache.row_version(versions, f.xmin), 14)) FROM pg_foreign_table f), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s:%s:%s', indexrelid, indrelid, indkey, indpred)
                                 || txcache.row_version(versions, pg_index.xmin), 15))
              FROM pg_index WHERE indrelid IN (SELECT oid FROM relations)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', p.oid, p::text) || txcache.row_version(versions, p.xmin), 16))
              FROM pg_publication p), 0)
    # coalesce((SELECT bit_xor(hashtextextended(r::text || txcache.row_version(versions, r.xmin), 17))
              FROM pg_publication_rel r), 0)
    # coalesce((SELECT bit_xor(hashtextextended(pn::text || txcache.row_version(versions, pn.xmin), 18))
              FROM pg_publication_namespace pn), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 19))
              FROM pg_ts_config x WHERE x.cfgnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(m::text || txcache.row_version(versions, m.xmin), 20))
              FROM pg_ts_config_map m WHERE m.mapcfg IN (SELECT oid FROM pg_ts_config
                                                         WHERE cfgnamespace IN (SELECT oid FROM spaces))), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 21))
              FROM pg_ts_dict x WHERE x.dictnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 22))
              FROM pg_collation x WHERE x.collnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 23))
              FROM pg_opfamily x WHERE x.opfnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 24))
              FROM pg_opclass x WHERE x.opcnamespace IN (SELECT oid FROM spaces)), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 25))
              FROM pg_amop x WHERE x.oid >= 16384), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 26))
              FROM pg_amproc x WHERE x.oid >= 16384), 0)
    # coalesce((SELECT bit_xor(hashtextextended(a::text || txcache.row_version(versions, a.xmin), 27))
              FROM pg_aggregate a WHERE a.aggfnoid >= 16384), 0)
    # coalesce((SELECT bit_xor(hashtextextended(r::text || txcache.row_version(versions, r.xmin), 28))
              FROM pg_range r WHERE r.rngtypid >= 16384), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 29))
              FROM pg_foreign_data_wrapper x), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 30))
              FROM pg_foreign_server x), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 32))
              FROM pg_language x WHERE x.oid >= 16384), 0)
    # coalesce((SELECT bit_xor(hashtextextended(format('%s:%s', x.oid, x::text) || txcache.row_version(versions, x.xmin), 33))
              FROM pg_transform x), 0)
    # coalesce((SELECT bit_xor(hashtextextended(s::text || txcache.row_version(versions, s.xmin), 34))
              FROM pg_seclabel s), 0))

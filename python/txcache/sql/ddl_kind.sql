-- txcache.ddl_kind(object_type text, command_tag text) RETURNS text: what a DDL on an object
-- that is not a relation or an index means for cached results (docs/setup.md, "DDL
-- messages"). `none` for objects and commands no read result depends on: sequences,
-- triggers, statistics, constraints, defaults; comments (only catalog reads, which are never
-- cached, see them); ALTER DEFAULT PRIVILEGES (it changes only the privileges objects
-- created later start with, and creating one is a DDL of its own). `all` (every cached
-- result) for the rest — functions, types, policies, publications, schemas, rules,
-- extensions, … — whose dependents cannot be told from the catalog alone, and for GRANT,
-- REVOKE and SECURITY LABEL: results are cached per role, a privilege or a label decides
-- what a role may read, and the event trigger is not told which objects changed (no object
-- id: a GRANT on a schema, a function or ALL TABLES IN SCHEMA reaches any number of them).

SELECT CASE
    WHEN $1 IN ('table', 'view', 'materialized view', 'foreign table') THEN 'table'
    WHEN $1 = 'index' THEN 'index'
    WHEN $2 IN ('GRANT', 'REVOKE', 'SECURITY LABEL') THEN 'all'
    WHEN $1 IN ('sequence', 'trigger', 'statistics object', 'event trigger',
                'table constraint', 'domain constraint', 'default value')
         OR $2 IN ('COMMENT', 'ALTER DEFAULT PRIVILEGES') THEN 'none'
    ELSE 'all'
END

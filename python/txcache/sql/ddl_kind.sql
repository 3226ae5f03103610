-- txcache.ddl_kind(object_type text, command_tag text) RETURNS text: what a DDL on an object
-- that is not a relation or an index means for cached results. `none` for objects and
-- commands no read result depends on (privileges and comments included: results are not
-- cached per role); `all` (every cached result) for the rest — functions, types, policies,
-- publications, schemas, rules, extensions, … — whose dependents cannot be told from the
-- catalog alone.

SELECT CASE
    WHEN $1 IN ('table', 'view', 'materialized view', 'foreign table') THEN 'table'
    WHEN $1 = 'index' THEN 'index'
    WHEN $1 IN ('sequence', 'trigger', 'statistics object', 'event trigger',
                'table constraint', 'domain constraint', 'default value')
         OR $2 IN ('GRANT', 'REVOKE', 'COMMENT', 'SECURITY LABEL',
                   'ALTER DEFAULT PRIVILEGES') THEN 'none'
    ELSE 'all'
END

-- txcache.ddl_count() RETURNS bigint: advances the DDL counter by one and writes its exact
-- value to the WAL. nextval alone logs a value up to 32 ahead (PostgreSQL pre-logs sequence
-- values), which is what a hot standby would show; setval logs the value itself, so a
-- standby that replayed it shows the count the primary has, and a library can check there
-- that a query ran with the catalog it analysed it with (docs/library.md, "Misses on
-- standbys"). SECURITY DEFINER: every role's DDL advances the counter, but no role may set
-- it (setting it back would make a changed catalog look unchanged).

SELECT setval('{counter}', nextval('{counter}'))

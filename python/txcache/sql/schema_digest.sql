-- txcache.schema_digest() RETURNS text: the catalog's content, as
-- txcache.schema_fingerprint(false) digests it. At ddl_command_end txcache.ddl_notice() writes
-- it as a '{schema_prefix}' message; the agent compares it with the catalog a pin shows, and
-- a difference no such message explains is a schema change no trigger saw (docs/agent.md,
-- "Schema changes the triggers miss").

SELECT txcache.schema_fingerprint(false)

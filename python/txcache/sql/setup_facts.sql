-- The server's settings and the role's privileges every step of txcache setup plans from:
-- one row, read once.

SELECT current_setting('server_version_num')::int AS server_version_num,
       current_setting('server_version') AS server_version,
       current_setting('wal_level') AS wal_level,
       current_setting('max_replication_slots')::int AS max_replication_slots,
       current_setting('max_wal_senders')::int AS max_wal_senders,
       coalesce(current_setting('max_slot_wal_keep_size', true), '-1')
           AS max_slot_wal_keep_size,
       (SELECT count(*) FROM pg_replication_slots) AS slots_used,
       r.rolname, r.rolsuper, r.rolreplication, current_database() AS database,
       has_database_privilege(current_database(), 'CREATE') AS can_create
FROM pg_roles r WHERE r.rolname = current_user

-- txcache.prepare_partitions(oid) RETURNS void: gives every partition in the partition tree
-- of $1 the TRUNCATE trigger where it lacks it (a partition created or attached later, from
-- any schema). Its own DDL notifies nothing: the event trigger would prepare the same tree
-- meanwhile. Replica identities are txcache.ddl_identity's.

DECLARE
    part regclass;
    notifying text := coalesce(current_setting('txcache.in_ddl_notice', true), 'off');
BEGIN
    PERFORM set_config('txcache.in_ddl_notice', 'on', true);
    FOR part IN
        SELECT p.relid::regclass
        FROM pg_partition_tree(pg_partition_root($1)) p
        JOIN pg_class c ON c.oid = p.relid
        WHERE c.relispartition AND c.relkind IN ('r', 'p')
          AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = p.relid
                          AND g.tgname = '{truncate_trigger}')
    LOOP
        EXECUTE format('CREATE TRIGGER {truncate_trigger} AFTER TRUNCATE ON %s '
                       'FOR EACH STATEMENT EXECUTE FUNCTION txcache.truncate_notice()', part);
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER {truncate_trigger}', part);
    END LOOP;
    PERFORM set_config('txcache.in_ddl_notice', notifying, true);
END

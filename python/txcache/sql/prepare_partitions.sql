-- txcache.prepare_partitions(oid) RETURNS void: prepares every partition in the partition
-- tree of $1: the TRUNCATE trigger where it lacks it, and REPLICA IDENTITY FULL (a table
-- attached from an untracked schema has neither). Its own DDL notifies nothing: the event
-- trigger would prepare the same tree meanwhile.

DECLARE
    part record;
    notifying text := coalesce(current_setting('txcache.in_ddl_notice', true), 'off');
BEGIN
    PERFORM set_config('txcache.in_ddl_notice', 'on', true);
    FOR part IN
        SELECT p.relid::regclass AS name, c.relreplident <> 'f' AS needs_identity,
               NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = p.relid
                           AND g.tgname = '{truncate_trigger}') AS needs_trigger
        FROM pg_partition_tree(pg_partition_root($1)) p
        JOIN pg_class c ON c.oid = p.relid
        WHERE c.relispartition AND c.relkind IN ('r', 'p')
    LOOP
        IF part.needs_identity THEN
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', part.name);
        END IF;
        IF part.needs_trigger THEN
            EXECUTE format('CREATE TRIGGER {truncate_trigger} AFTER TRUNCATE ON %s '
                           'FOR EACH STATEMENT EXECUTE FUNCTION txcache.truncate_notice()',
                           part.name);
            EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER {truncate_trigger}',
                           part.name);
        END IF;
    END LOOP;
    PERFORM set_config('txcache.in_ddl_notice', notifying, true);
END

-- txcache.standby_snapshot(OUT replay_lsn pg_lsn, OUT snapshot text, OUT snapshot_id text):
-- on a hot standby, a snapshot that is exactly a commit point of the primary's history, for
-- the agent to pin (docs/agent.md, "Pins on standbys"). A standby makes commits visible in
-- replay order, so a snapshot taken while replay is paused at R sees exactly the commits
-- whose commit record starts below R. Replay is paused only while the snapshot is taken
-- and exported (a millisecond or so); the caller keeps its READ COMMITTED transaction open
-- for the snapshot to stay importable. One statement, so that a caller that goes away
-- cannot leave replay paused; no EXCEPTION block, because PostgreSQL exports no snapshot
-- from a subtransaction.
--
-- Replay paused by someone else (an operator, pg_wal_replay_pause()) stays paused: the
-- snapshot is taken where it stands, and only a pause of this call's own is resumed.
--
-- Runs as its caller, who needs EXECUTE on pg_wal_replay_pause(), pg_wal_replay_resume()
-- and pg_get_wal_replay_pause_state() (granted by a superuser).

DECLARE
    deadline timestamptz := clock_timestamp() + interval '5 seconds';
    paused_here boolean;
BEGIN
    IF NOT pg_is_in_recovery() THEN
        RAISE EXCEPTION 'txcache.standby_snapshot: this server is not a standby'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'It was promoted, or the name points at the primary.';
    END IF;
    paused_here := pg_get_wal_replay_pause_state() = 'not paused';
    IF paused_here THEN
        PERFORM pg_wal_replay_pause();
    END IF;
    WHILE pg_get_wal_replay_pause_state() <> 'paused' LOOP
        IF clock_timestamp() > deadline THEN
            IF paused_here THEN
                PERFORM pg_wal_replay_resume();
            END IF;
            RAISE EXCEPTION 'txcache.standby_snapshot: replay did not pause within 5 s'
                USING ERRCODE = 'lock_not_available';
        END IF;
        PERFORM pg_sleep(0.0002);
    END LOOP;
    -- A statement of its own: its snapshot is taken now, with replay paused at the position
    -- it reads.
    SELECT pg_last_wal_replay_lsn(), pg_current_snapshot()::text, pg_export_snapshot()
    INTO replay_lsn, snapshot, snapshot_id;
    IF paused_here THEN
        PERFORM pg_wal_replay_resume();
    END IF;
END

//! What the agent asks PostgreSQL about the database itself, in plain SQL sessions beside
//! the replication session: which database it follows ([`identity`]), where its WAL is and
//! which history it writes ([`position`], [`history`]), whether schema changes reach it
//! (the DDL triggers, or the catalog fingerprint: [`require_ddl_tracking`]), the slot
//! ([`slot_state`], [`find_slot`], [`recreate_slot`], [`create_slot`], [`advance_slot`],
//! [`drop_idle_slot`], [`newest_replayed_message_commit`]), a standby the stream is decoded
//! on ([`require_decoding_server`], [`standby_slot`]), transaction ids and snapshots ([`floor_xid`], [`wait_until_visible`]). The stream, the
//! fan-out and start-up call these; what to do with the answers is theirs.
//!
//! Which database: the one `--dsn` names, in the cluster it runs on. A replication slot
//! decodes one database, so only that database's cached results are ever invalidated.
//! Libraries compare their own database with this (`DATABASE`) and do not cache when they
//! differ: another database on the same server (a test database beside the development one)
//! would otherwise read values nothing invalidates.

use crate::certify::Snapshot;
use crate::config::{DdlTracking, PrimarySlot};
use crate::connect::{ReplicationHost, SqlSession};
use anyhow::{bail, Context as _};
use pgwire_replication::{Lsn, ReplicationClient};
use std::time::{Duration, Instant};
use txcache_model::Timestamp;

/// How often a wait for a DDL's visibility is logged.
const VISIBILITY_WARNING: Duration = Duration::from_secs(5);

/// The commit LSN of the newest transaction with a logical message of prefix `$4` among the
/// changes slot `$1` holds before `$2`: pgoutput's COMMIT carries it in bytes 2–9.
const REPLAYED_MESSAGE_QUERY: &str = "
    WITH changes AS (
        SELECT xid, data FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL,
            'proto_version', '1', 'publication_names', $3, 'messages', 'true'))
    SELECT max(('x' || encode(substring(data FROM 3 FOR 8), 'hex'))::bit(64)::bigint)
    FROM changes
    WHERE get_byte(data, 0) = ascii('C') AND xid IN (
        SELECT xid FROM changes WHERE get_byte(data, 0) = ascii('M')
          AND position(convert_to($4, 'UTF8') || '\\x00'::bytea IN data) > 0)";

/// The cluster and the database, as PostgreSQL names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseIdentity {
    /// `pg_control_system().system_identifier`: another cluster (a restored dump, another
    /// server) has another.
    pub system_identifier: String,
    /// The database's oid in `pg_database`.
    pub oid: u32,
    /// The database's name, for messages.
    pub name: String,
}

impl DatabaseIdentity {
    /// How cache nodes name the database whose stream they follow (`TXDATABASE`):
    /// `system_identifier/oid`, as every library names its own.
    pub fn stream_name(&self) -> String {
        format!("{}/{}", self.system_identifier, self.oid)
    }
}

/// The identity of the database `sql` is connected to.
pub async fn identity(sql: &SqlSession) -> anyhow::Result<DatabaseIdentity> {
    let row = sql
        .client
        .query_one(
            "SELECT s.system_identifier::text, d.oid::int8, d.datname::text \
             FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d \
             WHERE d.datname = pg_catalog.current_database()",
            &[],
        )
        .await
        .context("cannot read the database's identity (pg_control_system())")?;
    let oid: i64 = row.get(1);
    Ok(DatabaseIdentity {
        system_identifier: row.get(0),
        oid: u32::try_from(oid).context("a database oid out of range")?,
        name: row.get(2),
    })
}

/// Where the slot stands.
#[derive(Debug)]
pub struct SlotState {
    /// `confirmed_flush_lsn`: the stream resumes here.
    pub confirmed: Timestamp,
    /// It decodes nothing again: WAL it needed is gone (`wal_status` lost), or PostgreSQL
    /// invalidated it (on a standby: rows its decoding needed were removed on the primary).
    pub lost: bool,
    /// A failover slot (PostgreSQL 17 and later): standbys synchronizing slots copy it.
    pub failover: bool,
}

/// Reads the slot's state, with a clear error when it does not exist.
pub async fn slot_state(sql: &SqlSession, slot: &str) -> anyhow::Result<SlotState> {
    match find_slot(sql, slot).await? {
        Some(state) => Ok(state),
        None => {
            bail!("replication slot {slot:?} does not exist: run `txcache setup --dsn …` first")
        }
    }
}

/// Reads the slot's state; `None` when it does not exist. On a standby, a slot it
/// synchronizes from the primary (a failover slot of the same name) is an error: it cannot be
/// decoded from until the standby is promoted, or goes once the primary's is dropped.
pub async fn find_slot(sql: &SqlSession, slot: &str) -> anyhow::Result<Option<SlotState>> {
    // A slot PostgreSQL invalidated (WAL removed, or on a standby rows its decoding needed
    // removed on the primary) decodes nothing again: lost, as a slot whose WAL is gone.
    let invalidated = match sql.server_version_num {
        170_000.. => "invalidation_reason IS NOT NULL",
        160_000.. => "coalesce(conflicting, false)",
        _ => "false",
    };
    let synced = synced_copy(sql);
    let failover = if sql.server_version_num >= 170_000 {
        "failover"
    } else {
        "false"
    };
    let query = format!(
        "SELECT confirmed_flush_lsn::text, coalesce(wal_status, '') = 'lost' OR {invalidated},
                plugin::text, {synced}, {failover}
         FROM pg_replication_slots WHERE slot_name = $1"
    );
    let Some(row) = sql.client.query_opt(&query, &[&slot]).await? else {
        return Ok(None);
    };
    let plugin: Option<String> = row.get(2);
    if plugin.as_deref() != Some("pgoutput") {
        bail!("replication slot {slot:?} uses plugin {plugin:?}, not pgoutput");
    }
    if row.get::<_, bool>(3) {
        bail!(
            "replication slot {slot:?} on this standby is a copy it synchronizes from the \
             primary's slot of that name, which cannot be decoded from before the standby is \
             promoted (decoding on a standby, --decode-from: before it drops the copy, the \
             primary's slot being dropped)"
        );
    }
    let confirmed: Option<String> = row.get(0);
    let confirmed = confirmed.map_or(Ok(Lsn::from_u64(0)), |text| Lsn::parse(&text))?;
    Ok(Some(SlotState {
        confirmed: Timestamp(confirmed.as_u64()),
        lost: row.get(1),
        failover: row.get(4),
    }))
}

/// A slot a standby synchronizes from its primary (PostgreSQL 17 and later), as SQL over
/// `pg_replication_slots`. A promoted standby keeps `synced` on the copies it took, which it
/// may decode now.
const SYNCED_COPY: &str = "synced AND pg_is_in_recovery()";

/// [`SYNCED_COPY`] on `sql`'s server: no slot is a synchronized copy before PostgreSQL 17.
fn synced_copy(sql: &SqlSession) -> &'static str {
    if sql.server_version_num >= 170_000 {
        SYNCED_COPY
    } else {
        "false"
    }
}

/// Drops slot `slot` if it exists; whether it existed.
async fn drop_slot(sql: &SqlSession, slot: &str) -> anyhow::Result<bool> {
    drop_slot_where(sql, slot, "true").await
}

/// Drops slot `slot` if it exists and meets `condition` (SQL over `pg_replication_slots`);
/// whether it was dropped.
async fn drop_slot_where(sql: &SqlSession, slot: &str, condition: &str) -> anyhow::Result<bool> {
    let query = format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
         WHERE slot_name = $1 AND ({condition})"
    );
    let dropped = sql
        .client
        .execute(&query, &[&slot])
        .await
        .with_context(|| format!("cannot drop replication slot {slot:?}"))?;
    Ok(dropped > 0)
}

/// Drops the primary's slot `slot` while the stream is decoded on a standby; whether one was
/// dropped. With [`PrimarySlot::Drop`] any goes: nothing consumes it, and it would keep the
/// primary's WAL. With [`PrimarySlot::Spare`] the agent tends a spare there: only a failover
/// slot goes (`txcache setup`'s, PostgreSQL 17 and later), whose copies standbys
/// synchronizing slots would hold under the name their own slots need.
async fn drop_primary_slot(
    primary: &SqlSession,
    slot: &str,
    policy: PrimarySlot,
) -> anyhow::Result<bool> {
    let dropped = match policy {
        PrimarySlot::Drop => drop_slot(primary, slot).await?,
        PrimarySlot::Spare if primary.server_version_num < 170_000 => false,
        PrimarySlot::Spare => drop_slot_where(primary, slot, "failover").await?,
    };
    if dropped {
        match policy {
            PrimarySlot::Drop => tracing::warn!(slot, "dropped the primary's replication slot of this name: the stream is decoded on a standby (--decode-from), and nothing would consume it"),
            PrimarySlot::Spare => tracing::warn!(slot, "dropped the primary's failover slot of this name: standbys synchronizing slots would copy it over their own; the agent keeps a plain spare there instead (--decode-primary-slot spare)"),
        }
    }
    Ok(dropped)
}

/// Moves slot `slot` on to `position` if it stands below and is idle (on a standby, no
/// further than its replay; PostgreSQL decodes the WAL in between, sending nothing): a
/// spare slot following the stream's.
pub async fn advance_slot(sql: &SqlSession, slot: &str, position: Timestamp) -> anyhow::Result<()> {
    let position = Lsn::from_u64(position.0).to_string();
    sql.client
        .execute(
            "SELECT pg_replication_slot_advance(slot_name, $2::text::pg_lsn)
             FROM pg_replication_slots
             WHERE slot_name = $1 AND NOT active AND confirmed_flush_lsn < $2::text::pg_lsn",
            &[&slot, &position],
        )
        .await
        .with_context(|| format!("cannot advance replication slot {slot:?}"))?;
    Ok(())
}

/// Drops slot `slot` if it exists and no session streams from it (a synchronized copy, which
/// a standby does not let go, is left); whether it was dropped.
pub async fn drop_idle_slot(sql: &SqlSession, slot: &str) -> anyhow::Result<bool> {
    let query = format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
         WHERE slot_name = $1 AND NOT active AND NOT ({})",
        synced_copy(sql)
    );
    let dropped = sql
        .client
        .execute(&query, &[&slot])
        .await
        .with_context(|| format!("cannot drop replication slot {slot:?}"))?;
    Ok(dropped > 0)
}

/// The slot on the standby the stream is decoded on (`decoding`, `--decode-from`), created
/// there if it does not exist or was lost, after dropping the primary's slot of that name
/// as `policy` says ([`drop_primary_slot`]) and waiting for the standby to drop its
/// synchronized copy of it. A new slot starts past changes no node received, so every node
/// behind it is reset as it connects. A `decoding` server out of recovery is the primary (a
/// standby promoted): its slot is the stream's, kept as it is.
pub async fn standby_slot(
    primary: &SqlSession,
    decoding: &SqlSession,
    slot: &str,
    policy: PrimarySlot,
) -> anyhow::Result<SlotState> {
    if !in_recovery(decoding).await? {
        tracing::warn!(slot, "the --decode-from server is not a standby (promoted, or the primary named among its hosts): the stream is decoded on it as the primary");
        return match find_slot(decoding, slot).await? {
            Some(state) if !state.lost => Ok(state),
            _ => {
                tracing::error!(slot, "no usable replication slot on the --decode-from server: creating it; every cache node is reset");
                let confirmed = recreate_slot(decoding, slot, Some(primary), policy).await?;
                Ok(SlotState {
                    confirmed,
                    lost: false,
                    failover: false,
                })
            }
        };
    }
    drop_primary_slot(primary, slot, policy).await?;
    wait_for_synced_copy_to_go(decoding, slot).await?;
    match find_slot(decoding, slot).await? {
        Some(state) if !state.lost => return Ok(state),
        Some(_) => {
            tracing::error!(slot, "REPLICATION SLOT LOST on the decoding standby (WAL it needed removed, or rows its decoding needed removed on the primary: is hot_standby_feedback on?). Creating it again; every cache node is reset.");
        }
        None => tracing::info!(
            slot,
            "creating the replication slot on the decoding standby"
        ),
    }
    let confirmed = recreate_slot(decoding, slot, Some(primary), policy).await?;
    Ok(SlotState {
        confirmed,
        lost: false,
        failover: false,
    })
}

/// How long a standby may take to drop its synchronized copy of a slot the primary dropped
/// (its slot synchronization worker naps up to 30 s).
const SYNCED_COPY_WAIT: Duration = Duration::from_secs(60);

/// Waits until the standby `sql` holds no synchronized copy of slot `slot` (PostgreSQL 17
/// and later), which cannot be decoded from and blocks the name.
async fn wait_for_synced_copy_to_go(sql: &SqlSession, slot: &str) -> anyhow::Result<()> {
    if sql.server_version_num < 170_000 {
        return Ok(());
    }
    let started = Instant::now();
    loop {
        let query =
            format!("SELECT FROM pg_replication_slots WHERE slot_name = $1 AND {SYNCED_COPY}");
        let copied = sql.client.query_opt(&query, &[&slot]).await?.is_some();
        if !copied {
            return Ok(());
        }
        if started.elapsed() > SYNCED_COPY_WAIT {
            bail!("the decoding standby still holds a synchronized copy of replication slot {slot:?} {SYNCED_COPY_WAIT:?} after the primary's was dropped: is its slot synchronization working? Drop the copy (`SELECT pg_drop_replication_slot('{slot}')` after turning sync_replication_slots off there)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether `sql`'s server is a standby (in recovery).
pub async fn in_recovery(sql: &SqlSession) -> anyhow::Result<bool> {
    Ok(sql
        .client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0))
}

/// Refuses a decoding server (`--decode-from`) that is not a server of the primary's
/// database (another cluster's WAL positions say nothing about the primary's commits), or a
/// standby that cannot decode (before PostgreSQL 16, or below `wal_level = logical`); warns
/// when its `hot_standby_feedback` is off, under which the primary's vacuum may remove
/// catalog rows the slot needs, and the standby then invalidates it.
pub async fn require_decoding_server(
    primary: &DatabaseIdentity,
    decoding: &SqlSession,
) -> anyhow::Result<()> {
    let found = identity(decoding).await?;
    if found.system_identifier != primary.system_identifier || found.name != primary.name {
        bail!(
            "--decode-from reaches database {:?} of cluster {}, but --dsn database {:?} of \
             cluster {}: the stream must be decoded on a standby of the primary (a streaming \
             replica, same system identifier)",
            found.name,
            found.system_identifier,
            primary.name,
            primary.system_identifier
        );
    }
    if !in_recovery(decoding).await? {
        return Ok(());
    }
    if decoding.server_version_num < 160_000 {
        bail!(
            "--decode-from names a standby of PostgreSQL {}: logical decoding on a standby \
             needs PostgreSQL 16 or later; decode on the primary (no --decode-from)",
            decoding.server_version_num / 10_000
        );
    }
    let row = decoding
        .client
        .query_one(
            "SELECT current_setting('wal_level'), current_setting('hot_standby_feedback')::bool",
            &[],
        )
        .await?;
    let wal_level: String = row.get(0);
    if wal_level != "logical" {
        bail!(
            "the --decode-from standby runs with wal_level = {wal_level}: logical decoding \
             needs wal_level = logical on the standby as on the primary (ALTER SYSTEM SET \
             wal_level = logical there, and restart it)"
        );
    }
    if !row.get::<_, bool>(1) {
        tracing::warn!("the --decode-from standby runs with hot_standby_feedback off: the primary's vacuum may remove catalog rows the slot still needs, and the standby then invalidates the slot (the agent creates it again and resets every cache node). Turn it on there, with a physical slot (primary_slot_name)");
    }
    Ok(())
}

/// The event triggers `txcache setup` installs, which send every schema change into the
/// stream (the names are setup's, `python/txcache/_setup.py`).
const DDL_TRIGGERS: [&str; 3] = [
    "txcache_ddl_command_start",
    "txcache_ddl_command_end",
    "txcache_sql_drop",
];

/// Refuses to start unless schema changes reach the caches as `tracking` says: through the
/// DDL event triggers, or through the catalog fingerprint every pin is checked with (it then
/// warns that the agent runs without the triggers). Otherwise a schema change (a view
/// redefined, a column added with a default) would never reach the caches, which would go
/// on serving results the database no longer gives: no caching beats wrong answers.
pub async fn require_ddl_tracking(sql: &SqlSession, tracking: DdlTracking) -> anyhow::Result<()> {
    match tracking {
        DdlTracking::Triggers => require_ddl_triggers(sql).await,
        DdlTracking::Fingerprint => require_schema_fingerprint(sql).await,
    }
}

/// Refuses to start unless every DDL event trigger is installed, calls
/// `txcache.ddl_notice()` and is enabled `ALWAYS`.
async fn require_ddl_triggers(sql: &SqlSession) -> anyhow::Result<()> {
    let rows = sql
        .client
        .query(
            "SELECT e.evtname::text FROM pg_event_trigger e
             WHERE e.evtname = ANY($1) AND e.evtenabled = 'A'
               AND e.evtfoid = to_regprocedure('txcache.ddl_notice()')",
            &[&DDL_TRIGGERS.to_vec()],
        )
        .await?;
    let working: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    let missing: Vec<&str> = DDL_TRIGGERS
        .into_iter()
        .filter(|name| !working.iter().any(|found| found == name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    bail!(
        "the DDL event trigger(s) {} are not installed or not enabled ALWAYS: schema changes \
         would not reach the caches, which would then serve results the database no longer \
         gives, so the agent does not start. Run `txcache setup` as a role that may create \
         event triggers (a superuser, or a managed service's administrator), `ALTER EVENT \
         TRIGGER … ENABLE ALWAYS` where one was disabled, or, where no event trigger can be \
         had, start the agent with --ddl-tracking fingerprint (every schema change then \
         invalidates every cached result; docs/agent.md, \"Without event triggers\")",
        missing.join(", ")
    )
}

/// Refuses to start without `txcache.schema_fingerprint(boolean)`, which every pin is
/// checked with when no DDL event trigger runs; warns that the agent runs so, since any
/// schema change then invalidates every cached result.
async fn require_schema_fingerprint(sql: &SqlSession) -> anyhow::Result<()> {
    let installed: bool = sql
        .client
        .query_one(
            "SELECT to_regprocedure('txcache.schema_fingerprint(boolean)') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    if !installed {
        bail!(
            "txcache.schema_fingerprint(boolean) does not exist: without DDL event triggers \
             (--ddl-tracking fingerprint) every pin's catalog fingerprint must be checked, so \
             the agent does not start. Run `txcache setup` again to install it"
        );
    }
    tracing::warn!(
        "the agent runs without DDL event triggers (--ddl-tracking fingerprint): every pin's \
         catalog fingerprint is checked, and any schema change invalidates every cached \
         result; see docs/agent.md, \"Without event triggers\""
    );
    Ok(())
}

/// The database's WAL position now: where the primary inserts, or where a standby has
/// replayed (what its snapshots and its decoding see).
pub async fn position(sql: &SqlSession) -> anyhow::Result<Timestamp> {
    let text: String = sql
        .client
        .query_one(
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
             ELSE pg_current_wal_insert_lsn() END)::text",
            &[],
        )
        .await?
        .get(0);
    Ok(Timestamp(Lsn::parse(&text)?.as_u64()))
}

/// The database history the stream follows: the cluster's system identifier and the timeline
/// WAL is written on now, as `system_identifier:timeline`. A failover or a restore to a new
/// timeline changes the timeline; another cluster changes the identifier.
///
/// On a standby, the timeline its WAL receiver streams; where the role may not see it
/// (`pg_read_all_stats`) or no receiver runs, the timeline replay follows, which `replication`
/// (the same server) is asked over a replication session: the last restartpoint's timeline,
/// all SQL shows without privileges, lags a timeline change by minutes. Without
/// `replication`, that restartpoint's timeline it is.
pub async fn history(
    sql: &SqlSession,
    replication: Option<ReplicationHost<'_>>,
) -> anyhow::Result<String> {
    let row = sql
        .query_one_prepared(
            "SELECT system_identifier::text, CASE WHEN NOT pg_is_in_recovery() THEN \
               pg_walfile_name(pg_current_wal_insert_lsn()) END, \
             (SELECT received_tli FROM pg_stat_wal_receiver), \
             (SELECT timeline_id FROM pg_control_checkpoint()) \
             FROM pg_control_system()",
            &[],
        )
        .await?;
    let system: String = row.get(0);
    let (segment, received, restartpoint): (Option<String>, Option<i32>, i32) =
        (row.get(1), row.get(2), row.get(3));
    let timeline = match (segment, received, replication) {
        // A WAL segment's name starts with its timeline, 8 hex digits.
        (Some(segment), _, _) => segment
            .get(..8)
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .with_context(|| format!("unexpected WAL segment name {segment:?}"))?,
        (None, Some(received), _) => received.unsigned_abs(),
        (None, None, Some(server)) => {
            let asking = async |client: &mut ReplicationClient| client.identify_system().await;
            let answer = server.ask("asking the standby's timeline", asking).await;
            answer.map_err(TimelineUnknown)?.timeline
        }
        (None, None, None) => restartpoint.unsigned_abs(),
    };
    Ok(format!("{system}:{timeline}"))
}

/// A standby's timeline could not be asked over a replication session (none free, the
/// replication connection refused or not answered): not known this time.
#[derive(Debug, thiserror::Error)]
#[error("cannot ask the standby's timeline over a replication session: {0:#}")]
pub struct TimelineUnknown(anyhow::Error);

/// A transaction id at least as new as every one running now: commits below the stream's
/// start position may not be visible until they have all finished (the certification floor,
/// `certify.rs`). A snapshot's in-progress list would not do: its `xmax` is one past the
/// latest *completed* xid, so transactions with newer xids run unlisted. A new xid is newer
/// than every one assigned before it (it costs one xid and an empty commit).
pub async fn floor_xid(sql: &SqlSession) -> anyhow::Result<u64> {
    let text: String = sql
        .client
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .await?
        .get(0);
    text.parse()
        .with_context(|| format!("unexpected transaction id {text:?}"))
}

/// The snapshot a new statement would take now.
async fn current_snapshot(sql: &SqlSession) -> anyhow::Result<Snapshot> {
    let text: String = sql
        .client
        .query_one("SELECT pg_current_snapshot()::text", &[])
        .await?
        .get(0);
    Ok(Snapshot::parse(&text)?)
}

/// Waits until the decoded commit of `xid` is visible to new snapshots. A commit record is
/// decoded before its transaction leaves the in-progress list (docs/agent.md, "Decisions"), so
/// a catalog read in between misses what a DDL changed. Visibility is permanent once reached.
pub async fn wait_until_visible(sql: &SqlSession, xid: u32) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut next_warning = VISIBILITY_WARNING;
    loop {
        let snapshot = current_snapshot(sql).await?;
        if snapshot.sees(snapshot.widen(xid)) {
            return Ok(());
        }
        if started.elapsed() >= next_warning {
            tracing::warn!(xid, waited = ?started.elapsed(),
                "a DDL transaction is decoded as committed but not yet visible (held in a synchronous-replication wait?): the stream waits for it, because the tag columns it brought cannot be read before");
            next_warning += VISIBILITY_WARNING;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Drops slot `slot` if it exists (it lost WAL it needed) and creates it anew, as `txcache
/// setup` does (marked failover from PostgreSQL 17): the position the new slot starts at.
/// With `primary`, `sql` is the standby the stream is decoded on (`--decode-from`): the
/// slot cannot be a failover one there, and its creation waits for a record of the
/// primary's running transactions, which `primary` logs every half second until it is
/// done, where PostgreSQL would every 15 s; the primary's slot of that name, which nothing
/// would consume, is dropped as `policy` says ([`drop_primary_slot`]).
pub async fn recreate_slot(
    sql: &SqlSession,
    slot: &str,
    primary: Option<&SqlSession>,
    policy: PrimarySlot,
) -> anyhow::Result<Timestamp> {
    if let Some(primary) = primary {
        // Left there when the stream was decoded on the primary (named among --decode-from's
        // hosts) before moving to this standby.
        if in_recovery(sql).await? {
            drop_primary_slot(primary, slot, policy).await?;
        }
    }
    drop_slot(sql, slot).await?;
    create_slot(sql, slot, primary).await
}

/// Creates slot `slot` on `sql` (marked failover from PostgreSQL 17 when `sql` is the
/// primary and `primary` is `None`: never a standby's slot, nor a spare on the primary);
/// the position it starts at. On a standby its creation waits for a record of the primary's
/// running transactions, which `primary` logs every half second until it is done.
pub async fn create_slot(
    sql: &SqlSession,
    slot: &str,
    primary: Option<&SqlSession>,
) -> anyhow::Result<Timestamp> {
    let create = match primary {
        None if sql.server_version_num >= 170_000 => {
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', failover => true)"
        }
        _ => "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
    };
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&slot];
    let created = sql.client.query_one(create, &params);
    let row = match primary {
        None => created.await?,
        Some(primary) => logging_running_transactions(primary, created).await?,
    };
    Ok(Timestamp(Lsn::parse(row.get::<_, &str>(0))?.as_u64()))
}

/// Awaits `work` on a standby while `primary` logs its running transactions every half
/// second (`pg_log_standby_snapshot()`): a logical slot's creation there waits for one.
async fn logging_running_transactions<T>(
    primary: &SqlSession,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let mut nudge = tokio::time::interval(Duration::from_millis(500));
    let mut nudging = true;
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = nudge.tick(), if nudging => {
                let logged = primary.client.execute("SELECT pg_log_standby_snapshot()", &[]);
                if let Err(error) = logged.await {
                    tracing::warn!(%error, "cannot log the primary's running transactions (pg_log_standby_snapshot): the slot's creation on the standby waits for PostgreSQL's own, up to 15 s");
                    nudging = false;
                }
            }
        }
    }
}

/// The commit LSN of the newest transaction, among those slot `slot` will replay below
/// `upto`, that wrote a logical message with `prefix`; `None` when there is none. Peeks:
/// the slot does not move.
pub async fn newest_replayed_message_commit(
    sql: &SqlSession,
    slot: &str,
    publication: &str,
    upto: Timestamp,
    prefix: &str,
) -> anyhow::Result<Option<Timestamp>> {
    let upto = Lsn::from_u64(upto.0).to_string();
    let row = sql
        .client
        .query_one(
            REPLAYED_MESSAGE_QUERY,
            &[&slot, &upto, &publication, &prefix],
        )
        .await?;
    Ok(row
        .get::<_, Option<i64>>(0)
        .map(|lsn| Timestamp(lsn as u64)))
}

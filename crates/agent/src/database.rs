//! What the agent asks PostgreSQL about the database itself, in plain SQL sessions beside
//! the replication session: which database it follows ([`identity`]), where its WAL is and
//! which history it writes ([`position`], [`history`]), whether schema changes reach it
//! (the DDL triggers, or the catalog fingerprint: [`require_ddl_tracking`]), the slot
//! ([`slot_state`], [`find_slot`], [`recreate_slot`], [`newest_replayed_message_commit`]),
//! transaction ids and snapshots ([`floor_xid`], [`wait_until_visible`]). The stream, the
//! fan-out and start-up call these; what to do with the answers is theirs.
//!
//! Which database: the one `--dsn` names, in the cluster it runs on. A replication slot
//! decodes one database, so only that database's cached results are ever invalidated.
//! Libraries compare their own database with this (`DATABASE`) and do not cache when they
//! differ: another database on the same server (a test database beside the development one)
//! would otherwise read values nothing invalidates.

use crate::certify::Snapshot;
use crate::config::DdlTracking;
use crate::connect::SqlSession;
use anyhow::{bail, Context as _};
use pgwire_replication::Lsn;
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
    /// `wal_status`: `lost` means WAL it needed is gone.
    pub lost: bool,
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

/// Reads the slot's state; `None` when it does not exist.
pub async fn find_slot(sql: &SqlSession, slot: &str) -> anyhow::Result<Option<SlotState>> {
    let row = sql
        .client
        .query_opt(
            "SELECT confirmed_flush_lsn::text, coalesce(wal_status, ''), plugin::text
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let plugin: Option<String> = row.get(2);
    if plugin.as_deref() != Some("pgoutput") {
        bail!("replication slot {slot:?} uses plugin {plugin:?}, not pgoutput");
    }
    let confirmed: Option<String> = row.get(0);
    let confirmed = confirmed.map_or(Ok(Lsn::from_u64(0)), |text| Lsn::parse(&text))?;
    let status: String = row.get(1);
    Ok(Some(SlotState {
        confirmed: Timestamp(confirmed.as_u64()),
        lost: status == "lost",
    }))
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
         event triggers (a superuser, or a managed service's administrator), or `ALTER EVENT \
         TRIGGER … ENABLE ALWAYS` where one was disabled",
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

/// The database's WAL insert position now.
pub async fn position(sql: &SqlSession) -> anyhow::Result<Timestamp> {
    let text: String = sql
        .client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await?
        .get(0);
    Ok(Timestamp(Lsn::parse(&text)?.as_u64()))
}

/// The database history the stream follows: the cluster's system identifier and the timeline
/// WAL is written on now, as `system_identifier:timeline`. A failover or a restore to a new
/// timeline changes the timeline; another cluster changes the identifier.
pub async fn history(sql: &SqlSession) -> anyhow::Result<String> {
    let row = sql
        .client
        .query_one(
            "SELECT system_identifier::text, pg_walfile_name(pg_current_wal_insert_lsn()) \
             FROM pg_control_system()",
            &[],
        )
        .await?;
    let (system, segment): (String, String) = (row.get(0), row.get(1));
    // A WAL segment's name starts with its timeline, 8 hex digits.
    let timeline = segment
        .get(..8)
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .with_context(|| format!("unexpected WAL segment name {segment:?}"))?;
    Ok(format!("{system}:{timeline}"))
}

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
pub async fn recreate_slot(sql: &SqlSession, slot: &str) -> anyhow::Result<Timestamp> {
    sql.client
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
             WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    let create = if sql.server_version_num >= 170_000 {
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', failover => true)"
    } else {
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')"
    };
    let row = sql.client.query_one(create, &[&slot]).await?;
    Ok(Timestamp(Lsn::parse(row.get::<_, &str>(0))?.as_u64()))
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

//! Schema changes the DDL triggers miss, found by comparing catalogs.
//!
//! Event triggers do not fire for everything: a managed service may exempt its superuser or
//! platform roles (Supabase, Neon), and a superuser can disable them. A view redefined or a
//! function replaced then reaches no cache, and no data change follows to give it away. So
//! every DDL command's trigger writes the digest of the schema it left
//! (`txcache.schema_digest()`) as a transactional `txcache-schema` message; the stream hands
//! each commit's last one to [`SchemaDigests`]. Every `--schema-check-interval`, while
//! libraries read (the agent holds pins), this watch takes a pin and computes the digest in
//! its snapshot. A pin shows exactly the commits at or below its position (certification),
//! so the catalog it shows must be the one the last digest at or below that position names
//! — or, with none since the last check, the one that check found. Any other digest is a
//! change no trigger reported: the watch writes an `all` notice
//! ([`DigestTable::announce`](crate::digest_table::DigestTable::announce)), counts it
//! (`untracked_schema_changes`) and logs it.
//!
//! The last digest checked is recorded in `txcache.schema_check`, so that a change made
//! while no agent ran is seen by the first check. Two transactions changing the schema at
//! once each write a digest without the other's change: the catalog then matches neither,
//! and everything is invalidated once — sound, and rare.
//!
//! Not started with `--ddl-tracking fingerprint`: without triggers there are no digests to
//! compare with, and every pin's catalog fingerprint is checked instead, before it is listed
//! (`fingerprint_check.rs`), which leaves nothing for a periodic check to find.

use crate::connect::{connect_sql_until_open, SqlSession};
use crate::digest_table::{SCHEMA_CHANGED, SCHEMA_CHECK};
use crate::pincushion::{Pin, Pincushion};
use crate::schema_digests::SchemaDigests;
use crate::stream_stats::StreamStats;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use txcache_model::Timestamp;

/// The digest of the catalog as a snapshot shows it, and the snapshot's contents (an
/// importer compares them with the pin's: after a restart another snapshot can carry its
/// id).
const DIGEST: &str = "SELECT pg_current_snapshot()::text, txcache.schema_digest()";

/// `SET TRANSACTION SNAPSHOT` refused: the snapshot does not exist, or its exporter ended.
const SNAPSHOT_GONE: [SqlState; 3] = [
    SqlState::UNDEFINED_OBJECT,
    SqlState::INVALID_PARAMETER_VALUE,
    SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
];

/// What the watch knows between checks.
#[derive(Debug, Default)]
struct Checked {
    /// The last pin checked, and the digest it showed.
    last: Option<(Timestamp, String)>,
    /// The digest recorded in `txcache.schema_check`.
    recorded: Option<String>,
}

/// Checks the schema forever, reconnecting when the database goes away; returns when the
/// database has no `txcache.schema_digest()` (set up by an older `txcache setup`). Not
/// started with `--ddl-tracking fingerprint`, where every pin is checked instead.
pub async fn run(
    dsn: String,
    interval: Duration,
    pincushion: Arc<Pincushion>,
    digests: Arc<SchemaDigests>,
    stats: Arc<StreamStats>,
) {
    let mut checked = Checked::default();
    loop {
        let sql = connect_sql_until_open(&dsn, "txcache-agent schema check").await;
        let watch = Watch {
            sql: &sql,
            pincushion: &pincushion,
            digests: &digests,
            stats: &stats,
        };
        let Err(error) = watch.run(interval, &mut checked).await;
        if undefined_function(&error) {
            tracing::warn!(
                "txcache.schema_digest() does not exist (run `txcache setup` again to \
                 install it): schema changes the DDL triggers miss are not looked for"
            );
            return;
        }
        tracing::warn!(error = %format!("{error:#}"), "schema check failed; reconnecting");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn undefined_function(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code)
        == Some(&SqlState::UNDEFINED_FUNCTION)
}

/// One session's checks.
struct Watch<'a> {
    sql: &'a SqlSession,
    pincushion: &'a Pincushion,
    digests: &'a SchemaDigests,
    stats: &'a StreamStats,
}

impl Watch<'_> {
    /// Checks at a pin taken every `interval` until an error.
    async fn run(&self, interval: Duration, checked: &mut Checked) -> anyhow::Result<Infallible> {
        let recorded = SCHEMA_CHECK.recorded(self.sql).await?;
        let persistent = recorded.is_some();
        if checked.last.is_none() {
            checked.recorded = recorded.flatten();
        }
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            // No pin while no library reads: nothing is served meanwhile, and the first
            // check after reads resume comes within an interval. Otherwise a pin taken now:
            // a schema change alone commits nothing the stream decodes, so no newer pin
            // would follow it.
            if self.pincushion.pin_count() == 0 {
                continue;
            }
            let pin = self.pincushion.take_now().await?;
            if checked.last.as_ref().is_some_and(|(ts, _)| *ts > pin.ts) {
                continue;
            }
            let Some(now) = self.digest_at(&pin).await? else {
                tracing::debug!(at = pin.ts.0, "schema check: the pin went meanwhile");
                continue; // the next one
            };
            let before = match &checked.last {
                Some((_, digest)) => Some(digest.clone()),
                None => checked.recorded.clone(),
            };
            let expected = self.digests.expected_at(pin.ts, before);
            tracing::debug!(at = pin.ts.0, digest = %now, expected = ?expected, "schema check");
            let differs = expected
                .digest
                .as_ref()
                .is_some_and(|digest| *digest != now);
            match expected {
                _ if differs || expected.broken => {
                    SCHEMA_CHECK
                        .announce(self.sql, SCHEMA_CHANGED, &now, persistent)
                        .await?;
                    checked.recorded = Some(now.clone()).filter(|_| persistent);
                    self.stats.count_untracked_schema_change();
                    tracing::warn!(
                        at = pin.ts.0,
                        "the schema changed without a DDL notice (event triggers disabled, or \
                         DDL by a role they do not fire for): every cached result is \
                         invalidated; see docs/managed-postgres.md"
                    );
                }
                _ if persistent && checked.recorded.as_deref() != Some(now.as_str()) => {
                    SCHEMA_CHECK.record(self.sql, &now).await?;
                    checked.recorded = Some(now.clone());
                }
                _ => {}
            }
            checked.last = Some((pin.ts, now));
        }
    }

    /// The schema digest in `pin`'s snapshot; `None` when it can no longer be imported, or
    /// its id now names another snapshot.
    async fn digest_at(&self, pin: &Pin) -> anyhow::Result<Option<String>> {
        let client = &self.sql.client;
        let id = pin.snapshot_id.replace('\'', "''");
        let import = format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{id}'"
        );
        let row = match client.batch_execute(&import).await {
            Ok(()) => client.query_one(DIGEST, &[]).await,
            Err(error) => Err(error),
        };
        client.batch_execute("ROLLBACK").await?;
        match row {
            Ok(row) if row.get::<_, String>(0) == pin.snapshot => Ok(Some(row.get(1))),
            Ok(_) => Ok(None),
            Err(error)
                if error
                    .code()
                    .is_some_and(|code| SNAPSHOT_GONE.contains(code)) =>
            {
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    }
}

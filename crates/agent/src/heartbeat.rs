//! Heartbeats through the WAL.
//!
//! Every interval the agent writes a non-transactional logical message carrying the wall
//! clock. When the decoder reaches it at LSN `L`, every commit below `L` has been decoded
//! (the stream is in LSN order), so the nodes may advance `N` to `L`: their open entries are
//! known valid through `L`, as of that wall-clock time. A heartbeat also lets the slot be
//! acknowledged on an idle database, so it retains no WAL.

use crate::assemble::unix_micros_now;
use crate::connect::connect_sql_until_open;
use crate::stream_stats::StreamStats;
use pgwire_replication::Lsn;
use std::sync::Arc;
use std::time::Duration;
use txcache_model::Timestamp;

/// The prefix of heartbeat messages.
pub const HEARTBEAT_PREFIX: &str = "txcache-heartbeat";

/// Writes heartbeats forever, reconnecting when the database goes away. Each one's position
/// (the end of its record) is the database's WAL position as measured for `stats`: the
/// stream's lag is the WAL between what it has decoded and that.
pub async fn run(dsn: String, interval: Duration, stats: Arc<StreamStats>) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let client = connect_sql_until_open(&dsn, "txcache-agent heartbeat").await;
        // The four-argument form (flush now) exists from PostgreSQL 17 on.
        let statement = if client.server_version_num >= 170_000 {
            "SELECT pg_logical_emit_message(false, $1, $2, true)::text"
        } else {
            "SELECT pg_logical_emit_message(false, $1, $2)::text"
        };
        loop {
            ticker.tick().await;
            let now = unix_micros_now().to_string();
            match client
                .query_one_prepared(statement, &[&HEARTBEAT_PREFIX, &now])
                .await
            {
                Ok(row) => {
                    if let Ok(position) = Lsn::parse(row.get::<_, &str>(0)) {
                        stats.database_at(Timestamp(position.as_u64()));
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "heartbeat failed; reconnecting");
                    break;
                }
            }
        }
    }
}

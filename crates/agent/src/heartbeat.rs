//! Heartbeats through the WAL.
//!
//! Every interval the agent writes a non-transactional logical message carrying the wall
//! clock. When the decoder reaches it at LSN `L`, every commit below `L` has been decoded
//! (the stream is in LSN order), so the nodes may advance `N` to `L`: their open entries are
//! known valid through `L`, as of that wall-clock time. A heartbeat also lets the slot be
//! acknowledged on an idle database, so it retains no WAL.

use crate::assemble::unix_micros_now;
use crate::connect::connect_sql;
use std::time::Duration;

/// The prefix of heartbeat messages.
pub const HEARTBEAT_PREFIX: &str = "txcache-heartbeat";

/// Writes heartbeats forever, reconnecting when the database goes away.
pub async fn run(dsn: String, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let client = match connect_sql(&dsn, "txcache-agent heartbeat").await {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%error, "heartbeat connection failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // The four-argument form (flush now) exists from PostgreSQL 17 on.
        let statement = if client.server_version_num >= 170_000 {
            "SELECT pg_logical_emit_message(false, $1, $2, true)::text"
        } else {
            "SELECT pg_logical_emit_message(false, $1, $2)::text"
        };
        loop {
            ticker.tick().await;
            let now = unix_micros_now().to_string();
            if let Err(error) = client
                .client
                .query_one(statement, &[&HEARTBEAT_PREFIX, &now])
                .await
            {
                tracing::warn!(%error, "heartbeat failed; reconnecting");
                break;
            }
        }
    }
}

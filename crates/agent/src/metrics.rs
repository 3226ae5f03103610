//! The agent's one metrics table, read by both `STATUS` and the Prometheus endpoint.
//!
//! Each part counts what it does where it does it (the server its connections, the stream
//! and heartbeat tasks in [`StreamStats`], each node task in its `NodeState`, the pinner in
//! `PinStats`); [`collect`] takes one [`Reading`] of all of them from their [`Sources`] — the
//! parts themselves, so this module depends on them and none of them on it — and
//! [`REGISTRY`] declares every metric once
//! (section, name, kind, help, how to read it). `STATUS` lists the rows without a label,
//! `GET /metrics` (`--metrics-port`) all of them with the prefix `txcache_agent_`.

use crate::auth_failures;
use crate::fanout::{Fanout, NodeCounts};
use crate::pincushion::{PinCounts, Pincushion, StandbyCounts};
use crate::stream_stats::{StreamCounts, StreamStats};
use crate::term::Term;
use crate::tracker::StreamTracker;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use txcache_metrics::{Kind, Metric, Registry};

/// Everything the agent measures, read at one moment: what [`REGISTRY`]'s rows read from.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    uptime_seconds: u64,
    clients: u64,
    auth_failures: u64,
    stream: StreamCounts,
    commit_position: u64,
    heartbeat_position: u64,
    nodes_connected: u64,
    delivered_everywhere: u64,
    nodes: Vec<NodeCounts>,
    pins: u64,
    pin_counts: PinCounts,
    standbys: Vec<StandbyCounts>,
    lease_epoch: u64,
}

/// The parts the agent's metrics are read from, each counting its own: the server its
/// connections, the stream and heartbeat tasks [`StreamStats`], the tracker what was decoded,
/// the fan-out each node's delivery, the pincushion its pins.
pub struct Sources {
    /// When the agent started, for `uptime_in_seconds`.
    pub started: Instant,
    /// Library connections open now, counted by the server.
    pub clients: Arc<AtomicUsize>,
    /// The stream's positions and events.
    pub stream: Arc<StreamStats>,
    /// The stream's record: the newest commit and heartbeat.
    pub tracker: Arc<StreamTracker>,
    /// Node delivery.
    pub fanout: Arc<Fanout>,
    /// The pins and their certification counters.
    pub pincushion: Arc<Pincushion>,
    /// The pins on each `--standby`.
    pub standbys: Vec<Arc<Pincushion>>,
    /// This agent's term: the lease's epoch.
    pub term: Arc<Term>,
}

/// What a standby serves at `GET /metrics`: that it stands by (its other metrics are an
/// active agent's).
pub fn standby_text() -> String {
    "# HELP txcache_agent_standby 1 while this agent stands by: another agent holds the lease\n\
     # TYPE txcache_agent_standby gauge\n\
     txcache_agent_standby 1\n"
        .to_owned()
}

/// Reads everything the agent measures now.
pub fn collect(sources: &Sources) -> Reading {
    let progress = sources.tracker.progress();
    Reading {
        uptime_seconds: sources.started.elapsed().as_secs(),
        clients: sources.clients.load(Ordering::Relaxed) as u64,
        auth_failures: auth_failures::count(),
        stream: sources.stream.read(),
        commit_position: progress.commit.0,
        heartbeat_position: progress.heartbeat.0,
        nodes_connected: sources.fanout.connected_nodes() as u64,
        delivered_everywhere: sources.fanout.delivered_everywhere().0,
        nodes: sources.fanout.node_counts(),
        pins: sources.pincushion.pin_count() as u64,
        pin_counts: sources.pincushion.stats.read(),
        standbys: sources
            .standbys
            .iter()
            .filter_map(|cushion| cushion.standby_counts())
            .collect(),
        lease_epoch: sources.term.epoch(),
    }
}

use Kind::{Counter, Gauge};

/// One series per node, labelled with its address.
fn per_node(reading: &Reading, value: fn(&NodeCounts) -> u64) -> Vec<(String, u64)> {
    let nodes = reading.nodes.iter();
    nodes
        .map(|node| (node.address.clone(), value(node)))
        .collect()
}

/// One series per standby, labelled with its name.
fn per_standby(reading: &Reading, value: fn(&StandbyCounts) -> u64) -> Vec<(String, u64)> {
    let standbys = reading.standbys.iter();
    standbys
        .map(|standby| (standby.name.clone(), value(standby)))
        .collect()
}

/// Every metric of the agent, once, in `STATUS` order.
pub static REGISTRY: Registry<Reading> = Registry {
    prefix: "txcache_agent_",
    metrics: &[
        Metric::one("server", "uptime_in_seconds", Gauge, "Seconds since the agent started", |r| {
            r.uptime_seconds
        }),
        Metric::one("server", "connected_clients", Gauge, "Open library connections", |r| {
            r.clients
        }),
        Metric::one(
            "server",
            "lease_epoch",
            Gauge,
            "Epoch of the lease this agent holds: raised by every takeover",
            |r| r.lease_epoch,
        ),
        Metric::one(
            "server",
            "auth_failures",
            Counter,
            "AUTH attempts by libraries refused for a wrong password, since the agent started",
            |r| r.auth_failures,
        ),
        Metric::one(
            "stream",
            "stream_position",
            Gauge,
            "WAL position the stream has decoded up to (the end of the last record received)",
            |r| r.stream.position,
        ),
        Metric::one("stream", "commit_position", Gauge, "LSN of the newest decoded commit", |r| {
            r.commit_position
        }),
        Metric::one(
            "stream",
            "heartbeat_position",
            Gauge,
            "Position of the newest decoded heartbeat: every commit below it is decoded",
            |r| r.heartbeat_position,
        ),
        Metric::one(
            "stream",
            "database_position",
            Gauge,
            "The database's WAL position as last measured (at each heartbeat written)",
            |r| r.stream.database_position,
        ),
        Metric::one(
            "stream",
            "stream_lag_bytes",
            Gauge,
            "Bytes of WAL from stream_position to database_position; 0 when caught up",
            |r| r.stream.database_position.saturating_sub(r.stream.position),
        ),
        Metric::one(
            "stream",
            "stream_reconnects",
            Counter,
            "Replication sessions that ended or failed to start, each followed by a reconnect",
            |r| r.stream.reconnects,
        ),
        Metric::one(
            "stream",
            "slot_recreations",
            Counter,
            "Replication slots recreated after PostgreSQL removed WAL they needed or the slot was dropped",
            |r| r.stream.slot_recreations,
        ),
        Metric::one(
            "stream",
            "untracked_schema_changes",
            Counter,
            "Transactions that changed a table's definition without a DDL notice: the event triggers did not fire",
            |r| r.stream.untracked_schema_changes,
        ),
        Metric::one(
            "stream",
            "database_changes",
            Counter,
            "Sessions that found the database's positions gone back or its history changed",
            |r| r.stream.database_changes,
        ),
        Metric::one(
            "stream",
            "slot_on_standby",
            Gauge,
            "1 while the stream is decoded on a --decode-from standby, its slot there (none of it on the primary); 0 on the primary",
            |r| u64::from(r.stream.slot_on_standby),
        ),
        Metric::one(
            "stream",
            "primary_slot_spare",
            Gauge,
            "1 while the primary among the --decode-from hosts keeps a spare slot (--decode-primary-slot spare), else 0",
            |r| u64::from(r.stream.primary_slot_spare),
        ),
        Metric::one(
            "nodes",
            "nodes",
            Gauge,
            "Cache nodes in the membership now (--node, or txcache.cache_nodes)",
            |r| r.nodes.len() as u64,
        ),
        Metric::one("nodes", "nodes_connected", Gauge, "Cache nodes connected now", |r| {
            r.nodes_connected
        }),
        Metric::one(
            "nodes",
            "delivered_everywhere",
            Gauge,
            "Stream position every connected node has received",
            |r| r.delivered_everywhere,
        ),
        Metric::series(
            "nodes",
            "delivered_commits",
            Counter,
            "Commits delivered to the node (a replay after a reconnect counts again)",
            "node",
            |r| per_node(r, |node| node.delivered_commits),
        ),
        Metric::series(
            "nodes",
            "node_connected",
            Gauge,
            "1 while the node is connected, else 0",
            "node",
            |r| per_node(r, |node| u64::from(node.connected)),
        ),
        Metric::series(
            "nodes",
            "node_position",
            Gauge,
            "Stream position delivered to the node",
            "node",
            |r| per_node(r, |node| node.position),
        ),
        Metric::series(
            "nodes",
            "node_connections",
            Counter,
            "Connections made to the node",
            "node",
            |r| per_node(r, |node| node.connections),
        ),
        Metric::series(
            "nodes",
            "node_resets",
            Counter,
            "Resets sent to the node: it had missed commits no longer buffered",
            "node",
            |r| per_node(r, |node| node.resets),
        ),
        Metric::series(
            "nodes",
            "node_rewinds",
            Counter,
            "Rewinds sent to the node: it was past the database or followed another history",
            "node",
            |r| per_node(r, |node| node.rewinds),
        ),
        Metric::one("pins", "pins", Gauge, "Pins listed", |r| r.pins),
        Metric::one("pins", "pins_certified", Counter, "Snapshots certified clean", |r| {
            r.pin_counts.certified
        }),
        Metric::one(
            "pins",
            "pins_unclean",
            Counter,
            "Certification retries: snapshots discarded as not a prefix of commit order",
            |r| r.pin_counts.unclean,
        ),
        Metric::one(
            "pins",
            "pins_below_floor",
            Counter,
            "Certification retries: snapshots discarded while a transaction running at start was unfinished",
            |r| r.pin_counts.below_floor,
        ),
        Metric::series(
            "pins",
            "standby_pins",
            Gauge,
            "Pins listed on the standby (STANDBYPINS)",
            "standby",
            |r| per_standby(r, |standby| standby.pins),
        ),
        Metric::series(
            "pins",
            "standby_pins_certified",
            Counter,
            "Snapshots taken on the standby and placed on the stream: pins taken",
            "standby",
            |r| per_standby(r, |standby| standby.certified),
        ),
        Metric::series(
            "pins",
            "standby_pins_unplaced",
            Counter,
            "Snapshots taken on the standby and discarded: their replay position could not be placed on the stream",
            "standby",
            |r| per_standby(r, |standby| standby.unplaced),
        ),
    ],
};

/// `STATUS`: a `name:value` line per metric without a label (per-node series are only in
/// the Prometheus text: their label does not fit a `name:value` line).
pub fn status(reading: &Reading) -> String {
    let mut text = String::new();
    for sample in REGISTRY.samples(reading) {
        if sample.label.is_none() {
            let _ = write!(text, "{}:{}\r\n", sample.metric.name, sample.value);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading in which every number differs. The literals name every field (no `..`):
    /// a field added to any of these structs fails to compile here until it has a value, and
    /// then fails [`every_counter_the_agent_keeps_is_exported`] until a row exports it.
    fn distinct_reading() -> Reading {
        Reading {
            uptime_seconds: 1_001,
            clients: 1_002,
            lease_epoch: 1_003,
            auth_failures: 1_004,
            stream: StreamCounts {
                position: 2_001,
                database_position: 2_500,
                reconnects: 2_003,
                slot_recreations: 2_004,
                database_changes: 2_005,
                untracked_schema_changes: 2_006,
                slot_on_standby: true,
                primary_slot_spare: false,
            },
            commit_position: 3_001,
            heartbeat_position: 3_002,
            nodes_connected: 3_003,
            delivered_everywhere: 3_004,
            nodes: vec![NodeCounts {
                address: "127.0.0.1:6380".to_owned(),
                connected: true,
                position: 4_001,
                delivered_commits: 4_002,
                connections: 4_003,
                resets: 4_004,
                rewinds: 4_005,
            }],
            pins: 5_001,
            pin_counts: PinCounts {
                certified: 5_002,
                unclean: 5_003,
                below_floor: 5_004,
            },
            standbys: vec![StandbyCounts {
                name: "replica1".to_owned(),
                pins: 6_001,
                certified: 6_002,
                unplaced: 6_003,
            }],
        }
    }

    #[test]
    fn every_counter_the_agent_keeps_is_exported() {
        let problems = REGISTRY.unexported_fields(&distinct_reading());
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn the_table_is_well_formed() {
        assert!(REGISTRY.problems().is_empty(), "{:?}", REGISTRY.problems());
    }

    #[test]
    fn status_lists_every_unlabelled_metric_as_a_number() {
        let status = status(&distinct_reading());
        let lines: Vec<(&str, &str)> = status
            .split_terminator("\r\n")
            .map(|line| line.split_once(':').unwrap())
            .collect();
        let unlabelled = REGISTRY
            .metrics
            .iter()
            .filter(|m| matches!(m.read, txcache_metrics::Read::One(_)));
        let names: Vec<&str> = unlabelled.map(|m| m.name).collect();
        assert_eq!(lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), names);
        assert!(lines.iter().all(|(_, v)| v.parse::<u64>().is_ok()));
        assert!(lines.contains(&("stream_lag_bytes", "499")), "{status}");
        // `txcache status` reads where the slot is from these.
        assert!(lines.contains(&("slot_on_standby", "1")), "{status}");
        assert!(lines.contains(&("primary_slot_spare", "0")), "{status}");
        // The fields libraries and tools read keep their names.
        for name in [
            "commit_position",
            "heartbeat_position",
            "pins_certified",
            "pins_unclean",
            "nodes",
            "nodes_connected",
            "slot_on_standby",
            "primary_slot_spare",
            "auth_failures",
        ] {
            assert!(names.contains(&name), "{name}");
        }
    }

    /// docs/agent.md's table lists every metric with its kind, in order, `{node}` marking
    /// the series per node.
    #[test]
    fn the_documentation_lists_every_metric() {
        const DOC: &str = include_str!("../../../docs/agent.md");
        let table = DOC.split("\n## Metrics\n").nth(1).unwrap();
        let table = table.split("\n## ").next().unwrap();
        let rows = table.lines().filter(|line| line.starts_with("| `"));
        let documented: Vec<(String, String)> = rows
            .map(|row| {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
            })
            .collect();
        let declared: Vec<(String, String)> = REGISTRY
            .metrics
            .iter()
            .map(|metric| {
                let name = match metric.read {
                    txcache_metrics::Read::One(_) => metric.name.to_owned(),
                    txcache_metrics::Read::Series(label, _) => {
                        format!("{}{{{label}}}", metric.name)
                    }
                };
                (name, metric.kind.as_str().to_owned())
            })
            .collect();
        assert_eq!(documented, declared);
    }

    #[test]
    fn per_node_series_carry_the_node_address() {
        let text = REGISTRY.prometheus(&distinct_reading());
        let line = "txcache_agent_delivered_commits_total{node=\"127.0.0.1:6380\"} 4002\n";
        assert!(text.contains(line), "{text}");
        assert!(text.contains("txcache_agent_node_connected{node=\"127.0.0.1:6380\"} 1\n"));
        let line = "txcache_agent_standby_pins{standby=\"replica1\"} 6001\n";
        assert!(text.contains(line), "{text}");
        let ahead = Reading {
            stream: StreamCounts {
                position: 10,
                database_position: 5,
                ..StreamCounts::default()
            },
            ..Reading::default()
        };
        assert!(REGISTRY
            .prometheus(&ahead)
            .contains("\ntxcache_agent_stream_lag_bytes 0\n"));
    }
}

//! The node's one metrics table, read by both `INFO` and the Prometheus endpoint.
//!
//! The server counts what it sees (connections, commands, protocol errors) in atomics here;
//! the shards count what they do in their own `StoreStats`, summed when metrics are read.
//! [`collect`] takes one [`Reading`] of both, and [`REGISTRY`] declares every metric once
//! (section, name, kind, help, how to read it): `INFO` and `/metrics` are two renderings of
//! that table, so they can never disagree.

use crate::node::Node;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use txcache_metrics::{Kind, Metric, Registry};
use txcache_store::{Gauges, MemoryUsage, Store, StoreStats};

/// Counters kept by the server itself.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    connections_received: AtomicU64,
    connections_rejected: AtomicU64,
    connected_clients: AtomicUsize,
    commands_processed: AtomicU64,
    command_errors: AtomicU64,
    protocol_errors: AtomicU64,
    transactions: AtomicU64,
    transactions_aborted: AtomicU64,
    stream_fenced: AtomicU64,
}

/// A connection's place under `--max-clients`; the count drops when this does.
pub struct ConnectionSlot<'a>(&'a ServerMetrics);

impl Drop for ConnectionSlot<'_> {
    fn drop(&mut self) {
        self.0.connected_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ServerMetrics {
    /// Admits a connection, or `None` when `max_clients` are already connected.
    pub fn open_connection(&self, max_clients: usize) -> Option<ConnectionSlot<'_>> {
        self.connections_received.fetch_add(1, Ordering::Relaxed);
        let previous = self.connected_clients.fetch_add(1, Ordering::Relaxed);
        if previous >= max_clients {
            self.connected_clients.fetch_sub(1, Ordering::Relaxed);
            self.connections_rejected.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionSlot(self))
    }

    /// Counts one executed command and whether it succeeded.
    pub fn count_command(&self, succeeded: bool) {
        self.commands_processed.fetch_add(1, Ordering::Relaxed);
        if !succeeded {
            self.command_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one `EXEC`: whether it ran the transaction or discarded it for an error while
    /// queuing.
    pub fn count_transaction(&self, ran: bool) {
        let counter = if ran {
            &self.transactions
        } else {
            &self.transactions_aborted
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a stream command (or a `TXEPOCH`) refused with `-FENCED`: a stale agent still
    /// trying to move the node after another took over.
    pub fn count_fenced(&self) {
        self.stream_fenced.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed for malformed framing.
    pub fn count_protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now, as plain numbers.
    fn read(&self) -> ServerCounts {
        // Destructured whole: a counter added above is a compile error here until it is read.
        let Self {
            connections_received,
            connections_rejected,
            connected_clients,
            commands_processed,
            command_errors,
            protocol_errors,
            transactions,
            transactions_aborted,
            stream_fenced,
        } = self;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ServerCounts {
            connections_received: load(connections_received),
            connections_rejected: load(connections_rejected),
            connected_clients: connected_clients.load(Ordering::Relaxed) as u64,
            commands_processed: load(commands_processed),
            command_errors: load(command_errors),
            protocol_errors: load(protocol_errors),
            transactions: load(transactions),
            transactions_aborted: load(transactions_aborted),
            stream_fenced: load(stream_fenced),
        }
    }
}

/// [`ServerMetrics`] read at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerCounts {
    connections_received: u64,
    connections_rejected: u64,
    connected_clients: u64,
    commands_processed: u64,
    command_errors: u64,
    protocol_errors: u64,
    transactions: u64,
    transactions_aborted: u64,
    stream_fenced: u64,
}

/// Everything the node measures, read at one moment: what [`REGISTRY`]'s rows read from.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    uptime_seconds: u64,
    shards: u64,
    max_memory: u64,
    resident_bytes: u64,
    stream_epoch: u64,
    server: ServerCounts,
    memory: MemoryUsage,
    stats: StoreStats,
    gauges: Gauges,
}

/// Reads everything the node measures now.
pub fn collect(node: &Node) -> Reading {
    collect_from(node, |visit| node.shards.for_each(visit))
}

/// [`collect`], reaching the shards through `for_each_shard` (`INFO` inside a transaction
/// reads the shards its `EXEC` holds).
pub fn collect_from(
    node: &Node,
    for_each_shard: impl FnOnce(&mut dyn FnMut(&mut Store)),
) -> Reading {
    let mut stats = StoreStats::default();
    let mut memory = MemoryUsage::default();
    let mut gauges = Gauges::default();
    let mut stream: Option<StoreStats> = None;
    for_each_shard(&mut |store: &mut Store| {
        stats.add(store.stats());
        memory.add(&store.memory());
        gauges.add(store.gauges());
        stream.get_or_insert_with(|| store.stats().clone());
    });
    // Every shard applies every stream message: count those once, not once per shard.
    if let Some(first) = stream {
        stats.invalidations_applied = first.invalidations_applied;
        stats.invalidations_duplicate = first.invalidations_duplicate;
        stats.heartbeats = first.heartbeats;
        stats.resets = first.resets;
        stats.rewinds = first.rewinds;
    }
    Reading {
        uptime_seconds: node.started.elapsed().as_secs(),
        shards: node.shards.len() as u64,
        max_memory: node.max_memory() as u64,
        resident_bytes: resident_bytes(),
        stream_epoch: node.epoch(),
        server: node.metrics.read(),
        memory,
        stats,
        gauges,
    }
}

use Kind::{Counter, Gauge};

/// Every metric of the node, once: `INFO` lists them by section in this order, and
/// `/metrics` prefixes each name with `txcached_`.
pub static REGISTRY: Registry<Reading> = Registry {
    prefix: "txcached_",
    metrics: &[
        Metric::one(
            "server",
            "uptime_in_seconds",
            Gauge,
            "Seconds since the node started",
            |r| r.uptime_seconds,
        ),
        Metric::one("server", "shards", Gauge, "Store shards", |r| r.shards),
        Metric::one(
            "clients",
            "connected_clients",
            Gauge,
            "Open client connections",
            |r| r.server.connected_clients,
        ),
        Metric::one(
            "clients",
            "total_connections_received",
            Counter,
            "Connections accepted",
            |r| r.server.connections_received,
        ),
        Metric::one(
            "clients",
            "rejected_connections",
            Counter,
            "Connections refused at --max-clients",
            |r| r.server.connections_rejected,
        ),
        Metric::one(
            "stats",
            "total_commands_processed",
            Counter,
            "Commands executed",
            |r| r.server.commands_processed,
        ),
        Metric::one(
            "stats",
            "command_errors",
            Counter,
            "Commands answered with an error reply",
            |r| r.server.command_errors,
        ),
        Metric::one(
            "stats",
            "protocol_errors",
            Counter,
            "Connections closed for malformed requests",
            |r| r.server.protocol_errors,
        ),
        Metric::one(
            "stats",
            "transactions",
            Counter,
            "EXECs that ran their queued commands",
            |r| r.server.transactions,
        ),
        Metric::one(
            "stats",
            "transactions_aborted",
            Counter,
            "EXECs that discarded their commands for an error while queuing",
            |r| r.server.transactions_aborted,
        ),
        Metric::one("memory", "maxmemory", Gauge, "Memory limit in bytes", |r| {
            r.max_memory
        }),
        Metric::one(
            "memory",
            "used_memory",
            Gauge,
            "Accounted bytes, all parts",
            |r| r.memory.total() as u64,
        ),
        Metric::one(
            "memory",
            "used_memory_values",
            Gauge,
            "Accounted bytes of values",
            |r| r.memory.values as u64,
        ),
        Metric::one(
            "memory",
            "used_memory_keys",
            Gauge,
            "Accounted bytes of keys and entries",
            |r| r.memory.keys as u64,
        ),
        Metric::one(
            "memory",
            "used_memory_intervals",
            Gauge,
            "Accounted bytes of versions and intervals",
            |r| r.memory.intervals as u64,
        ),
        Metric::one(
            "memory",
            "used_memory_tags",
            Gauge,
            "Accounted bytes of tags and the tag index",
            |r| r.memory.tags as u64,
        ),
        Metric::one(
            "memory",
            "used_memory_history",
            Gauge,
            "Accounted bytes of the invalidation history",
            |r| r.memory.history as u64,
        ),
        Metric::one(
            "memory",
            "used_memory_ghosts",
            Gauge,
            "Accounted bytes of evicted-key records",
            |r| r.memory.ghosts as u64,
        ),
        Metric::one(
            "memory",
            "used_memory_rss",
            Gauge,
            "Resident set size of the process",
            |r| r.resident_bytes,
        ),
        Metric::one(
            "txcache",
            "hits",
            Counter,
            "Versioned lookups that found a version",
            |r| r.stats.hits,
        ),
        Metric::one(
            "txcache",
            "misses_compulsory",
            Counter,
            "Misses: key never stored",
            |r| r.stats.misses_compulsory,
        ),
        Metric::one(
            "txcache",
            "misses_capacity",
            Counter,
            "Misses: a matching version was evicted for memory",
            |r| r.stats.misses_capacity,
        ),
        Metric::one(
            "txcache",
            "misses_staleness",
            Counter,
            "Misses: only versions too old",
            |r| r.stats.misses_staleness,
        ),
        Metric::one(
            "txcache",
            "misses_consistency",
            Counter,
            "Misses: a fresh version exists outside the range",
            |r| r.stats.misses_consistency,
        ),
        Metric::one(
            "txcache",
            "lease_waits",
            Counter,
            "Lookups that found nothing while another caller held the key's lease (not misses)",
            |r| r.stats.lease_waits,
        ),
        Metric::one("txcache", "inserts", Counter, "Versions stored", |r| {
            r.stats.inserts
        }),
        Metric::one(
            "txcache",
            "extensions",
            Counter,
            "Inserts that extended an equal version",
            |r| r.stats.extensions,
        ),
        Metric::one(
            "txcache",
            "nondeterminism_warnings",
            Counter,
            "Inserts that contradicted an overlapping version",
            |r| r.stats.nondeterminism_warnings,
        ),
        Metric::one(
            "txcache",
            "empty_inserts",
            Counter,
            "Inserts whose interval came out empty",
            |r| r.stats.empty_inserts,
        ),
        Metric::one(
            "txcache",
            "evictions",
            Counter,
            "Versions or values evicted for memory",
            |r| r.stats.evictions,
        ),
        Metric::one(
            "txcache",
            "stale_removals",
            Counter,
            "Versions removed for exceeding the staleness limit",
            |r| r.stats.stale_removals,
        ),
        Metric::one(
            "txcache",
            "invalidations",
            Counter,
            "Invalidations applied",
            |r| r.stats.invalidations_applied,
        ),
        Metric::one(
            "txcache",
            "invalidations_duplicate",
            Counter,
            "Invalidations ignored as duplicates",
            |r| r.stats.invalidations_duplicate,
        ),
        Metric::one(
            "txcache",
            "versions_truncated",
            Counter,
            "Open versions bounded by an invalidation",
            |r| r.stats.versions_truncated,
        ),
        Metric::one(
            "txcache",
            "heartbeats",
            Counter,
            "Heartbeats that advanced N",
            |r| r.stats.heartbeats,
        ),
        Metric::one("txcache", "resets", Counter, "Stream resets applied", |r| {
            r.stats.resets
        }),
        Metric::one(
            "txcache",
            "rewinds",
            Counter,
            "Stream rewinds applied (the database's positions went back)",
            |r| r.stats.rewinds,
        ),
        Metric::one(
            "txcache",
            "stream_epoch",
            Gauge,
            "Fencing epoch: the highest TXEPOCH an agent sent (0 before any)",
            |r| r.stream_epoch,
        ),
        Metric::one(
            "txcache",
            "stream_fenced",
            Counter,
            "Stream commands and TXEPOCHs refused with FENCED (an agent taken over from)",
            |r| r.server.stream_fenced,
        ),
        Metric::one(
            "txcache",
            "plain_gets",
            Counter,
            "GETs answered (hits and misses)",
            |r| r.stats.plain_gets,
        ),
        Metric::one(
            "txcache",
            "plain_hits",
            Counter,
            "GETs that found a value",
            |r| r.stats.plain_hits,
        ),
        Metric::one(
            "txcache",
            "plain_misses",
            Counter,
            "GETs that found nothing",
            |r| r.stats.plain_misses,
        ),
        Metric::one(
            "txcache",
            "plain_sets",
            Counter,
            "Plain values stored (SET, MSET, INCRBY and friends)",
            |r| r.stats.plain_sets,
        ),
        Metric::one(
            "txcache",
            "plain_deletes",
            Counter,
            "Keys of either kind removed by DEL",
            |r| r.stats.plain_deletes,
        ),
        Metric::one(
            "txcache",
            "plain_expired",
            Counter,
            "Plain keys removed because their expiry passed",
            |r| r.stats.plain_expired,
        ),
        Metric::one("txcache", "keys", Gauge, "Keys held", |r| {
            r.gauges.keys as u64
        }),
        Metric::one("txcache", "versions", Gauge, "Versions held", |r| {
            r.gauges.versions as u64
        }),
        Metric::one(
            "txcache",
            "open_versions",
            Gauge,
            "Versions still open",
            |r| r.gauges.open_versions as u64,
        ),
        Metric::one(
            "txcache",
            "open_version_tags",
            Gauge,
            "Invalidation tags carried by the open versions",
            |r| r.gauges.open_version_tags as u64,
        ),
        Metric::one(
            "txcache",
            "plain_expiring",
            Gauge,
            "Plain keys with an expiry",
            |r| r.gauges.plain_expiring as u64,
        ),
        Metric::series(
            "sizes",
            "objects_by_size",
            Gauge,
            "Stored values by size bucket, each counted in one bucket only (max_bytes: the largest length in it)",
            // Not `le`: the buckets are not cumulative, so they are not a Prometheus histogram.
            "max_bytes",
            |r| size_series(&r.gauges),
        ),
    ],
};

/// The non-empty buckets of the size histogram, each labelled with its largest length.
fn size_series(gauges: &Gauges) -> Vec<(String, u64)> {
    let buckets = gauges.size_histogram.iter().enumerate();
    buckets
        .filter(|(_, count)| **count > 0)
        .map(|(bucket, count)| {
            // Bucket 0 holds empty values, bucket b values of length in [2^(b-1), 2^b).
            let largest = if bucket == 0 { 0 } else { (1u64 << bucket) - 1 };
            (largest.to_string(), *count as u64)
        })
        .collect()
}

/// The process's resident set size in bytes (Linux); 0 where it cannot be read.
pub fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// `INFO [section]`'s text of `reading`: Redis-style, sections in order, `all` for every one.
pub fn info_text(reading: &Reading, section: Option<&str>) -> String {
    let mut text = String::new();
    let mut current = "";
    for sample in REGISTRY.samples(reading) {
        let metric = sample.metric;
        if section.is_some_and(|wanted| wanted != "all" && wanted != metric.section) {
            continue;
        }
        if metric.section != current {
            current = metric.section;
            let _ = write!(
                text,
                "{}# {}\r\n",
                if text.is_empty() { "" } else { "\r\n" },
                capitalized(current)
            );
        }
        match &sample.label {
            Some((_, value)) => {
                let _ = write!(text, "{}_{}:{}\r\n", metric.name, value, sample.value);
            }
            None => {
                let _ = write!(text, "{}:{}\r\n", metric.name, sample.value);
            }
        }
    }
    text
}

/// The Prometheus text exposition of the same metrics.
pub fn prometheus(node: &Node) -> String {
    REGISTRY.prometheus(&collect(node))
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use txcache_store::SIZE_BUCKETS;

    /// A reading in which every number differs. The literals name every field (no `..`):
    /// a field added to any of these structs fails to compile here until it has a value, and
    /// then fails [`every_counter_the_node_keeps_is_exported`] until a row exports it.
    fn distinct_reading() -> Reading {
        Reading {
            uptime_seconds: 1_001,
            shards: 1_002,
            max_memory: 1_003,
            resident_bytes: 1_004,
            stream_epoch: 1_005,
            server: ServerCounts {
                connections_received: 2_001,
                connections_rejected: 2_002,
                connected_clients: 2_003,
                commands_processed: 2_004,
                command_errors: 2_005,
                protocol_errors: 2_006,
                transactions: 2_007,
                transactions_aborted: 2_008,
                stream_fenced: 2_009,
            },
            memory: MemoryUsage {
                values: 3_001,
                keys: 3_002,
                intervals: 3_003,
                tags: 3_004,
                history: 3_005,
                ghosts: 3_006,
            },
            stats: StoreStats {
                hits: 4_001,
                misses_compulsory: 4_002,
                misses_capacity: 4_003,
                misses_staleness: 4_004,
                misses_consistency: 4_005,
                inserts: 4_006,
                extensions: 4_007,
                nondeterminism_warnings: 4_008,
                empty_inserts: 4_009,
                evictions: 4_010,
                stale_removals: 4_011,
                invalidations_applied: 4_012,
                invalidations_duplicate: 4_013,
                versions_truncated: 4_014,
                heartbeats: 4_015,
                resets: 4_016,
                rewinds: 4_017,
                plain_gets: 4_018,
                plain_hits: 4_019,
                plain_misses: 4_020,
                plain_sets: 4_021,
                plain_deletes: 4_022,
                plain_expired: 4_023,
                lease_waits: 4_024,
            },
            gauges: Gauges {
                keys: 5_001,
                versions: 5_002,
                open_versions: 5_003,
                open_version_tags: 5_004,
                plain_expiring: 5_005,
                size_histogram: std::array::from_fn(|bucket| 6_000 + bucket),
            },
        }
    }

    #[test]
    fn every_counter_the_node_keeps_is_exported() {
        let problems = REGISTRY.unexported_fields(&distinct_reading());
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn the_table_is_well_formed() {
        assert!(REGISTRY.problems().is_empty(), "{:?}", REGISTRY.problems());
    }

    #[test]
    fn info_and_prometheus_list_the_same_numbers() {
        let reading = distinct_reading();
        let info = info_text(&reading, None);
        let prometheus = REGISTRY.prometheus(&reading);
        let info_lines: Vec<&str> = info.lines().filter(|l| l.contains(':')).collect();
        let samples: Vec<&str> = prometheus.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(info_lines.len(), samples.len());
        for (info_line, sample) in info_lines.iter().zip(&samples) {
            let (_, info_value) = info_line.rsplit_once(':').unwrap();
            let (_, value) = sample.rsplit_once(' ').unwrap();
            assert_eq!(info_value, value, "{info_line} / {sample}");
        }
        assert!(
            info.starts_with("# Server\r\nuptime_in_seconds:1001\r\n"),
            "{info}"
        );
        assert!(
            info.contains("\r\n\r\n# Sizes\r\nobjects_by_size_0:6000\r\n"),
            "{info}"
        );
        assert!(prometheus.contains("\ntxcached_objects_by_size{max_bytes=\"1\"} 6001\n"));
        let empty = info_text(&Reading::default(), Some("sizes"));
        assert_eq!(empty, "", "empty buckets are not listed");
        assert_eq!(SIZE_BUCKETS, reading.gauges.size_histogram.len());
    }

    /// docs/node.md's table lists every metric, in its section, in INFO order.
    #[test]
    fn the_documentation_lists_every_metric() {
        const DOC: &str = include_str!("../../../docs/node.md");
        let table = DOC.split("\n## Metrics\n").nth(1).unwrap();
        let table = table.split("\n## ").next().unwrap();
        let mut documented = Vec::new();
        for row in table.lines().filter(|line| line.starts_with("| ")).skip(1) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            // Backquoted words in the second cell; `objects_by_size_<bound>` and the like are
            // how a name is rendered, not names.
            let names = cells[2].split('`').skip(1).step_by(2);
            let names =
                names.filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            documented.extend(names.map(|name| (cells[1], name)));
        }
        let declared: Vec<(&str, &str)> = REGISTRY
            .metrics
            .iter()
            .map(|m| (m.section, m.name))
            .collect();
        assert_eq!(documented, declared);
    }

    #[test]
    fn a_section_lists_only_its_rows() {
        let text = info_text(&distinct_reading(), Some("clients"));
        let expected = "# Clients\r\nconnected_clients:2003\r\ntotal_connections_received:2001\r\nrejected_connections:2002\r\n";
        assert_eq!(text, expected);
    }
}

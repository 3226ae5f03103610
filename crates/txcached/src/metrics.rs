//! The node's one metrics registry, read by both `INFO` and the Prometheus endpoint.
//!
//! The server counts what it sees (connections, commands, protocol errors) in atomics here;
//! the shards count what they do in their own `StoreStats`, summed when metrics are read.
//! [`collect`] turns both into one list of named metrics, and each output format is a
//! rendering of that list, so INFO and /metrics can never disagree.

use crate::node::Node;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use txcache_store::{MemoryUsage, StoreStats};

/// Counters kept by the server itself.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    connections_received: AtomicU64,
    connections_rejected: AtomicU64,
    connected_clients: AtomicUsize,
    commands_processed: AtomicU64,
    command_errors: AtomicU64,
    protocol_errors: AtomicU64,
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

    /// Counts a connection closed for malformed framing.
    pub fn count_protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether a metric only grows or may go both ways (Prometheus types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonically increasing.
    Counter,
    /// A current level.
    Gauge,
}

/// One named number.
#[derive(Clone, Debug)]
pub struct Metric {
    /// INFO section it is listed under.
    pub section: &'static str,
    /// Field name, as in INFO (`txcached_` is prefixed for Prometheus).
    pub name: &'static str,
    /// An optional `(label, value)` distinguishing series of one name (the size histogram).
    pub label: Option<(&'static str, String)>,
    /// One line of help.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// The value now.
    pub value: u64,
}

/// Everything the node measures right now.
pub fn collect(node: &Node) -> Vec<Metric> {
    let mut stats = StoreStats::default();
    let mut memory = MemoryUsage::default();
    let mut sink = Vec::new();
    let mut gauges = txcache_store::Gauges::default();
    let mut stream: Option<StoreStats> = None;
    node.shards.for_each(|store| {
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
    server_metrics(node, &mut sink);
    memory_metrics(node, &memory, &mut sink);
    store_metrics(&stats, &gauges, &mut sink);
    size_metrics(&gauges, &mut sink);
    sink
}

fn push(
    sink: &mut Vec<Metric>,
    section: &'static str,
    kind: Kind,
    name: &'static str,
    help: &'static str,
    value: u64,
) {
    sink.push(Metric {
        section,
        name,
        label: None,
        help,
        kind,
        value,
    });
}

fn server_metrics(node: &Node, sink: &mut Vec<Metric>) {
    use Kind::{Counter, Gauge};
    let m = &node.metrics;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    push(
        sink,
        "server",
        Gauge,
        "uptime_in_seconds",
        "Seconds since the node started",
        node.started.elapsed().as_secs(),
    );
    push(
        sink,
        "server",
        Gauge,
        "shards",
        "Store shards",
        node.shards.len() as u64,
    );
    push(
        sink,
        "clients",
        Gauge,
        "connected_clients",
        "Open client connections",
        m.connected_clients.load(Ordering::Relaxed) as u64,
    );
    push(
        sink,
        "clients",
        Counter,
        "total_connections_received",
        "Connections accepted",
        load(&m.connections_received),
    );
    push(
        sink,
        "clients",
        Counter,
        "rejected_connections",
        "Connections refused at --max-clients",
        load(&m.connections_rejected),
    );
    push(
        sink,
        "stats",
        Counter,
        "total_commands_processed",
        "Commands executed",
        load(&m.commands_processed),
    );
    push(
        sink,
        "stats",
        Counter,
        "command_errors",
        "Commands answered with an error reply",
        load(&m.command_errors),
    );
    push(
        sink,
        "stats",
        Counter,
        "protocol_errors",
        "Connections closed for malformed requests",
        load(&m.protocol_errors),
    );
}

fn memory_metrics(node: &Node, memory: &MemoryUsage, sink: &mut Vec<Metric>) {
    use Kind::Gauge;
    push(
        sink,
        "memory",
        Gauge,
        "maxmemory",
        "Memory limit in bytes",
        node.max_memory() as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory",
        "Accounted bytes, all parts",
        memory.total() as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory_values",
        "Accounted bytes of values",
        memory.values as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory_keys",
        "Accounted bytes of keys and entries",
        memory.keys as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory_intervals",
        "Accounted bytes of versions and intervals",
        memory.intervals as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory_tags",
        "Accounted bytes of tags and the tag index",
        memory.tags as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory_history",
        "Accounted bytes of the invalidation history",
        memory.history as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory_ghosts",
        "Accounted bytes of evicted-key records",
        memory.ghosts as u64,
    );
    push(
        sink,
        "memory",
        Gauge,
        "used_memory_rss",
        "Resident set size of the process",
        resident_bytes(),
    );
}

fn store_metrics(s: &StoreStats, g: &txcache_store::Gauges, sink: &mut Vec<Metric>) {
    use Kind::{Counter, Gauge};
    let t = "txcache";
    push(
        sink,
        t,
        Counter,
        "hits",
        "Versioned lookups that found a version",
        s.hits,
    );
    push(
        sink,
        t,
        Counter,
        "misses_compulsory",
        "Misses: key never stored",
        s.misses_compulsory,
    );
    push(
        sink,
        t,
        Counter,
        "misses_capacity",
        "Misses: a matching version was evicted for memory",
        s.misses_capacity,
    );
    push(
        sink,
        t,
        Counter,
        "misses_staleness",
        "Misses: only versions too old",
        s.misses_staleness,
    );
    push(
        sink,
        t,
        Counter,
        "misses_consistency",
        "Misses: a fresh version exists outside the range",
        s.misses_consistency,
    );
    push(sink, t, Counter, "inserts", "Versions stored", s.inserts);
    push(
        sink,
        t,
        Counter,
        "extensions",
        "Inserts that extended an equal version",
        s.extensions,
    );
    push(
        sink,
        t,
        Counter,
        "nondeterminism_warnings",
        "Inserts that contradicted an overlapping version",
        s.nondeterminism_warnings,
    );
    push(
        sink,
        t,
        Counter,
        "empty_inserts",
        "Inserts whose interval came out empty",
        s.empty_inserts,
    );
    push(
        sink,
        t,
        Counter,
        "evictions",
        "Versions or values evicted for memory",
        s.evictions,
    );
    push(
        sink,
        t,
        Counter,
        "stale_removals",
        "Versions removed for exceeding the staleness limit",
        s.stale_removals,
    );
    push(
        sink,
        t,
        Counter,
        "invalidations",
        "Invalidations applied",
        s.invalidations_applied,
    );
    push(
        sink,
        t,
        Counter,
        "invalidations_duplicate",
        "Invalidations ignored as duplicates",
        s.invalidations_duplicate,
    );
    push(
        sink,
        t,
        Counter,
        "versions_truncated",
        "Open versions bounded by an invalidation",
        s.versions_truncated,
    );
    push(
        sink,
        t,
        Counter,
        "heartbeats",
        "Heartbeats applied",
        s.heartbeats,
    );
    push(
        sink,
        t,
        Counter,
        "resets",
        "Stream resets applied",
        s.resets,
    );
    push(
        sink,
        t,
        Counter,
        "rewinds",
        "Stream rewinds applied (the database's positions went back)",
        s.rewinds,
    );
    push(
        sink,
        t,
        Counter,
        "plain_hits",
        "GETs that found a value",
        s.plain_hits,
    );
    push(
        sink,
        t,
        Counter,
        "plain_misses",
        "GETs that found nothing",
        s.plain_misses,
    );
    push(sink, t, Counter, "plain_sets", "SETs stored", s.plain_sets);
    push(sink, t, Gauge, "keys", "Keys held", g.keys as u64);
    push(
        sink,
        t,
        Gauge,
        "versions",
        "Versions held",
        g.versions as u64,
    );
    push(
        sink,
        t,
        Gauge,
        "open_versions",
        "Versions still open",
        g.open_versions as u64,
    );
    push(
        sink,
        t,
        Gauge,
        "open_version_tags",
        "Invalidation tags carried by the open versions",
        g.open_version_tags as u64,
    );
}

fn size_metrics(g: &txcache_store::Gauges, sink: &mut Vec<Metric>) {
    for (bucket, count) in g.size_histogram.iter().enumerate() {
        if *count == 0 {
            continue;
        }
        // Bucket 0 holds empty values, bucket b values of length in [2^(b-1), 2^b).
        let largest = if bucket == 0 { 0 } else { (1u64 << bucket) - 1 };
        sink.push(Metric {
            section: "sizes",
            name: "objects_by_size",
            label: Some(("le", largest.to_string())),
            help: "Stored values by size bucket (largest length in the bucket)",
            kind: Kind::Gauge,
            value: *count as u64,
        });
    }
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

/// `INFO [section]`: Redis-style text, sections in order, `all` for every one.
pub fn info(node: &Node, section: Option<&str>) -> String {
    let mut text = String::new();
    let mut current = "";
    for metric in collect(node) {
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
        match &metric.label {
            Some((_, value)) => {
                let _ = write!(text, "{}_{}:{}\r\n", metric.name, value, metric.value);
            }
            None => {
                let _ = write!(text, "{}:{}\r\n", metric.name, metric.value);
            }
        }
    }
    text
}

/// The Prometheus text exposition of the same metrics.
pub fn prometheus(node: &Node) -> String {
    let mut text = String::new();
    let mut described = "";
    for metric in collect(node) {
        if metric.name != described {
            described = metric.name;
            let kind = match metric.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = write!(
                text,
                "# HELP txcached_{0} {1}\n# TYPE txcached_{0} {kind}\n",
                metric.name, metric.help
            );
        }
        match &metric.label {
            Some((label, value)) => {
                let _ = writeln!(
                    text,
                    "txcached_{}{{{label}=\"{value}\"}} {}",
                    metric.name, metric.value
                );
            }
            None => {
                let _ = writeln!(text, "txcached_{} {}", metric.name, metric.value);
            }
        }
    }
    text
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

//! The two limits a store is built with.

/// Limits of one store (one shard of a node).
///
/// A node splits its memory limit evenly between its shards, so `max_memory` here is one
/// shard's share; `max_staleness_micros` is the node's largest staleness limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Hard limit on accounted bytes (values, keys, versions, tags, history, ghosts).
    /// Default: [`StoreConfig::DEFAULT_MAX_MEMORY`], 1 GiB.
    pub max_memory: usize,
    /// The oldest data any reader may ask for, in microseconds of commit time: bounded versions
    /// that ended longer ago than this are removed, and history older than this is trimmed.
    /// Default: [`StoreConfig::DEFAULT_MAX_STALENESS_MICROS`], 120 s.
    pub max_staleness_micros: u64,
}

impl StoreConfig {
    /// The default memory limit: 1 GiB.
    pub const DEFAULT_MAX_MEMORY: usize = 1 << 30;
    /// The default staleness limit: 120 seconds.
    pub const DEFAULT_MAX_STALENESS_MICROS: u64 = 120 * 1_000_000;
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            max_memory: Self::DEFAULT_MAX_MEMORY,
            max_staleness_micros: Self::DEFAULT_MAX_STALENESS_MICROS,
        }
    }
}

//! The store: its parts and accessors. Plain key-value operations live in `kv.rs` (their
//! expiry in `expiry.rs`), versioned ones in `lookup.rs`, `insert.rs` and `invalidate.rs`;
//! eviction in `evict.rs`.

use crate::entry::{effective, KeyTable};
use crate::evict::XorShift;
use crate::expiry::ExpiryQueue;
use crate::ghost::Ghosts;
use crate::history::SharedHistory;
use crate::lease::{LeaseOutcome, Leases};
use crate::lookup::MissKind;
use crate::memory::{Ledger, MemoryUsage};
use crate::plain::PlainTable;
use crate::stale::StaleQueue;
use crate::stats::{Gauges, StoreStats};
use crate::tag_index::TagIndex;
use crate::StoreConfig;
use std::sync::Arc;
use txcache_model::{Timestamp, ValidityInterval, WallClock};

/// One shard of a cache node's data: versioned and plain entries, the tag index, the
/// invalidation history, and the accounting that keeps all of it under a byte limit.
///
/// Synchronous and single-threaded: it does no I/O, reads no clock (all time comes in with the
/// messages) and spawns nothing. See the crate documentation for the contract.
#[derive(Debug)]
pub struct Store {
    pub(crate) config: StoreConfig,
    /// Versioned keys.
    pub(crate) keys: KeyTable,
    /// Plain keys (set by `set`), one allocation each.
    pub(crate) plain: PlainTable,
    pub(crate) index: TagIndex,
    pub(crate) history: Arc<SharedHistory>,
    pub(crate) ghosts: Ghosts,
    pub(crate) stale: StaleQueue,
    /// Plain items' deadlines, earliest first (active expiry).
    pub(crate) expiry: ExpiryQueue,
    /// The time (milliseconds since the Unix epoch) the last plain operation carried: eviction
    /// takes keys whose deadline is before it first.
    pub(crate) plain_now: u64,
    /// `N`: the timestamp of the last applied invalidation, heartbeat or reset.
    pub(crate) last_applied: Timestamp,
    /// The latest commit time any message carried.
    pub(crate) latest_commit_time: WallClock,
    /// Store-local recency clock, advanced by every insert and lookup.
    pub(crate) clock: u64,
    pub(crate) rng: XorShift,
    pub(crate) ledger: Ledger,
    pub(crate) stats: StoreStats,
    /// Leases on missing keys (`lease.rs`).
    pub(crate) leases: Leases,
}

impl Store {
    /// An empty store with no history: `N` is [`Timestamp::ZERO`] and `H` unset.
    pub fn new(config: StoreConfig) -> Self {
        Self::with_history(config, Arc::new(SharedHistory::new(1)))
    }

    /// An empty store, one of the shards sharing `history` (see [`SharedHistory`]): every
    /// one of them must apply the same stream, in the same order, from the start.
    pub fn with_history(config: StoreConfig, history: Arc<SharedHistory>) -> Self {
        Self {
            config,
            keys: KeyTable::default(),
            plain: PlainTable::default(),
            index: TagIndex::default(),
            history,
            ghosts: Ghosts::default(),
            stale: StaleQueue::default(),
            expiry: ExpiryQueue::default(),
            plain_now: 0,
            last_applied: Timestamp::ZERO,
            latest_commit_time: WallClock(0),
            clock: 0,
            rng: XorShift::default(),
            ledger: Ledger::default(),
            stats: StoreStats::default(),
            leases: Leases::default(),
        }
    }

    /// `N`: the timestamp of the last applied invalidation, heartbeat or reset.
    pub fn last_applied(&self) -> Timestamp {
        self.last_applied
    }

    /// `H`: every commit after it is known (and the one at it); `None` before the first message.
    pub fn horizon(&self) -> Option<Timestamp> {
        self.history.read().horizon()
    }

    /// `interval` as this node vouches for it now: a bounded interval as it is; an open one
    /// counts as valid through `N`, never below its own `lo`: `[lo, max(N, lo) + 1)` (what a
    /// lookup reports for an open version). `None` only when `lo` is `u64::MAX`.
    pub fn effective(&self, interval: &ValidityInterval) -> Option<ValidityInterval> {
        let (lo, hi) = effective(interval, self.last_applied);
        ValidityInterval::bounded(lo, hi).ok()
    }

    /// The latest commit time carried by any message (zero before the first).
    pub fn latest_commit_time(&self) -> WallClock {
        self.latest_commit_time
    }

    /// The limits in force.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Counters since creation.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// Keys, versions, open versions and the value-size histogram, now.
    pub fn gauges(&self) -> &Gauges {
        &self.ledger.gauges
    }

    /// Accounted bytes by part; the total never exceeds `max_memory` between operations.
    pub fn memory(&self) -> MemoryUsage {
        let data = &self.ledger.usage;
        MemoryUsage {
            values: data.values,
            keys: data.keys,
            intervals: data.intervals + self.stale.bytes() + self.expiry.bytes(),
            tags: data.tags + self.index.bytes(),
            history: self.history.read().bytes() / self.history.shards(),
            ghosts: self.ghosts.bytes(),
        }
    }

    /// Removes every key and ghost. The stream position (`N`, `H`, history) and the
    /// statistics stay: they describe the database, not the data.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.plain.clear();
        self.index.clear();
        self.ghosts.clear();
        self.stale.clear();
        self.expiry.clear();
        self.ledger = Ledger::default();
        self.leases.clear();
    }

    /// Asks for `key`'s lease after a lookup of it missed (`kind`), at `now` (milliseconds
    /// since the Unix epoch) for `duration_ms`: granted (compute and store it) or held by
    /// another caller (wait and look again). A held lease makes the lookup a lease wait, not a
    /// miss: its caller does not go to the database.
    pub fn claim_lease(
        &mut self,
        key: &[u8],
        kind: MissKind,
        now: u64,
        duration_ms: u64,
    ) -> LeaseOutcome {
        let outcome = self.leases.claim(key, now, duration_ms);
        if let LeaseOutcome::Held { .. } = outcome {
            self.uncount_miss(kind);
            self.stats.lease_waits += 1;
        }
        outcome
    }

    /// Ends `key`'s lease, if it has one: its value was stored, or its holder gave up.
    pub fn release_lease(&mut self, key: &[u8]) -> bool {
        self.leases.release(key)
    }

    /// How many leases are recorded.
    pub fn leases(&self) -> usize {
        self.leases.len()
    }

    /// Changes the memory limit, evicting down to a lower one at once.
    pub fn set_max_memory(&mut self, bytes: usize) {
        self.config.max_memory = bytes;
        // Ghosts over their new budget go first, so that entries are not evicted for them.
        self.ghosts.shrink_to(self.ghost_budget());
        self.housekeeping();
    }

    /// Advances and returns the recency clock.
    pub(crate) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Removes `key`'s entry of either kind with everything it charged and registered; false
    /// if absent.
    pub(crate) fn drop_entry(&mut self, key: &[u8]) -> bool {
        if let Some(item) = self.plain.remove(key) {
            self.ledger.remove_plain(&item);
            return true;
        }
        let Some(entry) = self.keys.remove(key) else {
            return false;
        };
        let key = entry.shared_key();
        self.ledger.remove_key(key.len());
        for (version, value) in entry.with_values() {
            self.ledger.remove_version(version, value.len());
            if let Some(tags) = &version.tags {
                self.index.unregister(key, tags);
            }
        }
        true
    }

    /// The history may use an eighth of the memory limit of the shards sharing it.
    pub(crate) fn history_budget(&self) -> usize {
        self.config.max_memory / 8 * self.history.shards()
    }

    /// Ghosts may use a thirty-second of the memory limit.
    pub(crate) fn ghost_budget(&self) -> usize {
        self.config.max_memory / 32
    }
}

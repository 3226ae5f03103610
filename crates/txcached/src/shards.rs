//! The node's store, cut into shards that lock independently.
//!
//! Keys route to one shard by hash, so data commands on different shards run in parallel.
//! Stream messages (invalidations, heartbeats, resets) go to *every* shard; the ordering lock
//! makes each message reach all shards before the next one starts, so every shard sees the
//! same stream in the same order and `N` never differs between shards once a message is done.
//! The shards share one invalidation history ([`SharedHistory`]): the first shard to apply a
//! message records it, and an insert on any shard reads the node's whole history.

use hashbrown::DefaultHashBuilder;
use parking_lot::{Mutex, MutexGuard};
use std::hash::BuildHasher;
use std::sync::Arc;
use txcache_store::{SharedHistory, Store, StoreConfig};

/// The shards of one node.
pub struct Shards {
    shards: Box<[Mutex<Store>]>,
    /// Held while one stream message is applied to all shards.
    ordering: Mutex<()>,
    /// Routes keys to shards: foldhash (SipHash took ~250 instructions per request), seeded
    /// per process so that no client can aim its keys at one shard.
    hasher: DefaultHashBuilder,
}

impl Shards {
    /// `count` shards splitting `config.max_memory` evenly.
    pub fn new(count: usize, config: StoreConfig) -> Self {
        let per_shard = Self::split(config.max_memory, count);
        let history = Arc::new(SharedHistory::new(count));
        let shards = (0..count)
            .map(|_| {
                let config = StoreConfig {
                    max_memory: per_shard,
                    ..config.clone()
                };
                Mutex::new(Store::with_history(config, Arc::clone(&history)))
            })
            .collect();
        Self {
            shards,
            ordering: Mutex::new(()),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn split(total: usize, count: usize) -> usize {
        total / count.max(1)
    }

    /// The shard holding `key`, locked.
    pub fn for_key(&self, key: &[u8]) -> MutexGuard<'_, Store> {
        let index = self.hasher.hash_one(key) as usize % self.shards.len();
        self.shards[index].lock()
    }

    /// The first shard, locked: the first to apply each stream message.
    pub fn first(&self) -> MutexGuard<'_, Store> {
        self.shards[0].lock()
    }

    /// Applies one stream message to every shard, in shard order, under the ordering lock.
    /// Returns what the first shard returned (all shards agree on `N`, so on the answer).
    pub fn broadcast<R>(&self, mut apply: impl FnMut(&mut Store) -> R) -> R {
        let _ordering = self.ordering.lock();
        let mut first = None;
        for shard in self.shards.iter() {
            let result = apply(&mut shard.lock());
            first.get_or_insert(result);
        }
        first.expect("a node has at least one shard")
    }

    /// Visits every shard in turn (for statistics and whole-node commands).
    pub fn for_each(&self, mut visit: impl FnMut(&mut Store)) {
        for shard in self.shards.iter() {
            visit(&mut shard.lock());
        }
    }

    /// Sets the node-wide memory limit, split evenly; shards evict down to it at once.
    pub fn set_max_memory(&self, total: usize) {
        let per_shard = Self::split(total, self.shards.len());
        self.for_each(|store| store.set_max_memory(per_shard));
    }

    /// Number of shards.
    pub fn len(&self) -> usize {
        self.shards.len()
    }
}

//! The node's store, cut into shards that lock independently.
//!
//! Keys route to one shard by hash, so data commands on different shards run in parallel.
//! Stream messages (invalidations, heartbeats, resets) go to *every* shard; the ordering lock
//! makes each message reach all shards before the next one starts, so every shard sees the
//! same stream in the same order and `N` never differs between shards once a message is done.
//! The shards share one invalidation history ([`SharedHistory`]): the first shard to apply a
//! message records it, and an insert on any shard reads the node's whole history. A command
//! naming keys on several shards, and a transaction's `EXEC`, lock all the shards they touch
//! at once, in index order ([`Shards::lock`]).

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

    /// The index of the shard holding `key`.
    #[inline]
    pub fn index_of(&self, key: &[u8]) -> usize {
        self.hasher.hash_one(key) as usize % self.shards.len()
    }

    /// The shard holding `key`, locked.
    pub fn for_key(&self, key: &[u8]) -> MutexGuard<'_, Store> {
        self.shards[self.index_of(key)].lock()
    }

    /// Shard `index`, locked.
    pub fn lock_index(&self, index: usize) -> MutexGuard<'_, Store> {
        self.shards[index].lock()
    }

    /// Locks the shards `wanted` marks (one flag per shard), in index order, and holds them
    /// until the result is dropped. Whoever holds more than one shard took them in this one
    /// order (stream messages and whole-node reads hold one at a time), so no two wait for
    /// each other.
    pub fn lock(&self, wanted: &[bool]) -> Held<'_> {
        let guards = self
            .shards
            .iter()
            .zip(wanted.iter().chain(std::iter::repeat(&false)))
            .map(|(shard, wanted)| wanted.then(|| shard.lock()))
            .collect();
        Held { guards }
    }

    /// Removes up to `budget` expired plain keys from each shard (the periodic sweep: lazy
    /// expiry finds only the keys someone asks for). Returns how many records the busiest
    /// shard took: at `budget`, more may be due.
    pub fn expire_due(&self, now: u64, budget: usize) -> usize {
        let mut most = 0;
        // One shard at a time, each briefly: a sweep holds up no more than one shard's clients.
        self.for_each(|store| most = most.max(store.expire_due(now, budget)));
        most
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

    /// Each shard's share of a node-wide memory limit of `total` bytes.
    pub fn share(&self, total: usize) -> usize {
        Self::split(total, self.shards.len())
    }

    /// Number of shards.
    pub fn len(&self) -> usize {
        self.shards.len()
    }
}

/// Shards locked together for one command or transaction, by [`Shards::lock`].
pub struct Held<'a> {
    /// One slot per shard, in shard order: its guard when locked.
    guards: Vec<Option<MutexGuard<'a, Store>>>,
}

/// The stores of shards locked beforehand, by index (a trait, so that a command's context can
/// hold a borrow of them however long the locks are held).
pub trait LockedShards {
    /// Shard `index`'s store, if it is among the locked ones.
    fn store(&mut self, index: usize) -> Option<&mut Store>;
}

impl LockedShards for Held<'_> {
    fn store(&mut self, index: usize) -> Option<&mut Store> {
        self.guards.get_mut(index)?.as_deref_mut()
    }
}

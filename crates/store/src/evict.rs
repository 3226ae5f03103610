//! Eviction: sampled LRU, like Redis.
//!
//! To free memory the store samples [`SAMPLES`] keys at random, in O(1) expected time each:
//! the item in the first occupied bucket from a random one, of the plain or the versioned
//! table (each kind drawn as often as its share of the keys). It takes each key's least
//! recently used version (or its plain value), and evicts the least recent of those. The
//! random source is a seeded xorshift, so a run is reproducible. An evicted version leaves a
//! capacity ghost. Plain keys whose deadline has passed go before any of that. Only when no
//! key is left does the store shed its overheads: dead staleness and expiry records, then
//! ghosts, then history.

use crate::entry::{Entry, Key};
use crate::ghost::GhostReason;
use crate::plain::recency_of;
use crate::Store;

/// Keys sampled per eviction (Redis's default `maxmemory-samples`).
pub(crate) const SAMPLES: usize = 5;

/// xorshift64*: a small, fast, deterministic random source for sampling.
#[derive(Clone, Debug)]
pub(crate) struct XorShift(u64);

impl Default for XorShift {
    fn default() -> Self {
        XorShift(0x9E37_79B9_7F4A_7C15)
    }
}

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A random index below `n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        // The top bits of xorshift* are its best; the modulo bias is irrelevant here.
        ((self.next() >> 16) % n as u64) as usize
    }
}

/// What eviction takes: a plain item (by its bucket in the plain table) or one version of a
/// versioned key.
enum Victim {
    Plain(usize),
    Version(Key, usize),
}

/// The recency of a versioned entry's eviction candidate, and which version it is.
fn oldest_in(entry: &Entry) -> Option<(u64, usize)> {
    (0..entry.versions().len())
        .map(|index| (entry.recency(index), index))
        .min()
}

impl Store {
    /// Evicts until `needed` more bytes fit under the limit (or nothing is left to free),
    /// plain keys whose deadline has passed first. Returns whether it evicted (or expired) a
    /// version or plain item: only then may items of the key tables have moved (shedding
    /// overhead leaves them alone).
    pub(crate) fn make_room(&mut self, needed: usize) -> bool {
        let mut evicted = false;
        while self.memory().total() + needed > self.config.max_memory {
            // An expired plain key is dead weight: it goes before any live one.
            if self.expire_next_due() || self.evict_one() {
                evicted = true;
            } else if !self.shed_overhead() {
                break;
            }
        }
        evicted
    }

    /// Evicts the least recently used of a few sampled candidates; false if there are no keys.
    fn evict_one(&mut self) -> bool {
        let Some(victim) = self.pick_victim() else {
            return false;
        };
        match victim {
            Victim::Version(key, index) => self.remove_version(&key, index, GhostReason::Capacity),
            Victim::Plain(position) => {
                if let Some(item) = self.plain.remove_at(position) {
                    self.ledger.remove_plain(&item);
                }
            }
        }
        self.stats.evictions += 1;
        true
    }

    /// The least recent of [`SAMPLES`] candidates drawn over all keys, plain and versioned,
    /// each kind as often as its share of the keys.
    fn pick_victim(&mut self) -> Option<Victim> {
        let plain = self.plain.len();
        let len = plain + self.keys.len();
        let mut best: Option<(u64, Victim)> = None;
        for _ in 0..SAMPLES.min(len) {
            let Some((recency, victim)) = self.draw(plain, len) else {
                continue;
            };
            if best.as_ref().is_none_or(|(r, _)| recency < *r) {
                best = Some((recency, victim));
            }
        }
        best.map(|(_, victim)| victim)
    }

    /// One random candidate and its recency: the plain item, or the oldest version of the
    /// versioned key, in the first occupied bucket from a random one.
    fn draw(&mut self, plain: usize, len: usize) -> Option<(u64, Victim)> {
        if self.rng.below(len) < plain {
            let start = self.rng.below(self.plain.positions());
            let position = self.plain.occupied_from(start)?;
            let item = self.plain.item_at(position)?;
            let recency = recency_of(item.stamp(), self.clock);
            return Some((recency, Victim::Plain(position)));
        }
        let start = self.rng.below(self.keys.positions());
        let entry = self.keys.item_at(self.keys.occupied_from(start)?)?;
        let (recency, index) = oldest_in(entry)?;
        Some((recency, Victim::Version(entry.shared_key().clone(), index)))
    }

    /// Frees bookkeeping once no key is left to evict; false when nothing is left at all.
    fn shed_overhead(&mut self) -> bool {
        let before = self.stale.bytes() + self.expiry.bytes();
        self.compact_stale();
        self.compact_expiry();
        self.stale.bytes() + self.expiry.bytes() < before
            || self.ghosts.pop_oldest()
            || self.history.write().pop_oldest()
    }

    /// Removes version `index` of `key`, leaving a ghost with `reason`; drops the key when
    /// it was the last version.
    pub(crate) fn remove_version(&mut self, key: &Key, index: usize, reason: GhostReason) {
        let Some(entry) = self.keys.get_mut(key) else {
            return;
        };
        if index >= entry.versions().len() {
            return;
        }
        let version = entry.remove(index);
        let now_empty = entry.versions().is_empty();
        self.ledger
            .remove_version(&version, version.detached_value().len());
        if let Some(tags) = &version.tags {
            self.index.unregister(key, tags);
        }
        if now_empty {
            self.keys.remove(key);
            self.ledger.remove_key(key.len());
        }
        self.ghosts
            .leave(key, version.interval, reason, self.ghost_budget());
    }
}

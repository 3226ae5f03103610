//! Ghosts: what a key lost, kept after the versions themselves are gone, so a later miss can
//! say whether memory (capacity) or age (staleness) was the reason.

use crate::entry::Key;
use crate::memory::GHOST_OVERHEAD;
use hashbrown::HashMap;
use std::collections::VecDeque;
use txcache_model::{Timestamp, ValidityInterval};

/// Why a version left the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GhostReason {
    /// Evicted to make room.
    Capacity,
    /// Removed for ending before the staleness limit.
    Staleness,
}

/// The last version a key lost.
#[derive(Clone, Debug)]
pub(crate) struct Ghost {
    /// The version's interval when it left (open if it was open).
    pub interval: ValidityInterval,
    pub reason: GhostReason,
    /// Tells the FIFO slot of this ghost from slots of ghosts it replaced.
    seq: u64,
}

impl Ghost {
    /// Whether a capacity ghost would have answered a lookup of `[lo, hi]`. An open ghost
    /// counts from its `lo` on: it was valid through `N` when evicted.
    pub fn answers(&self, lo: Timestamp, hi: Timestamp) -> bool {
        self.reason == GhostReason::Capacity
            && self.interval.lo() <= hi
            && self.interval.hi().is_none_or(|end| end > lo)
    }
}

/// One ghost per key, oldest dropped first once over a byte budget.
#[derive(Debug, Default)]
pub(crate) struct Ghosts {
    map: HashMap<Key, Ghost>,
    /// Keys in the order their ghosts were left; slots whose `seq` no longer matches the
    /// key's ghost are leftovers of a replaced or forgotten ghost.
    order: VecDeque<(u64, Key)>,
    next_seq: u64,
    bytes: usize,
}

fn cost(key: &[u8]) -> usize {
    GHOST_OVERHEAD + key.len()
}

impl Ghosts {
    /// Accounted bytes of the ghosts.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn get(&self, key: &[u8]) -> Option<&Ghost> {
        self.map.get(key)
    }

    /// Records that `key` lost a version, replacing its previous ghost, then drops the oldest
    /// ghosts until at most `budget` bytes remain.
    pub fn leave(
        &mut self,
        key: &Key,
        interval: ValidityInterval,
        reason: GhostReason,
        budget: usize,
    ) {
        if cost(key) > budget {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let ghost = Ghost {
            interval,
            reason,
            seq,
        };
        if self.map.insert(key.clone(), ghost).is_none() {
            self.bytes += cost(key);
        }
        self.order.push_back((seq, key.clone()));
        self.shrink_to(budget);
        self.compact_order();
    }

    /// Drops the oldest ghosts until at most `budget` bytes remain.
    pub fn shrink_to(&mut self, budget: usize) {
        while self.bytes > budget && self.pop_oldest() {}
    }

    /// Drops the oldest ghost; false when there is none.
    pub fn pop_oldest(&mut self) -> bool {
        while let Some((seq, key)) = self.order.pop_front() {
            if self.map.get(&key).is_some_and(|g| g.seq == seq) {
                self.forget(&key);
                return true;
            }
        }
        false
    }

    /// Drops `key`'s ghost (the key was deleted or overwritten: its next miss is compulsory).
    pub fn forget(&mut self, key: &[u8]) {
        if self.map.remove(key).is_some() {
            self.bytes -= cost(key);
        }
    }

    /// Drops leftover FIFO slots once they outnumber the ghosts.
    fn compact_order(&mut self) {
        if self.order.len() > 2 * self.map.len() + 16 {
            let map = &self.map;
            self.order
                .retain(|(seq, key)| map.get(key).is_some_and(|g| g.seq == *seq));
        }
    }

    pub fn clear(&mut self) {
        *self = Ghosts {
            next_seq: self.next_seq,
            ..Ghosts::default()
        };
    }

    /// The bytes recomputed from scratch (for the invariant check).
    pub fn recount(&self) -> usize {
        self.map.keys().map(|k| cost(k)).sum()
    }
}

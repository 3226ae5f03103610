//! What one versioned key holds: its versions.

use crate::bucket::BucketTable;
use crate::dense::Keyed;
use bytes::Bytes;
use std::sync::Arc;
use txcache_model::{InvalidationTag, Timestamp, ValidityInterval};

/// A key, shared by the key table, the tag index, ghosts and the staleness queue so that its
/// bytes are stored once.
pub(crate) type Key = Arc<[u8]>;

/// One version of a versioned key.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    pub value: Bytes,
    /// As stored: open until an invalidation, a reset or an extension bounds it.
    pub interval: ValidityInterval,
    /// Store-local clock of the last insert or hit, for eviction.
    pub recency: u64,
    /// The tags the version is registered under in the tag index; `Some` exactly while open.
    pub tags: Option<Box<[InvalidationTag]>>,
}

impl Version {
    /// The interval the version is known valid over, as `(lo, hi)` with `hi` exclusive:
    /// an open version is known valid through `n` (the last applied message), never below its
    /// own `lo`, so it counts as `[lo, max(n, lo) + 1)`.
    pub fn effective(&self, n: Timestamp) -> (Timestamp, Timestamp) {
        effective(&self.interval, n)
    }

    /// The stored upper end, with open as "infinitely far".
    pub fn stored_hi(&self) -> Timestamp {
        self.interval.hi().unwrap_or(Timestamp(u64::MAX))
    }

    pub fn is_open(&self) -> bool {
        self.interval.is_open()
    }
}

/// `interval` as known valid through `n`, as `(lo, hi)` with `hi` exclusive: a bounded
/// interval as it is, an open one as `[lo, max(n, lo) + 1)`.
pub(crate) fn effective(interval: &ValidityInterval, n: Timestamp) -> (Timestamp, Timestamp) {
    let lo = interval.lo();
    let hi = interval.hi().unwrap_or_else(|| succ(n.max(lo)));
    (lo, hi)
}

/// The timestamp after `t`. Saturates at `u64::MAX` (never reached: wire timestamps stay
/// below `i64::MAX`), where an interval built from it comes out empty and is treated so.
pub(crate) fn succ(t: Timestamp) -> Timestamp {
    Timestamp(t.0.saturating_add(1))
}

/// One versioned key: the key, shared with the tag index, staleness queue and ghosts, and
/// its versions. (Plain values live in the plain table.)
#[derive(Debug)]
pub(crate) struct Entry {
    /// Private: the key table finds the entry by it, so it never changes.
    key: Key,
    /// Non-overlapping versions sorted by `lo`; only the last may be open.
    pub versions: Vec<Version>,
}

impl Entry {
    /// A key without versions yet.
    pub fn new(key: Key) -> Self {
        Entry {
            key,
            versions: Vec::new(),
        }
    }

    /// The shared key.
    pub fn shared_key(&self) -> &Key {
        &self.key
    }

    /// The shared key and the versions, mutable.
    pub fn parts_mut(&mut self) -> (&Key, &mut Vec<Version>) {
        (&self.key, &mut self.versions)
    }
}

impl Keyed for Entry {
    fn key(&self) -> &[u8] {
        &self.key
    }
}

/// Every versioned key of a store.
pub(crate) type KeyTable = BucketTable<Entry>;

/// Index of the first version whose stored interval ends after `lo`, and the first whose
/// start is at or after `hi`: the versions in between overlap `[lo, hi)`.
pub(crate) fn overlapping(
    versions: &[Version],
    interval: &ValidityInterval,
) -> std::ops::Range<usize> {
    let lo = interval.lo();
    let hi = interval.hi().unwrap_or(Timestamp(u64::MAX));
    // Sorted by lo and disjoint, so sorted by hi too: both are partition points.
    let start = versions.partition_point(|v| v.stored_hi() <= lo);
    let end = versions.partition_point(|v| v.interval.lo() < hi);
    start..end.max(start)
}

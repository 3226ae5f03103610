//! What one versioned key holds: its versions.

use crate::bucket::{BucketTable, Keyed};
use std::sync::Arc;
use thin_slice::ThinBoxedSlice;
use txcache_model::{InvalidationTag, Timestamp, ValidityInterval};

/// A key, shared by the key table, the tag index, ghosts and the staleness queue so that its
/// bytes are stored once.
pub(crate) type Key = Arc<[u8]>;

/// One version of a versioned key: six words, so that a key's versions pack closely and a
/// lookup's binary search over them touches few cache lines.
///
/// Not `Clone`: nothing copies a version, and `thin_slice`'s clone takes a mutable slice of
/// the value it copies.
#[derive(Debug)]
pub(crate) struct Version {
    /// The stored bytes, exactly as long as the value, behind a one-word pointer (the length
    /// rides in the pointer's unused top bits below 65,535 bytes; see [`crate::plain`]).
    pub value: ThinBoxedSlice<u8>,
    /// As stored: open until an invalidation, a reset or an extension bounds it.
    pub interval: ValidityInterval,
    /// Store-local clock of the last insert or hit, for eviction.
    pub recency: u64,
    /// The tags the version is registered under in the tag index; `Some` exactly while open.
    /// A fat pointer: `thin_slice` stores an empty slice as address 1, which is no place for
    /// a tag (an open version may have none).
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

/// A key's versions, exactly as many slots as versions: a boxed slice behind a one-word
/// pointer (a `Vec` takes three words in every entry of the key table), reallocated by each
/// insertion and removal, which are rare next to lookups. No versions is `None`, never an
/// empty slice: `thin_slice` stores one as address 1, which is no place for a version.
#[derive(Debug, Default)]
pub(crate) struct VersionList(Option<ThinBoxedSlice<Version>>);

impl VersionList {
    /// Inserts `version` at `index`, shifting the later ones up.
    pub fn insert(&mut self, index: usize, version: Version) {
        self.edit(|versions| {
            // Exactly one more slot: `insert` alone would double the capacity, and the boxed
            // slice would then be reallocated a second time to shed it.
            versions.reserve_exact(1);
            versions.insert(index, version);
        });
    }

    /// Removes and returns the version at `index` (which must exist).
    pub fn remove(&mut self, index: usize) -> Version {
        self.edit(|versions| versions.remove(index))
    }

    /// Replaces the versions in `range` by `version`; returns the ones replaced.
    pub fn replace(&mut self, range: std::ops::Range<usize>, version: Version) -> Vec<Version> {
        self.edit(|versions| versions.splice(range, [version]).collect())
    }

    /// Applies `change` to the versions as a `Vec`, then drops any spare capacity.
    fn edit<R>(&mut self, change: impl FnOnce(&mut Vec<Version>) -> R) -> R {
        let mut versions = self.0.take().map_or_else(Vec::new, |list| {
            let boxed: Box<[Version]> = list.into();
            boxed.into_vec()
        });
        let result = change(&mut versions);
        if !versions.is_empty() {
            self.0 = Some(versions.into_boxed_slice().into());
        }
        result
    }
}

impl std::ops::Deref for VersionList {
    type Target = [Version];

    fn deref(&self) -> &[Version] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl std::ops::DerefMut for VersionList {
    fn deref_mut(&mut self) -> &mut [Version] {
        self.0.as_deref_mut().unwrap_or_default()
    }
}

/// One versioned key: the key, shared with the tag index, staleness queue and ghosts, and
/// its versions. (Plain values live in the plain table.)
#[derive(Debug)]
pub(crate) struct Entry {
    /// Private: the key table finds the entry by it, so it never changes.
    key: Key,
    /// Non-overlapping versions sorted by `lo`; only the last may be open.
    pub versions: VersionList,
}

impl Entry {
    /// A key without versions yet.
    pub fn new(key: Key) -> Self {
        Entry {
            key,
            versions: VersionList::default(),
        }
    }

    /// The shared key.
    pub fn shared_key(&self) -> &Key {
        &self.key
    }

    /// The shared key and the versions, mutable.
    pub fn parts_mut(&mut self) -> (&Key, &mut VersionList) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn version(lo: u64) -> Version {
        Version {
            value: lo.to_string().into_bytes().into_boxed_slice().into(),
            interval: ValidityInterval::bounded(Timestamp(lo), Timestamp(lo + 1))
                .expect("lo < lo + 1"),
            recency: lo,
            tags: None,
        }
    }

    fn los(list: &VersionList) -> Vec<u64> {
        list.iter().map(|v| v.interval.lo().0).collect()
    }

    #[test]
    fn a_version_list_keeps_its_order_through_edits_in_one_word() {
        let mut list = VersionList::default();
        for (index, lo) in [(0, 3), (0, 1), (2, 7), (2, 5)] {
            list.insert(index, version(lo));
        }
        assert_eq!(los(&list), [1, 3, 5, 7]);
        assert_eq!(list.remove(1).interval.lo(), Timestamp(3));
        let replaced = list.replace(0..2, version(2));
        assert_eq!(
            replaced.iter().map(|v| v.recency).collect::<Vec<_>>(),
            [1, 5]
        );
        assert_eq!(los(&list), [2, 7]);
        list[1].recency = 9;
        assert_eq!(list.remove(1).recency, 9);
        assert_eq!(list.remove(0).recency, 2);
        assert!(list.is_empty() && list.0.is_none());
        list.insert(0, version(4));
        assert_eq!(los(&list), [4]);
        // One word in every entry of the key table, where a `Vec` took three (thin pointers
        // exist on x86-64 only; elsewhere `thin_slice` is a plain `Box`).
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(size_of::<VersionList>(), size_of::<usize>());
            assert_eq!(size_of::<Version>(), 6 * size_of::<usize>());
        }
    }
}

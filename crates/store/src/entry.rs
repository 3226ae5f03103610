//! What one versioned key holds: its versions.

use crate::bucket::{BucketTable, Keyed};
use crate::plain::{append_key_value, split_key_value};
use std::sync::Arc;
use thin_dst::ThinBox;
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
    /// Empty for the newest version of an [`Entry`], whose bytes live beside the key: private,
    /// so that [`Entry::value`] is the one way to read a stored one.
    value: ThinBoxedSlice<u8>,
    /// As stored: open until an invalidation, a reset or an extension bounds it.
    pub interval: ValidityInterval,
    /// Store-local clock of the last insert or hit, for eviction; stale while the version is
    /// its entry's newest ([`Entry::recency`]).
    pub recency: u64,
    /// The tags the version is registered under in the tag index; `Some` exactly while open.
    /// A fat pointer: `thin_slice` stores an empty slice as address 1, which is no place for
    /// a tag (an open version may have none).
    pub tags: Option<Box<[InvalidationTag]>>,
}

impl Version {
    /// A version holding a copy of `value`.
    pub fn new(
        value: &[u8],
        interval: ValidityInterval,
        recency: u64,
        tags: Option<Box<[InvalidationTag]>>,
    ) -> Self {
        Version {
            value: Box::<[u8]>::from(value).into(),
            interval,
            recency,
            tags,
        }
    }

    /// The value of a version that is in no entry (new, or removed from one); in an entry, see
    /// [`Entry::value`].
    pub fn detached_value(&self) -> &[u8] {
        &self.value
    }

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

/// One versioned key behind one word in its bucket of the key table: one allocation holding
/// the shared key's handle, the versions' pointer, the newest version's interval and recency,
/// and a copy of the key followed by the newest version's value.
///
/// One word, as a plain item's bucket is: a key table of wider buckets (24 bytes) does not fit
/// a core's 2 MiB L2 at 100,000 keys, and every lookup then missed it on the bucket too
/// (measured: a plain `GET` 22 % slower with 16-byte buckets, docs/store.md). Most lookups take
/// the newest version: they compare the key, check the interval, copy the value and refresh the
/// recency in this one allocation, as a plain hit does, and read the version list only for an
/// older version or for tags. The allocation is rebuilt when the newest version changes (an
/// insert copies the key and the value once more than before); older versions keep their
/// values themselves.
///
/// `thin_dst` builds the allocation (a header and a slice behind one word takes `unsafe`,
/// which this workspace forbids in its own code).
///
/// The versions are a boxed slice behind a one-word pointer, reallocated by each insertion and
/// removal, which are rare next to lookups. No versions is `None`, never an empty slice:
/// `thin_slice` stores one as address 1, which is no place for a version.
#[derive(Debug)]
pub(crate) struct Entry(ThinBox<Head, u8>);

/// Bytes of an entry's allocation before its tail: the tail's length and the [`Head`].
pub(crate) const ENTRY_HEAD_BYTES: usize = size_of::<usize>() + size_of::<Head>();

/// The fixed part of an [`Entry`]; the variable part (its tail) is the key's length
/// (LEB128, as in a plain item), the key, and the newest version's value: exactly that long.
#[derive(Debug)]
struct Head {
    /// Shared with the tag index, staleness queue and ghosts, so that they store no copy.
    key: Key,
    /// Non-overlapping versions sorted by `lo`; only the last may be open. The newest's own
    /// value is empty.
    versions: Option<ThinBoxedSlice<Version>>,
    /// A copy of the newest version's interval, kept equal to it by every change (meaningless
    /// without versions): a lookup of the newest reads no version.
    newest_interval: ValidityInterval,
    /// The newest version's recency, in place of its own (which is stale while it is the
    /// newest): a lookup of the newest writes no version either.
    newest_recency: u64,
}

/// What [`Head::newest_interval`] holds without versions.
const NO_INTERVAL: ValidityInterval = ValidityInterval::open(Timestamp(0));

impl Entry {
    /// A key without versions yet.
    pub fn new(key: Key) -> Self {
        let tail = tail(&key, &[]);
        Entry(ThinBox::new(
            Head {
                key,
                versions: None,
                newest_interval: NO_INTERVAL,
                newest_recency: 0,
            },
            tail,
        ))
    }

    /// The shared key.
    pub fn shared_key(&self) -> &Key {
        &self.0.head.key
    }

    /// The versions, oldest first (the newest's value is [`Entry::value`]'s to read).
    pub fn versions(&self) -> &[Version] {
        self.0.head.versions.as_deref().unwrap_or_default()
    }

    /// The index of the newest version; `None` without versions.
    pub fn newest(&self) -> Option<usize> {
        self.versions().len().checked_sub(1)
    }

    /// The interval of version `index` (which must exist): the newest's from its copy.
    pub fn interval(&self, index: usize) -> &ValidityInterval {
        if self.newest() == Some(index) {
            &self.0.head.newest_interval
        } else {
            &self.versions()[index].interval
        }
    }

    /// The recency of version `index` (which must exist): the store-local clock of its last
    /// insert or hit.
    pub fn recency(&self, index: usize) -> u64 {
        if self.newest() == Some(index) {
            self.0.head.newest_recency
        } else {
            self.versions()[index].recency
        }
    }

    /// Records a use of version `index` (which must exist) at `recency`.
    pub fn touch(&mut self, index: usize, recency: u64) {
        let head = &mut self.0.head;
        match head.versions.as_deref_mut() {
            Some(versions) if index + 1 < versions.len() => versions[index].recency = recency,
            _ => head.newest_recency = recency,
        }
    }

    /// The newest version, mutable, with what changing it in place needs.
    pub fn newest_mut(&mut self) -> Option<Newest<'_>> {
        let data = &mut *self.0;
        let value_len = split_tail(&data.slice).1.len();
        let versions = data.head.versions.as_deref_mut()?;
        let index = versions.len() - 1;
        Some(Newest {
            key: &data.head.key,
            version: &mut versions[index],
            copy: &mut data.head.newest_interval,
            index,
            value_len,
        })
    }

    /// The value of version `index` (which must exist).
    pub fn value(&self, index: usize) -> &[u8] {
        if self.newest() == Some(index) {
            split_tail(&self.0.slice).1
        } else {
            &self.versions()[index].value
        }
    }

    /// Every version with its value, oldest first.
    pub fn with_values(&self) -> impl Iterator<Item = (&Version, &[u8])> {
        let versions = self.versions().iter().enumerate();
        versions.map(|(index, version)| (version, self.value(index)))
    }

    /// Inserts `version` at `index`, shifting the later ones up.
    pub fn insert(&mut self, index: usize, version: Version) {
        self.edit(|versions| {
            // Exactly one more slot: `insert` alone would double the capacity, and the boxed
            // slice would then be reallocated a second time to shed it.
            versions.reserve_exact(1);
            versions.insert(index, version);
        });
    }

    /// Removes and returns the version at `index` (which must exist), its value its own.
    pub fn remove(&mut self, index: usize) -> Version {
        self.edit(|versions| versions.remove(index))
    }

    /// Replaces the versions in `range` by `version`; returns the ones replaced, their values
    /// their own.
    pub fn replace(&mut self, range: std::ops::Range<usize>, version: Version) -> Vec<Version> {
        self.edit(|versions| versions.splice(range, [version]).collect())
    }

    /// Applies `change` to the versions as a `Vec`, every value its version's own, then drops
    /// any spare capacity and rebuilds the allocation around the newest value.
    fn edit<R>(&mut self, change: impl FnOnce(&mut Vec<Version>) -> R) -> R {
        let data = &mut *self.0;
        let mut versions = data.head.versions.take().map_or_else(Vec::new, |list| {
            let boxed: Box<[Version]> = list.into();
            boxed.into_vec()
        });
        let (key, newest_value) = split_tail(&data.slice);
        if let Some(newest) = versions.last_mut() {
            newest.value = Box::<[u8]>::from(newest_value).into();
            newest.recency = data.head.newest_recency;
        }
        let result = change(&mut versions);
        let newest_value = versions
            .last_mut()
            .map(|newest| std::mem::take(&mut newest.value))
            .unwrap_or_default();
        let tail = tail(key, &newest_value);
        let head = Head {
            key: data.head.key.clone(),
            newest_interval: versions.last().map_or(NO_INTERVAL, |v| v.interval),
            newest_recency: versions.last().map_or(0, |v| v.recency),
            versions: (!versions.is_empty()).then(|| versions.into_boxed_slice().into()),
        };
        self.0 = ThinBox::new(head, tail);
        result
    }
}

/// An entry's newest version, borrowed for a change in place ([`Entry::newest_mut`]) of its
/// interval or tags; its interval's copy is brought up to date when it is dropped.
pub(crate) struct Newest<'a> {
    /// The entry's shared key.
    pub key: &'a Key,
    /// The version: its own value is empty and its recency stale ([`Entry::value`],
    /// [`Entry::recency`]), and neither may be changed here.
    pub version: &'a mut Version,
    copy: &'a mut ValidityInterval,
    /// Its index among the entry's versions.
    pub index: usize,
    /// Its value's length (the value itself lives beside the key).
    pub value_len: usize,
}

impl Drop for Newest<'_> {
    fn drop(&mut self) {
        *self.copy = self.version.interval;
    }
}

impl Keyed for Entry {
    /// The copy beside the newest value: a lookup compares the key where it copies from.
    fn key(&self) -> &[u8] {
        split_tail(&self.0.slice).0
    }
}

/// An entry's tail: `key`'s length (LEB128), `key`, the newest version's `value`.
fn tail(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    append_key_value(&mut bytes, key, value);
    bytes
}

/// An entry tail's key and newest value (empty without versions).
fn split_tail(tail: &[u8]) -> (&[u8], &[u8]) {
    split_key_value(tail)
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

    fn los(entry: &Entry) -> Vec<u64> {
        entry.versions().iter().map(|v| v.interval.lo().0).collect()
    }

    /// Each version's value as the entry shows it.
    fn values(entry: &Entry) -> Vec<String> {
        let text = |(_, value): (_, &[u8])| String::from_utf8(value.to_vec()).expect("digits");
        entry.with_values().map(text).collect()
    }

    #[test]
    fn an_entry_keeps_its_versions_order_and_values_through_edits() {
        let mut entry = Entry::new(Key::from(&b"key"[..]));
        assert_eq!((entry.key(), entry.versions().len()), (&b"key"[..], 0));
        for (index, lo) in [(0, 3), (0, 1), (2, 7), (2, 5)] {
            entry.insert(index, version(lo));
            assert_eq!(
                (entry.key(), &entry.shared_key()[..]),
                (&b"key"[..], &b"key"[..])
            );
        }
        assert_eq!(los(&entry), [1, 3, 5, 7]);
        assert_eq!(values(&entry), ["1", "3", "5", "7"]);
        // The newest value is beside the key, not in its version.
        assert_eq!(split_tail(&entry.0.slice), (&b"key"[..], &b"7"[..]));
        assert_eq!(entry.versions()[3].value.len(), 0);
        let removed = entry.remove(1);
        assert_eq!(
            (removed.interval.lo(), removed.detached_value()),
            (Timestamp(3), &b"3"[..])
        );
        let replaced = entry.replace(0..2, version(2));
        let replaced: Vec<_> = replaced
            .iter()
            .map(|v| (v.recency, v.detached_value()))
            .collect();
        assert_eq!(replaced, [(1, &b"1"[..]), (5, &b"5"[..])]);
        assert_eq!(
            (los(&entry), values(&entry)),
            (vec![2, 7], vec!["2".into(), "7".into()])
        );
        entry.touch(1, 9);
        entry.touch(0, 8);
        assert_eq!((entry.recency(0), entry.recency(1)), (8, 9));
        let newest = entry.newest_mut().expect("two versions");
        assert_eq!((newest.index, newest.value_len), (1, 1));
        // The entry's copy of the newest interval follows a change in place, and every edit.
        newest.version.interval = ValidityInterval::open(Timestamp(7));
        drop(newest);
        assert_eq!(*entry.interval(1), ValidityInterval::open(Timestamp(7)));
        let bounded = ValidityInterval::bounded(Timestamp(7), Timestamp(8)).expect("7 < 8");
        entry.newest_mut().expect("two versions").version.interval = bounded;
        assert_eq!(
            (entry.interval(0).lo(), *entry.interval(1)),
            (Timestamp(2), bounded)
        );
        let newest = entry.remove(1);
        assert_eq!((newest.recency, newest.detached_value()), (9, &b"7"[..]));
        assert_eq!(values(&entry), ["2"]);
        assert_eq!(entry.remove(0).detached_value(), b"2");
        assert!(entry.versions().is_empty() && entry.0.head.versions.is_none());
        assert!(entry.newest_mut().is_none());
        assert_eq!(split_tail(&entry.0.slice), (&b"key"[..], &b""[..]));
        entry.insert(0, version(4));
        assert_eq!((los(&entry), values(&entry)), (vec![4], vec!["4".into()]));
        entry.insert(0, version(1));
        assert_eq!(*entry.interval(1), entry.versions()[1].interval);
        entry.remove(1);
        assert_eq!(*entry.interval(0), entry.versions()[0].interval);
        // One word in every bucket of the key table, as a plain item's (thin pointers exist on
        // x86-64 only; elsewhere `thin_slice` is a plain `Box`).
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(size_of::<Entry>(), size_of::<usize>());
            assert_eq!(size_of::<Version>(), 6 * size_of::<usize>());
        }
    }

    #[test]
    fn a_long_key_and_a_value_past_the_thin_pointer_limit_share_the_entry() {
        let key = vec![b'k'; 300];
        let mut entry = Entry::new(Key::from(&key[..]));
        let big = vec![7u8; 70_000];
        let interval = ValidityInterval::bounded(Timestamp(1), Timestamp(2)).expect("1 < 2");
        entry.insert(0, Version::new(&big, interval, 1, None));
        assert_eq!((entry.key(), entry.value(0)), (&key[..], &big[..]));
        entry.insert(0, version(0));
        assert_eq!((entry.value(0), entry.value(1)), (&b"0"[..], &big[..]));
    }
}

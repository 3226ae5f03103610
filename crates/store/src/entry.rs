//! What one versioned key holds: its versions.

use crate::bucket::{BucketTable, Keyed};
use crate::plain::{key_value_len, put_key_value, split_key_value};
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
    /// A version without its value yet: the entry that takes it ([`Entry::insert`],
    /// [`Entry::replace`]) is given the value beside it and puts it where it belongs, beside
    /// the key when the version is the newest (no copy of its own to make and free), in the
    /// version otherwise.
    pub fn bare(
        interval: ValidityInterval,
        recency: u64,
        tags: Option<Box<[InvalidationTag]>>,
    ) -> Self {
        Version {
            value: ThinBoxedSlice::default(),
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
/// older version or for tags. Older versions keep their values themselves.
///
/// An insert below the newest version leaves the allocation as it is; a new newest version's
/// value is copied over the old newest's when the two are as long (the old one moving into its
/// version), and only a value of another length (or the newest's removal) rebuilds the
/// allocation. A new key's entry is made with its first version in it. Until 2026-11-28 every
/// insert rebuilt the allocation, copying the key and the newest value each time
/// (docs/node-speed.md).
///
/// `thin_dst` builds the allocation (a header and a slice behind one word takes `unsafe`,
/// which this workspace forbids in its own code).
///
/// The versions are a boxed slice behind a one-word pointer, moved to a new allocation (or,
/// when long, reallocated) by each insertion and removal, which are rare next to lookups. No
/// versions is `None`, never an empty slice: `thin_slice` stores one as address 1, which is no
/// place for a version.
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
    #[cfg(test)]
    pub fn new(key: Key) -> Self {
        let bytes = Key::clone(&key);
        let head = Head {
            key,
            versions: None,
            newest_interval: NO_INTERVAL,
            newest_recency: 0,
        };
        Entry(allocation(head, &bytes, &[]))
    }

    /// A new key's entry with its first version (without a value of its own:
    /// [`Version::bare`]) holding `value`: one allocation with the key and the value, no
    /// empty entry first.
    pub fn with_version(key: &[u8], version: Version, value: &[u8]) -> Self {
        debug_assert!(
            version.value.is_empty(),
            "a version with a value of its own"
        );
        let head = Head {
            key: Key::from(key),
            newest_interval: version.interval,
            newest_recency: version.recency,
            versions: boxed(vec![version]),
        };
        Entry(allocation(head, key, value))
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

    /// The versions that overlap `interval` ([`overlapping`]). An interval that starts at or
    /// after the newest version's end (where a new version usually goes) overlaps none, which
    /// the newest's interval beside the key tells without reading the list.
    pub fn overlapping(&self, interval: &ValidityInterval) -> std::ops::Range<usize> {
        let Some(newest) = self.newest() else {
            return 0..0;
        };
        let newest_hi = self.0.head.newest_interval.hi();
        if newest_hi.is_some_and(|hi| hi <= interval.lo()) {
            return newest + 1..newest + 1;
        }
        overlapping(self.versions(), interval)
    }

    /// Inserts `version` (without a value of its own: [`Version::bare`]) holding `value` at
    /// `index`, shifting the later ones up.
    ///
    /// Below the newest, only the version list changes: the allocation with the key and the
    /// newest value stays as it is. As the new newest, the value goes beside the key: in place
    /// when it is as long as the value there (the previous newest's, which moves into its own
    /// version), else in a new allocation.
    pub fn insert(&mut self, index: usize, mut version: Version, value: &[u8]) {
        debug_assert!(
            version.value.is_empty(),
            "a version with a value of its own"
        );
        if index < self.versions().len() {
            version.value = owned(value);
            self.edit_older(|versions| (inserted(versions, index, version), ()));
            return;
        }
        let data = &mut *self.0;
        let mut versions = take_versions(&mut data.head.versions);
        if let Some(newest) = versions.last_mut() {
            newest.value = owned(split_tail(&data.slice).1);
            newest.recency = data.head.newest_recency;
        }
        let index = versions.len();
        self.set_versions(inserted(versions, index, version), value);
    }

    /// Removes and returns the version at `index` (which must exist), its value its own.
    pub fn remove(&mut self, index: usize) -> Version {
        if index + 1 < self.versions().len() {
            return self.edit_older(|versions| removed(versions, index));
        }
        self.edit(|versions| removed(versions, index))
    }

    /// Replaces the versions in `range` by `version` (without a value of its own:
    /// [`Version::bare`]) holding `value`; returns the ones replaced, their values their own.
    pub fn replace(
        &mut self,
        range: std::ops::Range<usize>,
        mut version: Version,
        value: &[u8],
    ) -> Vec<Version> {
        debug_assert!(
            version.value.is_empty(),
            "a version with a value of its own"
        );
        version.value = owned(value);
        if range.end < self.versions().len() {
            return self.edit_older(|versions| replaced(versions, range, version));
        }
        self.edit(|versions| replaced(versions, range, version))
    }

    /// Applies `change` to the versions; `change` must leave the newest version in place
    /// (still the last, its value still beside the key), so that only the list is
    /// reallocated and the allocation around the newest value stays.
    fn edit_older<R>(&mut self, change: impl FnOnce(Vec<Version>) -> (Vec<Version>, R)) -> R {
        let head = &mut self.0.head;
        let (versions, result) = change(take_versions(&mut head.versions));
        debug_assert!(versions.last().is_some_and(|v| v.value.is_empty()));
        head.versions = boxed(versions);
        result
    }

    /// Applies `change` to the versions, every value its version's own, then puts the (new)
    /// newest value beside the key.
    fn edit<R>(&mut self, change: impl FnOnce(Vec<Version>) -> (Vec<Version>, R)) -> R {
        let data = &mut *self.0;
        let mut versions = take_versions(&mut data.head.versions);
        if let Some(newest) = versions.last_mut() {
            newest.value = owned(split_tail(&data.slice).1);
            newest.recency = data.head.newest_recency;
        }
        let (mut versions, result) = change(versions);
        let newest_value = versions
            .last_mut()
            .map(|newest| std::mem::take(&mut newest.value))
            .unwrap_or_default();
        self.set_versions(versions, &newest_value);
        result
    }

    /// Makes `versions` the entry's (the newest's own value empty, its recency current) and
    /// `value` the newest's value beside the key: copied over the old one when it is as long,
    /// else in a new allocation (the key's copy moves along; the shared key is not copied).
    fn set_versions(&mut self, versions: Vec<Version>, value: &[u8]) {
        let data = &mut *self.0;
        data.head.newest_interval = versions.last().map_or(NO_INTERVAL, |v| v.interval);
        data.head.newest_recency = versions.last().map_or(0, |v| v.recency);
        data.head.versions = boxed(versions);
        let (key, old_value) = split_tail(&data.slice);
        if old_value.len() == value.len() {
            let start = data.slice.len() - value.len();
            data.slice[start..].copy_from_slice(value);
            return;
        }
        let head = Head {
            key: data.head.key.clone(),
            versions: data.head.versions.take(),
            newest_interval: data.head.newest_interval,
            newest_recency: data.head.newest_recency,
        };
        let rebuilt = allocation(head, key, value);
        self.0 = rebuilt;
    }
}

// A short list changes by moving its versions into a new allocation of exactly their new
// number, not by `realloc`: growing or shrinking a block in place makes the allocator read
// (and unlink) the blocks beside it, which are cold, while a new small block comes from a
// per-thread cache that is not, and the versions moved are the ones the insert's search has
// just read (measured: 3.4 of 10.2 simulated cache misses per `TXSET` were `realloc`'s at six
// versions a key). A long list (a hot key's) is changed in place and reallocated, as before:
// moving it all would copy it on every change, where `realloc` may grow a large block without
// a copy.

/// The longest list [`inserted`], [`removed`] and [`replaced`] move to a new allocation:
/// 1 KiB of versions, the largest block glibc's per-thread cache holds.
const MOVED: usize = 1024 / size_of::<Version>();

/// `versions` with `version` at `index`.
fn inserted(mut versions: Vec<Version>, index: usize, version: Version) -> Vec<Version> {
    if versions.len() >= MOVED {
        // Exactly one more slot: `insert` alone would double the capacity, and the boxed
        // slice would then be reallocated a second time to shed it.
        versions.reserve_exact(1);
        versions.insert(index, version);
        return versions;
    }
    let mut list = Vec::with_capacity(versions.len() + 1);
    list.extend(versions.drain(..index));
    list.push(version);
    list.append(&mut versions);
    list
}

/// `versions` without the one at `index` (which must exist), and that one.
fn removed(mut versions: Vec<Version>, index: usize) -> (Vec<Version>, Version) {
    if versions.len() > MOVED {
        let version = versions.remove(index);
        return (versions, version);
    }
    let mut list = Vec::with_capacity(versions.len() - 1);
    list.extend(versions.drain(..index));
    let mut rest = versions.drain(..);
    let version = rest.next();
    list.extend(rest);
    // `index` exists: the version is there.
    (
        list,
        version.unwrap_or_else(|| unreachable!("no version {index}")),
    )
}

/// `versions` with those in `range` replaced by `version`, and the ones replaced.
fn replaced(
    mut versions: Vec<Version>,
    range: std::ops::Range<usize>,
    version: Version,
) -> (Vec<Version>, Vec<Version>) {
    if versions.len() > MOVED {
        let gone = versions.splice(range, [version]).collect();
        return (versions, gone);
    }
    let mut list = Vec::with_capacity(versions.len() + 1 - range.len());
    list.extend(versions.drain(..range.start));
    let gone = versions.drain(..range.len()).collect();
    list.push(version);
    list.append(&mut versions);
    (list, gone)
}

/// A copy of `value` in its own allocation, for a version other than an entry's newest.
fn owned(value: &[u8]) -> ThinBoxedSlice<u8> {
    Box::<[u8]>::from(value).into()
}

/// The versions of a list as a `Vec` (no copy: the boxed slice's own allocation), leaving
/// `None` behind.
fn take_versions(list: &mut Option<ThinBoxedSlice<Version>>) -> Vec<Version> {
    list.take().map_or_else(Vec::new, |list| {
        let boxed: Box<[Version]> = list.into();
        boxed.into_vec()
    })
}

/// `versions` as a list (without spare capacity): `None` when empty.
fn boxed(versions: Vec<Version>) -> Option<ThinBoxedSlice<Version>> {
    (!versions.is_empty()).then(|| versions.into_boxed_slice().into())
}

/// An entry's allocation: `head`, then `key`'s length (LEB128), `key` and `value`. Zeroed
/// first (`thin_dst` fills a tail from an iterator, one item at a time), then copied over.
fn allocation(head: Head, key: &[u8], value: &[u8]) -> ThinBox<Head, u8> {
    let len = key_value_len(key, value);
    let mut entry = ThinBox::new(head, std::iter::repeat_n(0, len));
    put_key_value(&mut entry.slice, key, value);
    entry
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

/// An entry tail's key and newest value (empty without versions).
fn split_tail(tail: &[u8]) -> (&[u8], &[u8]) {
    split_key_value(tail)
}

/// Every versioned key of a store.
pub(crate) type KeyTable = BucketTable<Entry>;

/// Index of the first version whose stored interval ends after `lo`, and the first whose
/// start is at or after `hi`: the versions in between overlap `[lo, hi)`.
///
/// A short list is scanned from its start rather than halved: an insert's search is its first
/// look at the list, and every step of a binary search waits for the cache line the step
/// before chose, while a scan reads the lines in order, which the hardware fetches ahead;
/// the insert then copies the whole list anyway.
pub(crate) fn overlapping(
    versions: &[Version],
    interval: &ValidityInterval,
) -> std::ops::Range<usize> {
    let lo = interval.lo();
    let hi = interval.hi().unwrap_or(Timestamp(u64::MAX));
    // Sorted by lo and disjoint, so sorted by hi too: both are partition points.
    let (start, end) = if versions.len() <= SCANNED {
        let start = versions.iter().take_while(|v| v.stored_hi() <= lo).count();
        let rest = versions[start..].iter();
        (
            start,
            start + rest.take_while(|v| v.interval.lo() < hi).count(),
        )
    } else {
        let start = versions.partition_point(|v| v.stored_hi() <= lo);
        (start, versions.partition_point(|v| v.interval.lo() < hi))
    };
    start..end.max(start)
}

/// The longest version list [`overlapping`] scans (16 versions are 12 cache lines).
const SCANNED: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    /// A version `[lo, lo + 1)` without its value, and the value it holds: `lo`'s digits.
    fn version(lo: u64) -> (Version, Vec<u8>) {
        let interval =
            ValidityInterval::bounded(Timestamp(lo), Timestamp(lo + 1)).expect("lo < lo + 1");
        (
            Version::bare(interval, lo, None),
            lo.to_string().into_bytes(),
        )
    }

    fn insert(entry: &mut Entry, index: usize, lo: u64) {
        let (version, value) = version(lo);
        entry.insert(index, version, &value);
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
            insert(&mut entry, index, lo);
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
        let (two, value) = version(2);
        let replaced = entry.replace(0..2, two, &value);
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
        insert(&mut entry, 0, 4);
        assert_eq!((los(&entry), values(&entry)), (vec![4], vec!["4".into()]));
        insert(&mut entry, 0, 1);
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

    /// Where the entry's allocation (key, newest value) is.
    fn address(entry: &Entry) -> *const u8 {
        std::ptr::from_ref(&entry.0.head).cast()
    }

    #[test]
    fn only_a_newest_value_of_another_length_reallocates_the_entry() {
        let mut entry = Entry::new(Key::from(&b"key"[..]));
        insert(&mut entry, 0, 50);
        let first = address(&entry);
        // Below the newest: the list changes, the allocation with the newest value stays.
        insert(&mut entry, 0, 10);
        insert(&mut entry, 1, 20);
        assert_eq!(address(&entry), first);
        // A newest value as long as the one beside the key is copied over it.
        insert(&mut entry, 3, 60);
        assert_eq!(address(&entry), first);
        assert_eq!(
            (los(&entry), values(&entry)[2..].to_vec()),
            (vec![10, 20, 50, 60], vec!["50".into(), "60".into()])
        );
        assert_eq!(split_tail(&entry.0.slice), (&b"key"[..], &b"60"[..]));
        assert_eq!(entry.remove(1).detached_value(), b"20");
        assert_eq!(address(&entry), first);
        // Another length: a new allocation, the same key.
        insert(&mut entry, 3, 700);
        assert_eq!(split_tail(&entry.0.slice), (&b"key"[..], &b"700"[..]));
        assert_eq!(values(&entry), ["10", "50", "60", "700"]);
        assert_eq!(entry.interval(3).lo(), Timestamp(700));
        // Removing the newest brings the next one's value beside the key.
        let newest = entry.remove(3);
        assert_eq!(
            (newest.interval.lo(), newest.detached_value()),
            (Timestamp(700), &b"700"[..])
        );
        assert_eq!(split_tail(&entry.0.slice), (&b"key"[..], &b"60"[..]));
        assert!(entry.versions()[2].detached_value().is_empty());
        // Replacing versions below the newest keeps it; replacing through it makes the merge
        // the newest.
        let (merged, value) = version(15);
        let replaced = entry.replace(0..1, merged, &value);
        assert_eq!(replaced[0].detached_value(), b"10");
        assert_eq!(values(&entry), ["15", "50", "60"]);
        let (merged, value) = version(55);
        let replaced = entry.replace(1..3, merged, &value);
        let replaced: Vec<_> = replaced.iter().map(Version::detached_value).collect();
        assert_eq!(replaced, [&b"50"[..], &b"60"[..]]);
        assert_eq!(
            (los(&entry), values(&entry)),
            (vec![15, 55], vec!["15".into(), "55".into()])
        );
        assert_eq!(*entry.interval(1), entry.versions()[1].interval);
        assert!(entry.versions()[1].detached_value().is_empty());
    }

    #[test]
    fn scanned_and_halved_lists_find_the_same_overlapping_versions() {
        // Versions [10i, 10i + 5), the last open when `open`; queries start and end anywhere.
        for n in [0, 1, 2, 5, SCANNED - 1, SCANNED, SCANNED + 1, 40] {
            for open in [false, true] {
                let mut entry = Entry::new(Key::from(&b"k"[..]));
                for i in 0..n as u64 {
                    let interval = match open && i + 1 == n as u64 {
                        true => ValidityInterval::open(Timestamp(10 * i)),
                        false => {
                            ValidityInterval::bounded(Timestamp(10 * i), Timestamp(10 * i + 5))
                                .expect("lo < hi")
                        }
                    };
                    let len = entry.versions().len();
                    entry.insert(len, Version::bare(interval, i, None), b"v");
                }
                let versions = entry.versions();
                for lo in 0..10 * n as u64 + 12 {
                    for hi in [Some(lo + 1), Some(lo + 7), Some(lo + 30), None] {
                        let query = ValidityInterval::new(Timestamp(lo), hi.map(Timestamp))
                            .expect("lo < hi");
                        // What a binary search finds (the search before lists were scanned).
                        let end = query.hi().unwrap_or(Timestamp(u64::MAX));
                        let start = versions.partition_point(|v| v.stored_hi() <= query.lo());
                        let stop = versions.partition_point(|v| v.interval.lo() < end);
                        let halved = start..stop.max(start);
                        assert_eq!(overlapping(versions, &query), halved, "{n} {query}");
                        assert_eq!(entry.overlapping(&query), halved, "{n} {query} {open}");
                    }
                }
            }
        }
    }

    #[test]
    fn long_lists_change_in_place_as_short_ones_move() {
        for n in [MOVED - 2, MOVED + 5] {
            let mut entry = Entry::new(Key::from(&b"key"[..]));
            let mut model: Vec<u64> = (0..n as u64).map(|i| 10 * i + 10).collect();
            for (index, &lo) in model.iter().enumerate() {
                insert(&mut entry, index, lo);
            }
            insert(&mut entry, 2, 25);
            model.insert(2, 25);
            assert_eq!(entry.remove(5).interval.lo().0, model.remove(5));
            let (merged, value) = version(31);
            let gone = entry.replace(3..5, merged, &value);
            let gone: Vec<u64> = gone.iter().map(|v| v.interval.lo().0).collect();
            assert_eq!(gone, model.splice(3..5, [31]).collect::<Vec<_>>());
            let newest = entry.remove(model.len() - 1);
            assert_eq!(
                newest.detached_value(),
                model
                    .pop()
                    .map(|lo| lo.to_string())
                    .unwrap_or_default()
                    .as_bytes()
            );
            let texts: Vec<String> = model.iter().map(ToString::to_string).collect();
            assert_eq!(
                (los(&entry), values(&entry)),
                (model, texts),
                "{n} versions"
            );
            assert_eq!(
                *entry.interval(entry.versions().len() - 1),
                entry.versions()[entry.versions().len() - 1].interval
            );
        }
    }

    #[test]
    fn a_long_key_and_a_value_past_the_thin_pointer_limit_share_the_entry() {
        let key = vec![b'k'; 300];
        let mut entry = Entry::new(Key::from(&key[..]));
        let big = vec![7u8; 70_000];
        let interval = ValidityInterval::bounded(Timestamp(1), Timestamp(2)).expect("1 < 2");
        entry.insert(0, Version::bare(interval, 1, None), &big);
        assert_eq!((entry.key(), entry.value(0)), (&key[..], &big[..]));
        insert(&mut entry, 0, 0);
        assert_eq!((entry.value(0), entry.value(1)), (&b"0"[..], &big[..]));
    }
}

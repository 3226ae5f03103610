//! Lookups of versioned keys and the classification of their misses.

use crate::entry::{effective, Entry};
use crate::{Store, StoreError};
use bytes::Bytes;
use txcache_model::{InvalidationTag, Timestamp, ValidityInterval};

/// The answer to a lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A version valid somewhere in the requested range.
    Hit(Hit),
    /// No version is; why not.
    Miss(MissKind),
}

/// The version a lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The stored bytes.
    pub value: Bytes,
    /// Where the value is known valid, always bounded: an open version counts as valid through
    /// `N`, so it answers `[lo, max(N, lo) + 1)`.
    pub interval: ValidityInterval,
    /// Whether the version is still open (no commit has bounded it yet).
    pub open: bool,
    /// The version's tags, when asked for and the version is open (an enclosing cacheable
    /// function inherits them); `None` otherwise.
    pub tags: Option<Vec<InvalidationTag>>,
}

/// The answer to a lookup as [`Store::lookup_with`] shows it, borrowed from the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupRef<'a> {
    /// A version valid somewhere in the requested range.
    Hit(HitRef<'a>),
    /// No version is; why not.
    Miss(MissKind),
}

/// The version a lookup found, borrowed: [`Hit`] without a copy of the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HitRef<'a> {
    /// The stored bytes.
    pub value: &'a [u8],
    /// Where the value is known valid, as in [`Hit::interval`].
    pub interval: ValidityInterval,
    /// Whether the version is still open (no commit has bounded it yet).
    pub open: bool,
    /// The version's tags, when asked for and the version is open; `None` otherwise.
    pub tags: Option<&'a [InvalidationTag]>,
}

impl<'a> HitRef<'a> {
    /// What a lookup of `entry`'s version `index` answers, with its effective `interval`. The
    /// version list is read for the tags only: the newest version's value and interval are in
    /// the entry itself.
    fn of(entry: &'a Entry, index: usize, interval: ValidityInterval, with_tags: bool) -> Self {
        HitRef {
            value: entry.value(index),
            interval,
            open: entry.interval(index).is_open(),
            tags: with_tags
                .then(|| entry.versions()[index].tags.as_deref())
                .flatten(),
        }
    }

    /// The owned hit (a copy of the value and of the tags).
    pub fn to_hit(&self) -> Hit {
        Hit {
            value: Bytes::copy_from_slice(self.value),
            interval: self.interval,
            open: self.open,
            tags: self.tags.map(<[_]>::to_vec),
        }
    }
}

/// Why a lookup missed (the paper's Fig. 8, with capacity told apart from staleness).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MissKind {
    /// The key has no versions and no ghost: never stored, or deleted or overwritten since.
    Compulsory,
    /// A version evicted for memory would have answered.
    Capacity,
    /// Only versions too old for the range are left (or were removed for staleness).
    Staleness,
    /// A version fresh enough for the range exists but starts after it.
    Consistency,
}

impl MissKind {
    /// The lower-case name used on the wire and in statistics.
    pub fn as_str(self) -> &'static str {
        match self {
            MissKind::Compulsory => "compulsory",
            MissKind::Capacity => "capacity",
            MissKind::Staleness => "staleness",
            MissKind::Consistency => "consistency",
        }
    }
}

/// The index of the version with the greatest `lo` whose effective interval meets the
/// inclusive range `[lo, hi]`, with that interval.
fn find(
    entry: &Entry,
    n: Timestamp,
    lo: Timestamp,
    hi: Timestamp,
) -> Option<(usize, ValidityInterval)> {
    // Effective intervals are disjoint and sorted like the stored ones, so only the last
    // version starting at or before `hi` can meet the range. Most lookups ask for the newest
    // (their range reaches its start): it is checked first, from the entry's copy of its
    // interval, so that a key with many versions costs a lookup no version at all, not a
    // binary search through cache lines of them.
    let versions = entry.versions();
    let newest = entry.newest()?;
    let index = if entry.interval(newest).lo() <= hi {
        newest
    } else {
        versions
            .partition_point(|v| v.interval.lo() <= hi)
            .checked_sub(1)?
    };
    let (start, end) = effective(entry.interval(index), n);
    let interval = ValidityInterval::bounded(start, end)
        .ok()
        .filter(|_| end > lo)?;
    Some((index, interval))
}

impl Store {
    /// The most recent version valid somewhere in the inclusive range `[lo, hi]`: among the
    /// versions whose effective interval meets the range, the one with the greatest `lo`.
    /// A hit refreshes the version's recency; a miss says why it missed.
    pub fn lookup(
        &mut self,
        key: &[u8],
        lo: Timestamp,
        hi: Timestamp,
        with_tags: bool,
    ) -> Result<Lookup, StoreError> {
        self.lookup_with(key, lo, hi, with_tags, |found| match found {
            LookupRef::Hit(hit) => Lookup::Hit(hit.to_hit()),
            LookupRef::Miss(kind) => Lookup::Miss(kind),
        })
    }

    /// [`Store::lookup`], its answer shown to `read` while the version is still borrowed: a
    /// reader that only copies the value into a reply makes no copy of its own.
    pub fn lookup_with<R>(
        &mut self,
        key: &[u8],
        lo: Timestamp,
        hi: Timestamp,
        with_tags: bool,
        read: impl FnOnce(LookupRef<'_>) -> R,
    ) -> Result<R, StoreError> {
        if lo > hi {
            return Err(StoreError::InvalidRange { lo, hi });
        }
        let (n, stamp) = (self.last_applied, self.tick());
        match self.keys.get_mut(key) {
            Some(entry) => {
                if let Some((index, interval)) = find(entry, n, lo, hi) {
                    entry.touch(index, stamp);
                    self.stats.hits += 1;
                    return Ok(read(LookupRef::Hit(HitRef::of(
                        entry, index, interval, with_tags,
                    ))));
                }
            }
            None if self.plain.position(key).is_some() => return Err(StoreError::WrongType),
            None => {}
        }
        let kind = self.classify_miss(key, lo, hi);
        self.count_miss(kind);
        Ok(read(LookupRef::Miss(kind)))
    }

    /// Why nothing in `key` answers `[lo, hi]`, checked in the order compulsory, capacity,
    /// consistency, staleness.
    fn classify_miss(&self, key: &[u8], lo: Timestamp, hi: Timestamp) -> MissKind {
        let versions = self.keys.get(key).map_or(&[][..], |e| e.versions());
        let ghost = self.ghosts.get(key);
        if versions.is_empty() && ghost.is_none() {
            MissKind::Compulsory
        } else if ghost.is_some_and(|g| g.answers(lo, hi)) {
            MissKind::Capacity
        } else if versions
            .last()
            .is_some_and(|v| v.effective(self.last_applied).1 > lo)
        {
            // Fresh enough, yet it missed: it starts after `hi`.
            MissKind::Consistency
        } else {
            MissKind::Staleness
        }
    }

    fn count_miss(&mut self, kind: MissKind) {
        *self.miss_counter(kind) += 1;
    }

    /// Takes back the count of a miss just counted (it became a lease wait).
    pub(crate) fn uncount_miss(&mut self, kind: MissKind) {
        let counter = self.miss_counter(kind);
        *counter = counter.saturating_sub(1);
    }

    fn miss_counter(&mut self, kind: MissKind) -> &mut u64 {
        match kind {
            MissKind::Compulsory => &mut self.stats.misses_compulsory,
            MissKind::Capacity => &mut self.stats.misses_capacity,
            MissKind::Staleness => &mut self.stats.misses_staleness,
            MissKind::Consistency => &mut self.stats.misses_consistency,
        }
    }
}

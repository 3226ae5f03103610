//! Memory accounting: what every stored thing is charged, and the totals by part.
//!
//! The charges aim at what the allocator really hands out, so that a node's resident size
//! tracks its accounted total: a value is charged its length; everything else is charged the
//! size of the structs that hold it, times [`slack`] where it sits in a hash table or a growable
//! vector, plus [`ALLOCATION`] per heap allocation. `docs/store.md` lists the resulting numbers.

use crate::entry::{Entry, Key, Version, ENTRY_HEAD_BYTES};
use crate::ghost::Ghost;
use crate::history::{Filed, Record, TableHistory};
use crate::plain::{plain_prefix_len, prefix_len, PlainItem, DEADLINE_BYTES, STAMP_BYTES};
use crate::stats::Gauges;
use crate::tag_index::TableIndex;
use hashbrown::HashMap;
use std::collections::VecDeque;
use std::mem::size_of;
use txcache_model::{ColumnSet, InvalidationTag, Timestamp, WallClock};

/// Accounted bytes, by part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Value bytes (each value's length).
    pub values: usize,
    /// Key bytes plus the per-key overhead (for a versioned key its entry in its bucket, the
    /// key's `Arc`, the version list's allocation and the key's copy beside the newest value;
    /// for a plain item its whole overhead: bucket with control byte, stamp, length prefix,
    /// allocation).
    pub keys: usize,
    /// Per-version overhead (the version in its list, its value's allocation (for a key's
    /// newest version, its entry's), and a spilled pointer for a value of 65,535 bytes or
    /// more), staleness-queue records, and plain items' expiry deadlines with their expiry-queue
    /// records.
    pub intervals: usize,
    /// Tags of open versions and the tag index.
    pub tags: usize,
    /// The invalidation history.
    pub history: usize,
    /// Records of evicted and stale-removed versions, for miss classification.
    pub ghosts: usize,
}

impl MemoryUsage {
    /// All parts together: what the memory limit bounds.
    pub fn total(&self) -> usize {
        self.values + self.keys + self.intervals + self.tags + self.history + self.ghosts
    }

    /// Adds `other`'s parts to these (to sum shards).
    pub fn add(&mut self, other: &MemoryUsage) {
        self.values += other.values;
        self.keys += other.keys;
        self.intervals += other.intervals;
        self.tags += other.tags;
        self.history += other.history;
        self.ghosts += other.ghosts;
    }

    pub(crate) fn sub(&mut self, other: &MemoryUsage) {
        self.values -= other.values;
        self.keys -= other.keys;
        self.intervals -= other.intervals;
        self.tags -= other.tags;
        self.history -= other.history;
        self.ghosts -= other.ghosts;
    }
}

/// Average bytes the allocator spends per heap allocation beyond the request (header and
/// rounding up to its size class).
pub(crate) const ALLOCATION: usize = 16;

/// Bytes per item of a hash table or growable vector whose items are `item` bytes: hashbrown
/// fills at most 7/8 of its buckets and doubles when full, vectors double too, so on average
/// about 1.5 slots are allocated per item.
pub(crate) const fn slack(item: usize) -> usize {
    item * 3 / 2
}

/// Reference counts in front of an `Arc`'s data.
const ARC_HEADER: usize = 2 * size_of::<usize>();

/// Per versioned key, beyond its bytes and their copy in its entry: the entry's one-word
/// bucket in the key table with its control byte, charged two buckets as a plain item's is
/// ([`PLAIN_ITEM_OVERHEAD`]), the entry's allocation up to its tail (shared key handle, version
/// list pointer, the newest version's interval and recency, tail length), the key's `Arc`
/// allocation, and the allocation of its version list. The entry's own allocation is the one its newest version's value would have had:
/// [`VERSION_OVERHEAD`] charges it.
pub(crate) const KEY_OVERHEAD: usize =
    2 * (size_of::<Entry>() + 1) + ENTRY_HEAD_BYTES + ARC_HEADER + 2 * ALLOCATION;

/// Per version, beyond its value bytes: the version struct (value pointer, interval, recency,
/// tag list pointer; version lists grow exactly, without slack) and the value's allocation
/// (for a key's newest version, its entry's, which holds its value).
pub(crate) const VERSION_OVERHEAD: usize = size_of::<Version>() + ALLOCATION;

/// Per plain item, beyond its key and value bytes (and the key's length prefix, charged
/// exactly): its one-word bucket in the plain table with the control byte, its recency stamp
/// and its one allocation. The bucket is charged twice, not [`slack`]'s 1.5 times: hashbrown
/// holds 1.14–2.3 buckets per item, and for a small bucket the difference matters, where an
/// item (or a small value) just past one of glibc's size classes already costs up to 15 bytes
/// more than [`ALLOCATION`] says; charges must err high.
pub(crate) const PLAIN_ITEM_OVERHEAD: usize =
    2 * (size_of::<PlainItem>() + 1) + STAMP_BYTES + ALLOCATION;

/// Per tag held by a version, beyond its text: the tag struct and its text's allocation.
pub(crate) const TAG_OVERHEAD: usize = size_of::<InvalidationTag>() + ALLOCATION;

/// Per open version with tags: the allocation of its tag list.
pub(crate) const TAG_LIST_OVERHEAD: usize = ALLOCATION;

/// Per registration of a key at a site (table and `column=value`) in the tag index: a key
/// handle and its column set in a hash map. The set makes the bucket 24 bytes where a bare
/// key handle made it 16, half as much again: charged, since open versions' charges already
/// ran a little short of their resident size.
pub(crate) const REGISTRATION: usize = slack(size_of::<(Key, ColumnSet)>() + 1);

/// The smallest table a hash map of keys with their columns allocates: 4 buckets, their
/// control bytes plus a 16-byte group, and the allocation. Most `column=value` sites hold one
/// key.
const MIN_KEY_MAP: usize = 4 * size_of::<(Key, ColumnSet)>() + 4 + 16 + ALLOCATION;

/// The smallest buffer a deque of timestamps allocates (4 slots) and the allocation.
const MIN_TS_DEQUE: usize = 4 * size_of::<Timestamp>() + ALLOCATION;

/// The smallest buffer a deque of filed commits (timestamp and columns) allocates (4 slots)
/// and the allocation.
const MIN_FILED_DEQUE: usize = 4 * size_of::<Filed>() + ALLOCATION;

/// Per `column=value` site in the tag index, beyond its text: the map slot, the text's
/// allocation, and the site's smallest table.
pub(crate) const INDEX_BUCKET: usize =
    slack(size_of::<(Box<str>, HashMap<Key, ColumnSet>)>() + 1) + ALLOCATION + MIN_KEY_MAP;

/// Per table in the tag index, beyond its name: the map slot and three allocations (name,
/// wildcard set, value map).
pub(crate) const INDEX_TABLE: usize =
    slack(size_of::<(Box<str>, TableIndex)>() + 1) + 3 * ALLOCATION;

/// Per history record: the record in the global deque and its tag list's allocation.
pub(crate) const HISTORY_RECORD: usize = slack(size_of::<Record>()) + ALLOCATION;

/// Per tag of a history record, beyond its text: the tag struct, its text's allocation, and
/// an entry (timestamp and columns) in each of the two deques it is filed in.
pub(crate) const HISTORY_TAG: usize = TAG_OVERHEAD + 2 * slack(size_of::<Filed>());

/// Per `column=value` site with a deque in the history, beyond its text: slot in its table's
/// map, text allocation and the deque's smallest buffer.
pub(crate) const HISTORY_FINE_KEY: usize =
    slack(size_of::<(Box<str>, VecDeque<Filed>)>() + 1) + ALLOCATION + MIN_FILED_DEQUE;

/// Per table with deques in the history, beyond its name: map slot, the allocations of its
/// name and of its map of sites, and the smallest buffers of its two deques.
pub(crate) const HISTORY_TABLE: usize =
    slack(size_of::<(Box<str>, TableHistory)>() + 1) + 2 * ALLOCATION + 2 * MIN_FILED_DEQUE;

/// While the history holds global commits (tag `*`): the smallest buffer of their deque. Each
/// global tag's timestamp in it is charged as [`HISTORY_TAG`]'s.
pub(crate) const HISTORY_GLOBAL: usize = MIN_TS_DEQUE;

/// Per ghost, beyond its key bytes: the map slot, about two FIFO slots (replaced ghosts
/// leave a stale one until compaction), and the key's `Arc` allocation.
pub(crate) const GHOST_OVERHEAD: usize = slack(size_of::<(Key, Ghost)>() + 1)
    + 2 * slack(size_of::<(u64, Key)>())
    + ARC_HEADER
    + ALLOCATION;

/// Per expiry-queue record: a heap slot of a deadline and a key hash (the key is found again
/// by its hash, so the record keeps no key bytes).
pub(crate) const EXPIRY_RECORD: usize = slack(size_of::<(u64, u64)>());

/// Per staleness-queue record, beyond the key bytes it may keep alive: a heap slot.
pub(crate) const STALE_RECORD: usize = slack(size_of::<(WallClock, Timestamp, Key)>());

/// The charge for a versioned key of `len` bytes: the shared key, and its copy (with its
/// length) in its entry.
pub(crate) fn key_usage(len: usize) -> MemoryUsage {
    MemoryUsage {
        keys: 2 * len + prefix_len(len) + KEY_OVERHEAD,
        ..MemoryUsage::default()
    }
}

/// The charge for a plain item with a `key_len`-byte key and a `value_len`-byte value, and a
/// deadline if it expires: the deadline's bytes in the item and its record in the expiry
/// queue are charged as `intervals` (a plain value's validity, as a version's interval is).
pub(crate) fn plain_usage(key_len: usize, value_len: usize, expires: bool) -> MemoryUsage {
    let deadline = if expires { DEADLINE_BYTES } else { 0 };
    let bytes = STAMP_BYTES + plain_prefix_len(key_len) + key_len + deadline + value_len;
    MemoryUsage {
        values: value_len,
        keys: plain_prefix_len(key_len) + key_len + PLAIN_ITEM_OVERHEAD + spilled_pointer(bytes),
        intervals: deadline,
        ..MemoryUsage::default()
    }
}

/// All a version with a `value_len`-byte value costs but its tags: the value and
/// [`VERSION_OVERHEAD`], with the value's spilled pointer when it has one.
pub(crate) fn version_cost(value_len: usize) -> usize {
    value_len + VERSION_OVERHEAD + spilled_pointer(value_len)
}

/// A slice of this many bytes or more (a plain item, a version's value) keeps its fat pointer
/// in an allocation of its own: its length no longer fits the top 16 bits of a thin pointer
/// (`thin_slice`, on x86-64; elsewhere the pointer is a plain `Box` and this charge errs high).
const THIN_POINTER_LIMIT: usize = 0xffff;

/// What a slice of `bytes` bytes spends on a spilled fat pointer.
fn spilled_pointer(bytes: usize) -> usize {
    if bytes >= THIN_POINTER_LIMIT {
        size_of::<Box<[u8]>>() + ALLOCATION
    } else {
        0
    }
}

/// The charge for a version with a `len`-byte value, its own tag copies included (not the
/// index's registrations).
pub(crate) fn version_usage(version: &Version, len: usize) -> MemoryUsage {
    MemoryUsage {
        values: len,
        intervals: version_cost(len) - len,
        tags: version.tags.as_deref().map_or(0, tag_list_usage),
        ..MemoryUsage::default()
    }
}

/// The charge for a version's own copy of its tags.
pub(crate) fn tag_list_usage(tags: &[InvalidationTag]) -> usize {
    TAG_LIST_OVERHEAD
        + tags
            .iter()
            .map(|t| TAG_OVERHEAD + t.as_str().len())
            .sum::<usize>()
}

/// The most registering `tags` can add to the tag index (every table and bucket new).
pub(crate) fn registration_bound(tags: &[InvalidationTag]) -> usize {
    let per_tag =
        |t: &InvalidationTag| REGISTRATION + INDEX_BUCKET + INDEX_TABLE + t.as_str().len() * 2;
    tags.iter().map(per_tag).sum()
}

/// The entries' own charges (values, keys, versions, their tags) and the gauges, updated
/// together so they never disagree.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub usage: MemoryUsage,
    pub gauges: Gauges,
}

impl Ledger {
    pub fn add_key(&mut self, len: usize) {
        self.usage.add(&key_usage(len));
        self.gauges.keys += 1;
    }

    pub fn remove_key(&mut self, len: usize) {
        self.usage.sub(&key_usage(len));
        self.gauges.keys -= 1;
    }

    pub fn add_plain(&mut self, item: &PlainItem) {
        let (key, deadline, value) = item.parts();
        let expires = deadline.is_some();
        self.usage
            .add(&plain_usage(key.len(), value.len(), expires));
        self.gauges.keys += 1;
        self.gauges.plain_expiring += usize::from(expires);
        self.gauges.value_added(value.len());
    }

    pub fn remove_plain(&mut self, item: &PlainItem) {
        let (key, deadline, value) = item.parts();
        let expires = deadline.is_some();
        self.usage
            .sub(&plain_usage(key.len(), value.len(), expires));
        self.gauges.keys -= 1;
        self.gauges.plain_expiring -= usize::from(expires);
        self.gauges.value_removed(value.len());
    }

    /// Charges `version`, whose value is `value_len` bytes (a version does not know it when
    /// it is an entry's newest: [`crate::entry::Entry::value`]).
    pub fn add_version(&mut self, version: &Version, value_len: usize) {
        self.usage.add(&version_usage(version, value_len));
        self.gauges.value_added(value_len);
        self.gauges.versions += 1;
        self.gauges.open_versions += usize::from(version.is_open());
        self.gauges.open_version_tags += version.tags.as_deref().map_or(0, <[_]>::len);
    }

    /// Discharges what [`Ledger::add_version`] charged.
    pub fn remove_version(&mut self, version: &Version, value_len: usize) {
        self.usage.sub(&version_usage(version, value_len));
        self.gauges.value_removed(value_len);
        self.gauges.versions -= 1;
        self.gauges.open_versions -= usize::from(version.is_open());
        self.gauges.open_version_tags -= version.tags.as_deref().map_or(0, <[_]>::len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prints the constants for docs/store.md: `cargo test -p txcache-store print_constants -- --nocapture`.
    #[test]
    fn print_constants() {
        let constants = [
            ("KEY_OVERHEAD", KEY_OVERHEAD),
            ("VERSION_OVERHEAD", VERSION_OVERHEAD),
            ("PLAIN_ITEM_OVERHEAD", PLAIN_ITEM_OVERHEAD),
            ("TAG_OVERHEAD", TAG_OVERHEAD),
            ("TAG_LIST_OVERHEAD", TAG_LIST_OVERHEAD),
            ("REGISTRATION", REGISTRATION),
            ("INDEX_BUCKET", INDEX_BUCKET),
            ("INDEX_TABLE", INDEX_TABLE),
            ("HISTORY_RECORD", HISTORY_RECORD),
            ("HISTORY_TAG", HISTORY_TAG),
            ("HISTORY_FINE_KEY", HISTORY_FINE_KEY),
            ("HISTORY_TABLE", HISTORY_TABLE),
            ("HISTORY_GLOBAL", HISTORY_GLOBAL),
            ("GHOST_OVERHEAD", GHOST_OVERHEAD),
            ("STALE_RECORD", STALE_RECORD),
            ("EXPIRY_RECORD", EXPIRY_RECORD),
        ];
        for (name, value) in constants {
            println!("{name} = {value}");
            assert!(value > 0);
        }
    }
}

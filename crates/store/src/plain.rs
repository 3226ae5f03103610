//! Plain entries: recency, key, expiry and value in one allocation, held by one word in a
//! bucket.
//!
//! A plain item is one heap allocation (a 3-byte recency stamp, the key's length as LEB128
//! with the expiry flag in its lowest bit, the key, the expiry deadline when it has one, the
//! value; exactly that long) held by an 8-byte thin pointer in its bucket of the plain table.
//! A hit reads the table's control bytes, the bucket, then the item: three dependent cache
//! misses. Positions into a dense list of 16-byte handles (pointer and recency) cost one miss
//! more and 16 bytes per item; those handles in the buckets would have taken 36 bytes per item
//! of table alone at a million items, over the 40 bytes of overhead per item that
//! `docs/node-speed.md` sets as the goal. The stamp rides in the item because a hit reads the
//! item's first cache line anyway, and the deadline for the same reason: an item without one
//! pays nothing for it, and a hit tells whether to read the clock from the prefix's flag bit.

use crate::bucket::{BucketTable, Keyed};
use thin_slice::ThinBoxedSlice;

/// Bytes of an item's recency stamp: three fill the 117-byte item of a 16-byte key and a
/// 100-byte value up to the 120 bytes glibc's 128-byte chunk holds.
pub(crate) const STAMP_BYTES: usize = 3;

/// The stamp's bits as a mask.
const STAMP_MASK: u64 = (1 << (8 * STAMP_BYTES)) - 1;

/// A stamp counts steps of 2^8 ticks of the store's clock (every insert and lookup is a
/// tick): sampling hardly tells uses that close apart (Redis's clock steps by a second), and
/// a stamp spans 2^32 ticks before it wraps around: 4 hours of a shard at 280,000 operations
/// a second, the most measured here, and days at ordinary rates.
const TICKS_PER_STEP_LOG2: u32 = 8;

/// The stamp of a plain item used at tick `clock` of its store's clock.
pub(crate) fn stamp_at(clock: u64) -> u32 {
    ((clock >> TICKS_PER_STEP_LOG2) & STAMP_MASK) as u32
}

/// The tick at which an item stamped `stamp` was last used, to within a step, as seen at tick
/// `now`. The stamp's age is taken modulo its range: an item unused for longer looks younger
/// than it is, and sampled eviction takes it as if at random.
pub(crate) fn recency_of(stamp: u32, now: u64) -> u64 {
    let steps = now >> TICKS_PER_STEP_LOG2;
    let age = steps.wrapping_sub(u64::from(stamp)) & STAMP_MASK;
    (steps - age.min(steps)) << TICKS_PER_STEP_LOG2
}

/// Bytes the LEB128 length prefix of a `len`-byte key takes (1 below 128, 2 below 16384, …).
pub(crate) fn prefix_len(len: usize) -> usize {
    let bits = (usize::BITS - len.leading_zeros()) as usize;
    bits.div_ceil(7).max(1)
}

/// Appends `len` as LEB128: seven bits per byte, low first, the high bit set on all but the
/// last.
fn write_prefix(out: &mut Vec<u8>, mut len: usize) {
    while len >= 0x80 {
        out.push((len & 0x7f) as u8 | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
}

/// `len` as LEB128, as [`write_prefix`] appends it: the bytes, and how many of them are used.
fn leb128(mut len: usize) -> ([u8; 10], usize) {
    let mut bytes = [0; 10];
    let mut used = 0;
    while len >= 0x80 {
        bytes[used] = (len & 0x7f) as u8 | 0x80;
        len >>= 7;
        used += 1;
    }
    bytes[used] = len as u8;
    (bytes, used + 1)
}

/// The length a LEB128 prefix at the start of `bytes` encodes, and the prefix's own length.
fn read_prefix(bytes: &[u8]) -> (usize, usize) {
    let mut len = 0;
    for (i, byte) in bytes.iter().enumerate() {
        len |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (len, i + 1);
        }
    }
    // Only reached for bytes not written by `write_prefix`, which items never hold.
    (0, 0)
}

/// Writes `key`'s length (LEB128), `key` and `value` over `out`, which is exactly
/// [`key_value_len`] bytes long: the layout a versioned entry ([`crate::entry::Entry`]) holds
/// after its head (a plain item holds it after its stamp, an expiry flag in the prefix).
pub(crate) fn put_key_value(out: &mut [u8], key: &[u8], value: &[u8]) {
    let (prefix, used) = leb128(key.len());
    let (head, rest) = out.split_at_mut(used);
    head.copy_from_slice(&prefix[..used]);
    let (key_bytes, value_bytes) = rest.split_at_mut(key.len());
    key_bytes.copy_from_slice(key);
    value_bytes.copy_from_slice(value);
}

/// Bytes [`put_key_value`] writes for `key` and `value`.
pub(crate) fn key_value_len(key: &[u8], value: &[u8]) -> usize {
    prefix_len(key.len()) + key.len() + value.len()
}

/// The key and the value of bytes [`put_key_value`] wrote.
pub(crate) fn split_key_value(bytes: &[u8]) -> (&[u8], &[u8]) {
    let (key_len, prefix) = read_prefix(bytes);
    bytes[prefix..].split_at(key_len)
}

/// Bytes of an expiry deadline (milliseconds since the Unix epoch, little-endian) in an item
/// that has one.
pub(crate) const DEADLINE_BYTES: usize = 8;

/// The prefix of a plain item: the key's length shifted left by one, the low bit telling
/// whether a deadline follows the key.
fn plain_prefix(key_len: usize, has_deadline: bool) -> usize {
    key_len << 1 | usize::from(has_deadline)
}

/// Bytes a plain item's length prefix takes for a `key_len`-byte key (1 below 64, 2 below
/// 8192, …): one bit more than a versioned entry's, for the expiry flag.
pub(crate) fn plain_prefix_len(key_len: usize) -> usize {
    prefix_len(plain_prefix(key_len, true))
}

/// One plain entry: its recency stamp, key, expiry deadline (if any) and value in one
/// allocation.
#[derive(Debug)]
pub(crate) struct PlainItem {
    /// The stamp, the prefix (key length and expiry flag, LEB128), the key, the deadline if
    /// flagged, the value: exactly as long as that, no slack. One word, not a fat pointer's
    /// two: below 65,535 bytes the slice's length rides in the top 16 bits of the pointer,
    /// which x86-64 user-space addresses leave unused (larger items keep their fat pointer in
    /// a small allocation of its own; other architectures keep a `Box`).
    bytes: ThinBoxedSlice<u8>,
}

impl Keyed for PlainItem {
    fn key(&self) -> &[u8] {
        self.parts().0
    }
}

impl PlainItem {
    /// `key` and `value` copied into one allocation of exactly their size plus the stamp and
    /// the prefix; no expiry.
    #[cfg(test)]
    pub fn new(key: &[u8], value: &[u8], stamp: u32) -> Self {
        Self::with_deadline(key, value, stamp, None)
    }

    /// An item that expires at `deadline` (milliseconds since the Unix epoch), or never.
    pub fn with_deadline(key: &[u8], value: &[u8], stamp: u32, deadline: Option<u64>) -> Self {
        let prefix = plain_prefix(key.len(), deadline.is_some());
        let deadline_len = if deadline.is_some() {
            DEADLINE_BYTES
        } else {
            0
        };
        let len = STAMP_BYTES + prefix_len(prefix) + key.len() + deadline_len + value.len();
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(&stamp.to_le_bytes()[..STAMP_BYTES]);
        write_prefix(&mut bytes, prefix);
        bytes.extend_from_slice(key);
        if let Some(deadline) = deadline {
            bytes.extend_from_slice(&deadline.to_le_bytes());
        }
        bytes.extend_from_slice(value);
        PlainItem {
            bytes: bytes.into_boxed_slice().into(),
        }
    }

    /// The key, the deadline and the value.
    pub fn parts(&self) -> (&[u8], Option<u64>, &[u8]) {
        let tail = &self.bytes[STAMP_BYTES..];
        let (prefix, prefix_len) = read_prefix(tail);
        let (key, rest) = tail[prefix_len..].split_at(prefix >> 1);
        if prefix & 1 == 0 {
            return (key, None, rest);
        }
        // Items are written by `with_deadline` alone, so a flagged one holds its 8 bytes.
        match rest.split_first_chunk::<DEADLINE_BYTES>() {
            Some((deadline, value)) => (key, Some(u64::from_le_bytes(*deadline)), value),
            None => (key, None, rest),
        }
    }

    /// The key and the value.
    #[cfg(test)]
    pub fn split(&self) -> (&[u8], &[u8]) {
        let (key, _, value) = self.parts();
        (key, value)
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        self.parts().2
    }

    /// Whether the item has a deadline: the prefix's lowest bit, which is the first prefix
    /// byte's (LEB128 puts the low seven bits first), read without decoding anything.
    pub fn expires(&self) -> bool {
        self.bytes[STAMP_BYTES] & 1 == 1
    }

    /// When the item expires (milliseconds since the Unix epoch); `None` for never.
    pub fn deadline(&self) -> Option<u64> {
        self.parts().1
    }

    /// Moves an existing deadline to `deadline` in place (the item's length stays; an item
    /// without a deadline is rebuilt instead, see `Store::put_plain`).
    pub fn move_deadline(&mut self, deadline: u64) {
        let tail = &self.bytes[STAMP_BYTES..];
        let (prefix, prefix_len) = read_prefix(tail);
        debug_assert!(
            prefix & 1 == 1,
            "moving the deadline of an item without one"
        );
        if prefix & 1 == 1 {
            let at = STAMP_BYTES + prefix_len + (prefix >> 1);
            self.bytes[at..at + DEADLINE_BYTES].copy_from_slice(&deadline.to_le_bytes());
        }
    }

    /// The recency stamp ([`stamp_at`] of its last use).
    pub fn stamp(&self) -> u32 {
        let mut word = [0; 4];
        word[..STAMP_BYTES].copy_from_slice(&self.bytes[..STAMP_BYTES]);
        u32::from_le_bytes(word)
    }

    /// Records a use: the stamp becomes `stamp`.
    pub fn set_stamp(&mut self, stamp: u32) {
        self.bytes[..STAMP_BYTES].copy_from_slice(&stamp.to_le_bytes()[..STAMP_BYTES]);
    }
}

/// Every plain item of a store.
pub(crate) type PlainTable = BucketTable<PlainItem>;

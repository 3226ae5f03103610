//! Plain entries: key and value in one allocation per item.
//!
//! A plain item is its key and value in a single boxed slice (a length prefix, the key, the
//! value) plus a recency stamp. Items live in a [`DenseTable`]: per item one heap allocation,
//! a 16-byte list slot and a 4-byte hash table slot, where a map from shared keys to entries
//! cost three allocations and ~100 bytes of slots.

use crate::dense::{DenseTable, Keyed};
use thin_slice::ThinBoxedSlice;

/// One plain entry: key and value in one allocation, and its recency.
#[derive(Debug)]
pub(crate) struct PlainItem {
    /// The key's length (LEB128), the key, the value: exactly as long as that, no slack. One
    /// word, not a fat pointer's two: below 64 KiB the slice's length rides in the top 16 bits
    /// of the pointer, which x86-64 user-space addresses leave unused (larger items keep their
    /// fat pointer in a small allocation of its own; other architectures keep a `Box`).
    bytes: ThinBoxedSlice<u8>,
    /// Store-local clock of the last `set` or `get`, for eviction.
    pub recency: u64,
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

impl Keyed for PlainItem {
    fn key(&self) -> &[u8] {
        self.split().0
    }
}

impl PlainItem {
    /// `key` and `value` copied into one allocation of exactly their size plus the prefix.
    pub fn new(key: &[u8], value: &[u8], recency: u64) -> Self {
        let mut bytes = Vec::with_capacity(prefix_len(key.len()) + key.len() + value.len());
        write_prefix(&mut bytes, key.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        PlainItem {
            bytes: bytes.into_boxed_slice().into(),
            recency,
        }
    }

    /// The key and the value.
    pub fn split(&self) -> (&[u8], &[u8]) {
        let (key_len, prefix) = read_prefix(&self.bytes);
        self.bytes[prefix..].split_at(key_len)
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        self.split().1
    }
}

/// Every plain item of a store.
pub(crate) type PlainTable = DenseTable<PlainItem>;

//! Plain entries: one allocation per item, found through a hash table of 4-byte indices.
//!
//! A plain item is its key and value in a single boxed slice (a length prefix, the key, the
//! value) plus a recency stamp. Items live in a dense list, so a random index is a random item
//! (eviction samples them in O(1)); the hash table holds only each item's position in that
//! list. Per item that is one heap allocation, a 24-byte list slot and a 4-byte table slot,
//! where a map from shared keys to entries cost three allocations and ~100 bytes of slots.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// One plain entry: key and value in one allocation, and its recency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlainItem {
    /// The key's length (LEB128), the key, the value: exactly as long as that, no slack.
    bytes: Box<[u8]>,
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

impl PlainItem {
    /// `key` and `value` copied into one allocation of exactly their size plus the prefix.
    pub fn new(key: &[u8], value: &[u8], recency: u64) -> Self {
        let mut bytes = Vec::with_capacity(prefix_len(key.len()) + key.len() + value.len());
        write_prefix(&mut bytes, key.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        PlainItem {
            bytes: bytes.into_boxed_slice(),
            recency,
        }
    }

    /// The key and the value.
    pub fn split(&self) -> (&[u8], &[u8]) {
        let (key_len, prefix) = read_prefix(&self.bytes);
        self.bytes[prefix..].split_at(key_len)
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        self.split().0
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        self.split().1
    }
}

/// Every plain item of a store. `items[i]` is found through a table slot holding `i`;
/// removal swaps the last item into the hole and repoints its slot, so the list never has gaps.
#[derive(Debug, Default)]
pub(crate) struct PlainTable {
    items: Vec<PlainItem>,
    /// Positions in `items`, hashed by the item's key.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl PlainTable {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Where `key`'s item is in the dense list.
    pub fn position(&self, key: &[u8]) -> Option<usize> {
        let items = &self.items;
        let found = self
            .index
            .find(self.hash(key), |&i| items[i as usize].key() == key)?;
        Some(*found as usize)
    }

    /// The item at `position`, mutable (its recency; the bytes cannot change in place).
    /// `position` must come from [`PlainTable::position`] with no change since.
    pub fn item_at_mut(&mut self, position: usize) -> &mut PlainItem {
        &mut self.items[position]
    }

    /// The item at `position` of the dense list (a random position is a random item).
    pub fn item_at(&self, position: usize) -> Option<&PlainItem> {
        self.items.get(position)
    }

    /// Adds an item whose key is not in the table.
    pub fn insert_new(&mut self, item: PlainItem) {
        debug_assert!(
            self.position(item.key()).is_none(),
            "insert_new on a present key"
        );
        // A shard would need hundreds of gigabytes to hold 2^32 items.
        let position = u32::try_from(self.items.len()).expect("fewer than 2^32 plain items");
        let hash = self.hash(item.key());
        self.items.push(item);
        let (items, hasher) = (&self.items, &self.hasher);
        self.index.insert_unique(hash, position, |&i| {
            hasher.hash_one(items[i as usize].key())
        });
    }

    /// Removes `key`'s item.
    pub fn remove(&mut self, key: &[u8]) -> Option<PlainItem> {
        let position = self.position(key)?;
        self.remove_at(position)
    }

    /// Removes the item at `position` of the dense list.
    pub fn remove_at(&mut self, position: usize) -> Option<PlainItem> {
        let hash = self.hash(self.items.get(position)?.key());
        let slot = self
            .index
            .find_entry(hash, |&i| i as usize == position)
            .ok()?;
        slot.remove();
        let item = self.items.swap_remove(position);
        if let Some(moved) = self.items.get(position) {
            // The last item filled the hole: its slot still names the old last position.
            let (hash, last) = (self.hash(moved.key()), self.items.len());
            if let Some(slot) = self.index.find_mut(hash, |&i| i as usize == last) {
                *slot = position as u32;
            }
        }
        self.shrink_if_sparse();
        Some(item)
    }

    /// Gives memory back once three quarters of the list's capacity is unused (after mass
    /// deletion or eviction), keeping room for twice the items left.
    fn shrink_if_sparse(&mut self) {
        let len = self.items.len();
        if self.items.capacity() > 64 && len < self.items.capacity() / 4 {
            self.items.shrink_to(2 * len);
            let (items, hasher) = (&self.items, &self.hasher);
            self.index
                .shrink_to(2 * len, |&i| hasher.hash_one(items[i as usize].key()));
        }
    }

    /// Every item, in list order.
    pub fn iter(&self) -> std::slice::Iter<'_, PlainItem> {
        self.items.iter()
    }

    /// Drops every item and frees the table's memory.
    pub fn clear(&mut self) {
        self.items = Vec::new();
        self.index = HashTable::new();
    }

    /// Whether the table and the list agree: one slot per item, each naming its own item.
    pub fn consistent(&self) -> bool {
        self.index.len() == self.items.len()
            && self
                .items
                .iter()
                .enumerate()
                .all(|(i, item)| self.position(item.key()) == Some(i))
    }
}

//! A table of items found by key and kept in one dense list: a random position is a random
//! item, so eviction samples in O(1).
//!
//! The hash table holds only each item's position in the list (4 bytes); the item holds its
//! own key, so nothing is stored twice. Removal swaps the last item into the hole and repoints
//! its slot. Plain items ([`crate::plain::PlainItem`]) live in one: for their 16-byte items it
//! is smaller than keeping them in the buckets ([`crate::bucket::BucketTable`], where
//! versioned keys live), at the cost of one more dependent cache miss per lookup.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// An item that carries its own key.
pub(crate) trait Keyed {
    /// The key the item is found by; it must not change while the item is in a table.
    fn key(&self) -> &[u8];
}

/// Items in a dense list, found by key through a hash table of positions.
#[derive(Debug)]
pub(crate) struct DenseTable<T> {
    items: Vec<T>,
    /// Positions in `items`, hashed by the item's key.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl<T> Default for DenseTable<T> {
    fn default() -> Self {
        DenseTable {
            items: Vec::new(),
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl<T: Keyed> DenseTable<T> {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Where `key`'s item is in the dense list.
    pub fn position(&self, key: &[u8]) -> Option<usize> {
        // Nothing to hash for an empty table: a versioned-only node's plain table, probed by
        // every insert for `WrongType`, and a plain-only node's key table, probed by `SET`.
        if self.items.is_empty() {
            return None;
        }
        let items = &self.items;
        let found = self
            .index
            .find(self.hash(key), |&i| items[i as usize].key() == key)?;
        Some(*found as usize)
    }

    /// The item of `key`, mutable (its key must stay as it is).
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut T> {
        let position = self.position(key)?;
        self.items.get_mut(position)
    }

    /// The item at `position` of the dense list.
    pub fn item_at(&self, position: usize) -> Option<&T> {
        self.items.get(position)
    }

    /// The position the next item pushed onto the list takes.
    fn next_position(&self) -> u32 {
        // A shard would need hundreds of gigabytes to hold 2^32 items.
        u32::try_from(self.items.len()).expect("fewer than 2^32 items")
    }

    /// Adds an item whose key is not in the table.
    pub fn insert_new(&mut self, item: T) {
        debug_assert!(
            self.position(item.key()).is_none(),
            "insert_new on a present key"
        );
        let position = self.next_position();
        let hash = self.hash(item.key());
        self.items.push(item);
        let (items, hasher) = (&self.items, &self.hasher);
        self.index.insert_unique(hash, position, |&i| {
            hasher.hash_one(items[i as usize].key())
        });
    }

    /// Removes `key`'s item.
    pub fn remove(&mut self, key: &[u8]) -> Option<T> {
        let position = self.position(key)?;
        self.remove_at(position)
    }

    /// Removes the item at `position` of the dense list.
    pub fn remove_at(&mut self, position: usize) -> Option<T> {
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
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
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

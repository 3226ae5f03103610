//! The versioned key table: a hash map for lookups plus a dense list of keys for O(1) random
//! sampling. (Plain entries have their own, leaner table: `plain.rs`.)

use crate::entry::{Entry, Key, Version};
use hashbrown::HashMap;

/// Every versioned key of a store. `dense[entry.slot]` is the entry's key; removal swaps the last key
/// into the hole, so the list never has gaps and a random index is a random key.
#[derive(Debug, Default)]
pub(crate) struct KeyTable {
    map: HashMap<Key, Entry>,
    dense: Vec<Key>,
}

impl KeyTable {
    pub fn len(&self) -> usize {
        self.dense.len()
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.map.get(key)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.map.get_mut(key)
    }

    /// The shared key and its entry.
    pub fn get_key_value(&self, key: &[u8]) -> Option<(&Key, &Entry)> {
        self.map.get_key_value(key)
    }

    /// The shared key and its entry, mutable.
    pub fn get_key_value_mut(&mut self, key: &[u8]) -> Option<(&Key, &mut Entry)> {
        self.map.get_key_value_mut(key)
    }

    /// Adds a key that is not in the table.
    pub fn insert_new(&mut self, key: Key, versions: Vec<Version>) {
        let slot = self.dense.len();
        self.dense.push(key.clone());
        let previous = self.map.insert(key, Entry { versions, slot });
        debug_assert!(previous.is_none(), "insert_new on a present key");
    }

    /// Removes a key, returning its shared key and entry.
    pub fn remove(&mut self, key: &[u8]) -> Option<(Key, Entry)> {
        let (key, entry) = self.map.remove_entry(key)?;
        self.dense.swap_remove(entry.slot);
        if let Some(moved) = self.dense.get(entry.slot) {
            if let Some(moved_entry) = self.map.get_mut(moved) {
                moved_entry.slot = entry.slot;
            }
        }
        Some((key, entry))
    }

    /// The key at `index` of the dense list (`index < len()`).
    pub fn key_at(&self, index: usize) -> Option<&Key> {
        self.dense.get(index)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Entry)> {
        self.map.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut Entry)> {
        self.map.iter_mut()
    }

    /// Drops every key and frees the table's memory.
    pub fn clear(&mut self) {
        self.map = HashMap::new();
        self.dense = Vec::new();
    }

    /// Whether `dense` and the entries' slots agree (for the invariant check).
    pub fn slots_consistent(&self) -> bool {
        self.map.len() == self.dense.len()
            && self
                .dense
                .iter()
                .enumerate()
                .all(|(i, key)| self.map.get(key).is_some_and(|e| e.slot == i))
    }
}

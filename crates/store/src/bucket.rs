//! A table of items kept in the hash table's own buckets, found by key with no index in
//! between: a hit reads the control bytes and then the item, one dependent cache miss fewer
//! than positions into a list of items would cost. Versioned keys ([`crate::entry::Entry`])
//! live in one, plain items ([`crate::plain::PlainItem`], one word each) in another.
//!
//! An item's position is its bucket. Positions stay put until an item is added or removed
//! (which may grow or shrink the table); a random position is an item or an empty bucket, and
//! [`BucketTable::occupied_from`] walks on to the next item, so eviction samples in O(1)
//! expected time (shrinking keeps at least one bucket in eight occupied).

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// An item that carries its own key.
pub(crate) trait Keyed {
    /// The key the item is found by; it must not change while the item is in a table.
    fn key(&self) -> &[u8];
}

/// Items in the buckets of a hash table, found by key.
#[derive(Debug)]
pub(crate) struct BucketTable<T> {
    table: HashTable<T>,
    hasher: DefaultHashBuilder,
}

impl<T> Default for BucketTable<T> {
    fn default() -> Self {
        BucketTable {
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

/// `matches`, asked only of an item whose key hashes to `hash`: the table compares just 7
/// bits of the hash before asking, so an item of another key would be taken for one that
/// merely shares them.
fn filed_under<'a, T: Keyed>(
    hasher: &'a DefaultHashBuilder,
    hash: u64,
    mut matches: impl FnMut(&T) -> bool + 'a,
) -> impl FnMut(&T) -> bool + 'a {
    move |item| hasher.hash_one(item.key()) == hash && matches(item)
}

impl<T: Keyed> BucketTable<T> {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Number of positions (buckets), occupied or not: positions run from 0 below it.
    pub fn positions(&self) -> usize {
        self.table.num_buckets()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The bucket of `key`'s item.
    pub fn position(&self, key: &[u8]) -> Option<usize> {
        // Nothing to hash for an empty table: a plain-only node's key table, probed by `SET`,
        // and a versioned-only node's plain table, probed by `TXSET` and lookup misses.
        if self.table.is_empty() {
            return None;
        }
        self.table
            .find_bucket_index(self.hash(key), |item| item.key() == key)
    }

    /// The item of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&T> {
        if self.table.is_empty() {
            return None;
        }
        self.table.find(self.hash(key), |item| item.key() == key)
    }

    /// The item of `key`, mutable (its key must stay as it is).
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut T> {
        if self.table.is_empty() {
            return None;
        }
        let hash = self.hash(key);
        self.table.find_mut(hash, |item| item.key() == key)
    }

    /// The item in bucket `position`; `None` for an empty bucket or one past the end.
    pub fn item_at(&self, position: usize) -> Option<&T> {
        self.table.get_bucket(position)
    }

    /// The item in bucket `position`, mutable (its key must stay as it is).
    pub fn item_at_mut(&mut self, position: usize) -> Option<&mut T> {
        self.table.get_bucket_mut(position)
    }

    /// The first occupied position at or after `start`, wrapping around; `None` when the
    /// table is empty. (An item after a run of empty buckets is found from each of them, so
    /// it is a little more likely to be drawn; runs are short at the loads kept here.)
    pub fn occupied_from(&self, start: usize) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        // A table with an item has buckets.
        let positions = self.positions();
        let start = start % positions;
        (start..positions)
            .chain(0..start)
            .find(|&position| self.table.get_bucket(position).is_some())
    }

    /// Where `key`'s item is, adding `make(state)`'s item (whose key must be `key`) when there
    /// is none; and `state` back, unused, when the key was there (`None`: added). The key is
    /// hashed and looked for once either way.
    pub fn position_or_insert_with<S>(
        &mut self,
        key: &[u8],
        state: S,
        make: impl FnOnce(S) -> T,
    ) -> (usize, Option<S>) {
        let hash = self.hash(key);
        let hasher = &self.hasher;
        let slot = self.table.entry(
            hash,
            |item| item.key() == key,
            |item| hasher.hash_one(item.key()),
        );
        match slot {
            Entry::Occupied(found) => (found.bucket_index(), Some(state)),
            Entry::Vacant(vacant) => {
                let item = make(state);
                debug_assert!(item.key() == key, "made an item of another key");
                (vacant.insert(item).bucket_index(), None)
            }
        }
    }

    /// Adds an item whose key is not in the table.
    pub fn insert_new(&mut self, item: T) {
        debug_assert!(
            self.position(item.key()).is_none(),
            "insert_new on a present key"
        );
        let hash = self.hash(item.key());
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, item, |item| hasher.hash_one(item.key()));
    }

    /// Removes the item in bucket `position`; `None` for an empty bucket or one past the end.
    pub fn remove_at(&mut self, position: usize) -> Option<T> {
        let (item, _) = self.table.get_bucket_entry(position).ok()?.remove();
        self.shrink_if_sparse();
        Some(item)
    }

    /// The hash `key`'s item is filed under; it stays the same for the table's life, so a
    /// record elsewhere may name an item by it instead of keeping the key's bytes.
    pub fn hash_of(&self, key: &[u8]) -> u64 {
        self.hash(key)
    }

    /// Whether an item filed under `hash` satisfies `matches`.
    pub fn any_with_hash(&self, hash: u64, matches: impl FnMut(&T) -> bool) -> bool {
        !self.table.is_empty()
            && self
                .table
                .find(hash, filed_under(&self.hasher, hash, matches))
                .is_some()
    }

    /// Removes an item filed under `hash` that satisfies `matches`.
    pub fn remove_with_hash(&mut self, hash: u64, matches: impl FnMut(&T) -> bool) -> Option<T> {
        if self.table.is_empty() {
            return None;
        }
        let (item, _) = self
            .table
            .find_entry(hash, filed_under(&self.hasher, hash, matches))
            .ok()?
            .remove();
        self.shrink_if_sparse();
        Some(item)
    }

    /// Removes `key`'s item.
    pub fn remove(&mut self, key: &[u8]) -> Option<T> {
        if self.table.is_empty() {
            return None;
        }
        let hash = self.hash(key);
        let (item, _) = self
            .table
            .find_entry(hash, |item| item.key() == key)
            .ok()?
            .remove();
        self.shrink_if_sparse();
        Some(item)
    }

    /// Gives memory back once fewer than one bucket in eight is occupied (after mass deletion
    /// or eviction), keeping room for twice the items left. Keeps eviction's walk from an
    /// empty bucket to the next item short.
    fn shrink_if_sparse(&mut self) {
        let len = self.table.len();
        if self.table.num_buckets() > 64 && len < self.table.num_buckets() / 8 {
            let hasher = &self.hasher;
            self.table
                .shrink_to(2 * len, |item| hasher.hash_one(item.key()));
        }
    }

    /// Every item, in bucket order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.table.iter()
    }

    /// Every item, mutable (their keys must stay as they are).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.table.iter_mut()
    }

    /// Drops every item and frees the table's memory.
    pub fn clear(&mut self) {
        self.table = HashTable::new();
    }

    /// Whether every item is found by its key in its own bucket.
    pub fn consistent(&self) -> bool {
        self.table.iter_buckets().all(|position| {
            self.table
                .get_bucket(position)
                .is_some_and(|item| self.position(item.key()) == Some(position))
        })
    }
}

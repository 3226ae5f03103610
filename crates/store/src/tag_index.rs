//! The tag index: which keys have an open version registered under which tag.
//!
//! A key identifies its open version (a key has at most one), so the index maps tags to keys.
//! Per table it keeps the keys registered under the table's wildcard apart from the keys
//! registered under each `column=value`, so that a fine invalidation finds its matches with
//! two set lookups and a wildcard one walks only its own table.

use crate::entry::Key;
use crate::memory::{INDEX_BUCKET, INDEX_TABLE, REGISTRATION};
use hashbrown::{HashMap, HashSet};
use txcache_model::InvalidationTag;

/// Open versions by tag.
#[derive(Debug, Default)]
pub(crate) struct TagIndex {
    tables: HashMap<Box<str>, TableIndex>,
    /// Accounted bytes of everything below.
    bytes: usize,
}

/// The registrations of one table.
#[derive(Debug, Default)]
pub(crate) struct TableIndex {
    /// Keys registered under the wildcard tag of the table.
    wildcard: HashSet<Key>,
    /// Keys registered under a fine tag, by its `column=value`.
    by_value: HashMap<Box<str>, HashSet<Key>>,
}

impl TableIndex {
    fn is_empty(&self) -> bool {
        self.wildcard.is_empty() && self.by_value.is_empty()
    }

    /// The set a tag of this table registers into, if it exists.
    fn set_mut(&mut self, tag: &InvalidationTag) -> Option<&mut HashSet<Key>> {
        match tag.column_value() {
            None => Some(&mut self.wildcard),
            Some(cv) => self.by_value.get_mut(cv),
        }
    }
}

impl TagIndex {
    /// Accounted bytes of the index.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Registers `key`'s open version under each of `tags`.
    pub fn register(&mut self, key: &Key, tags: &[InvalidationTag]) {
        for tag in tags {
            self.register_one(key, tag);
        }
    }

    fn register_one(&mut self, key: &Key, tag: &InvalidationTag) {
        if !self.tables.contains_key(tag.table()) {
            self.bytes += INDEX_TABLE + tag.table().len();
            self.tables
                .insert(tag.table().into(), TableIndex::default());
        }
        let Some(table) = self.tables.get_mut(tag.table()) else {
            return;
        };
        if let Some(cv) = tag.column_value() {
            if !table.by_value.contains_key(cv) {
                self.bytes += INDEX_BUCKET + cv.len();
                table.by_value.insert(cv.into(), HashSet::new());
            }
        }
        if table
            .set_mut(tag)
            .is_some_and(|set| set.insert(key.clone()))
        {
            self.bytes += REGISTRATION;
        }
    }

    /// Removes `key` from the sets of `tags`, dropping sets and tables that become empty.
    pub fn unregister(&mut self, key: &[u8], tags: &[InvalidationTag]) {
        for tag in tags {
            self.unregister_one(key, tag);
        }
    }

    fn unregister_one(&mut self, key: &[u8], tag: &InvalidationTag) {
        let Some(table) = self.tables.get_mut(tag.table()) else {
            return;
        };
        let Some(set) = table.set_mut(tag) else {
            return;
        };
        if set.remove(key) {
            self.bytes -= REGISTRATION;
        }
        if let Some(cv) = tag.column_value().filter(|_| set.is_empty()) {
            table.by_value.remove(cv);
            self.bytes -= INDEX_BUCKET + cv.len();
        }
        if table.is_empty() {
            self.tables.remove(tag.table());
            self.bytes -= INDEX_TABLE + tag.table().len();
        }
    }

    /// Appends the keys whose open version a commit carrying `tag` may change: for `t:c=v`
    /// the keys registered under `t:c=v` or `t`; for `t`, every key registered under any tag
    /// of `t`. A key may be appended more than once.
    pub fn matching(&self, tag: &InvalidationTag, out: &mut Vec<Key>) {
        let Some(table) = self.tables.get(tag.table()) else {
            return;
        };
        out.extend(table.wildcard.iter().cloned());
        match tag.column_value() {
            Some(cv) => out.extend(table.by_value.get(cv).into_iter().flatten().cloned()),
            None => out.extend(table.by_value.values().flatten().cloned()),
        }
    }

    /// Drops every registration.
    pub fn clear(&mut self) {
        self.tables = HashMap::new();
        self.bytes = 0;
    }

    /// Whether `key` is registered under `tag` (for the invariant check).
    pub fn is_registered(&self, key: &[u8], tag: &InvalidationTag) -> bool {
        let table = self.tables.get(tag.table());
        match tag.column_value() {
            None => table.is_some_and(|t| t.wildcard.contains(key)),
            Some(cv) => table
                .and_then(|t| t.by_value.get(cv))
                .is_some_and(|s| s.contains(key)),
        }
    }

    /// Number of (key, tag) registrations, and the bytes recomputed from scratch (for the
    /// invariant check).
    pub fn recount(&self) -> (usize, usize) {
        let mut registrations = 0;
        let mut bytes = 0;
        for (name, table) in &self.tables {
            bytes += INDEX_TABLE + name.len();
            registrations += table.wildcard.len();
            for (cv, set) in &table.by_value {
                bytes += INDEX_BUCKET + cv.len();
                registrations += set.len();
            }
        }
        (registrations, bytes + registrations * REGISTRATION)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(s: &str) -> InvalidationTag {
        InvalidationTag::parse(s).expect("valid tag")
    }

    fn key(s: &str) -> Key {
        Key::from(s.as_bytes())
    }

    fn matches(index: &TagIndex, t: &str) -> Vec<Key> {
        let mut out = Vec::new();
        index.matching(&tag(t), &mut out);
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn fine_invalidation_finds_fine_and_wildcard_registrations() {
        let mut index = TagIndex::default();
        index.register(&key("a"), &[tag("s.t:id=1")]);
        index.register(&key("b"), &[tag("s.t")]);
        index.register(&key("c"), &[tag("s.t:id=2")]);
        index.register(&key("d"), &[tag("s.u:id=1")]);
        assert_eq!(matches(&index, "s.t:id=1"), vec![key("a"), key("b")]);
        assert_eq!(matches(&index, "s.t"), vec![key("a"), key("b"), key("c")]);
        assert_eq!(matches(&index, "s.v"), Vec::<Key>::new());
    }

    #[test]
    fn unregistering_everything_frees_every_byte() {
        let mut index = TagIndex::default();
        let tags = [tag("s.t:id=1"), tag("s.t"), tag("s.u:name=x")];
        index.register(&key("a"), &tags);
        index.register(&key("b"), &tags[..1]);
        assert_eq!(index.recount().1, index.bytes());
        index.unregister(b"a", &tags);
        assert_eq!(index.recount(), (1, index.bytes()));
        index.unregister(b"b", &tags[..1]);
        assert_eq!((index.bytes(), index.tables.len()), (0, 0));
    }
}

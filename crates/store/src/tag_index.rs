//! The tag index: which keys have an open version registered under which tag.
//!
//! A key identifies its open version (a key has at most one), so the index maps tags to keys.
//! Per table it keeps the keys registered under the table's wildcard apart from the keys
//! registered under each `column=value`, so that a fine invalidation finds its matches with
//! two map lookups and a wildcard one walks only its own table.
//!
//! A tag's *site* is its table and `column=value` (its text without the `#…` columns). A key
//! is registered once per site, with the union of the column sets of its tags there: a
//! version depending on `t#1:id=7` and `t#8:id=7` is changed by a commit on `t:id=7` exactly
//! when the commit's columns meet `1 | 8`. A commit finds only the keys whose set meets its
//! tag's.

use crate::entry::Key;
use crate::memory::{INDEX_BUCKET, INDEX_TABLE, REGISTRATION};
use hashbrown::HashMap;
use txcache_model::{ColumnSet, InvalidationTag};

/// Registered keys, each with the columns it depends on at one site.
type Registrations = HashMap<Key, ColumnSet>;

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
    wildcard: Registrations,
    /// Keys registered under a fine tag, by its `column=value`.
    by_value: HashMap<Box<str>, Registrations>,
}

impl TableIndex {
    fn is_empty(&self) -> bool {
        self.wildcard.is_empty() && self.by_value.is_empty()
    }

    /// The registrations at a tag's site, if they exist.
    fn site(&self, tag: &InvalidationTag) -> Option<&Registrations> {
        match tag.column_value() {
            None => Some(&self.wildcard),
            Some(cv) => self.by_value.get(cv),
        }
    }

    /// The registrations at a tag's site, if they exist, for changing.
    fn site_mut(&mut self, tag: &InvalidationTag) -> Option<&mut Registrations> {
        match tag.column_value() {
            None => Some(&mut self.wildcard),
            Some(cv) => self.by_value.get_mut(cv),
        }
    }
}

/// Appends the keys of `site` whose columns meet `columns`.
fn extend_meeting(out: &mut Vec<Key>, site: &Registrations, columns: ColumnSet) {
    out.extend(
        site.iter()
            .filter(|(_, set)| set.intersects(columns))
            .map(|(key, _)| key.clone()),
    );
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

    /// Registers `key` at `tag`'s site, adding the tag's columns to any set already there.
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
                table.by_value.insert(cv.into(), HashMap::new());
            }
        }
        let Some(site) = table.site_mut(tag) else {
            return;
        };
        match site.get_mut(&key[..]) {
            Some(columns) => *columns = columns.union(tag.columns()),
            None => {
                site.insert(key.clone(), tag.columns());
                self.bytes += REGISTRATION;
            }
        }
    }

    /// Removes `key` from the sites of `tags` (whatever its columns there), dropping sites and
    /// tables that become empty.
    pub fn unregister(&mut self, key: &[u8], tags: &[InvalidationTag]) {
        for tag in tags {
            self.unregister_one(key, tag);
        }
    }

    fn unregister_one(&mut self, key: &[u8], tag: &InvalidationTag) {
        let Some(table) = self.tables.get_mut(tag.table()) else {
            return;
        };
        let Some(site) = table.site_mut(tag) else {
            return;
        };
        if site.remove(key).is_some() {
            self.bytes -= REGISTRATION;
        }
        if let Some(cv) = tag.column_value().filter(|_| site.is_empty()) {
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
    /// of `t`; in both cases only keys whose columns there meet the tag's. A key may be
    /// appended more than once. The global tag `*` is not special here: the store walks every
    /// key for it instead.
    pub fn matching(&self, tag: &InvalidationTag, out: &mut Vec<Key>) {
        let Some(table) = self.tables.get(tag.table()) else {
            return;
        };
        let columns = tag.columns();
        extend_meeting(out, &table.wildcard, columns);
        match tag.column_value() {
            Some(cv) => {
                if let Some(site) = table.by_value.get(cv) {
                    extend_meeting(out, site, columns);
                }
            }
            None => {
                for site in table.by_value.values() {
                    extend_meeting(out, site, columns);
                }
            }
        }
    }

    /// Drops every registration.
    pub fn clear(&mut self) {
        self.tables = HashMap::new();
        self.bytes = 0;
    }

    /// The columns `key` is registered with at `tag`'s site; `None` when it is not registered
    /// there (for the invariant check).
    pub fn registered_columns(&self, key: &[u8], tag: &InvalidationTag) -> Option<ColumnSet> {
        let table = self.tables.get(tag.table())?;
        table.site(tag)?.get(key).copied()
    }

    /// Whether `key` is registered at `tag`'s site, whatever the columns (for the invariant
    /// check).
    pub fn is_registered(&self, key: &[u8], tag: &InvalidationTag) -> bool {
        self.registered_columns(key, tag).is_some()
    }

    /// Number of (key, site) registrations, and the bytes recomputed from scratch (for the
    /// invariant check).
    pub fn recount(&self) -> (usize, usize) {
        let mut registrations = 0;
        let mut bytes = 0;
        for (name, table) in &self.tables {
            bytes += INDEX_TABLE + name.len();
            registrations += table.wildcard.len();
            for (cv, site) in &table.by_value {
                bytes += INDEX_BUCKET + cv.len();
                registrations += site.len();
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

    #[test]
    fn a_commit_finds_only_keys_whose_columns_meet_its_own() {
        let mut index = TagIndex::default();
        index.register(&key("a"), &[tag("s.t#9:id=1")]);
        index.register(&key("b"), &[tag("s.t#20:id=1")]);
        index.register(&key("c"), &[tag("s.t#2")]);
        index.register(&key("d"), &[tag("s.t:id=1")]);
        assert_eq!(matches(&index, "s.t#20:id=1"), vec![key("b"), key("d")]);
        assert_eq!(matches(&index, "s.t#8:id=1"), vec![key("a"), key("d")]);
        assert_eq!(matches(&index, "s.t#40:id=1"), vec![key("d")]);
        assert_eq!(matches(&index, "s.t#2:id=2"), vec![key("c")]);
        // A wildcard commit meets fine registrations by their columns too.
        assert_eq!(
            matches(&index, "s.t#21"),
            vec![key("a"), key("b"), key("d")]
        );
        assert_eq!(
            matches(&index, "s.t"),
            vec![key("a"), key("b"), key("c"), key("d")]
        );
    }

    #[test]
    fn one_site_registered_twice_holds_the_union_of_the_columns() {
        let mut index = TagIndex::default();
        let tags = [tag("s.t#1:id=1"), tag("s.t#8:id=1"), tag("s.t#2")];
        index.register(&key("a"), &tags);
        assert_eq!(index.recount(), (2, index.bytes()));
        assert_eq!(
            index.registered_columns(b"a", &tag("s.t:id=1")),
            Some(ColumnSet::from_bits(9))
        );
        assert!(index.is_registered(b"a", &tag("s.t#40:id=1")));
        assert_eq!(matches(&index, "s.t#8:id=1"), vec![key("a")]);
        assert_eq!(matches(&index, "s.t#4:id=1"), Vec::<Key>::new());
        // Registering again adds columns, never a second registration.
        index.register(&key("a"), &[tag("s.t#4:id=1")]);
        assert_eq!(index.recount(), (2, index.bytes()));
        assert_eq!(matches(&index, "s.t#4:id=1"), vec![key("a")]);
        // Unregistering by any tag of the site removes the key, whatever its columns.
        index.unregister(b"a", &[tag("s.t#40:id=1"), tag("s.t")]);
        assert_eq!((index.bytes(), index.tables.len()), (0, 0));
        index.unregister(b"a", &tags);
        assert_eq!(index.bytes(), 0);
    }
}

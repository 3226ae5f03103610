//! A from-scratch check of the store's invariants, for tests and debugging.

use crate::bucket::Keyed;
use crate::entry::Version;
use crate::memory::Ledger;
use crate::Store;
use txcache_model::{ColumnSet, InvalidationTag};

/// A tag's site: its table and `column=value`, without its columns.
fn site(tag: &InvalidationTag) -> (&str, Option<&str>) {
    (tag.table(), tag.column_value())
}

/// How many sites `tags` name: the index registers a key once per site.
fn sites(tags: &[InvalidationTag]) -> usize {
    tags.iter()
        .map(site)
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// The union of the columns of the tags of `tags` at `tag`'s site: what the index must hold.
fn columns_at(tags: &[InvalidationTag], tag: &InvalidationTag) -> ColumnSet {
    tags.iter()
        .filter(|t| site(t) == site(tag))
        .fold(ColumnSet::from_bits(0), |set, t| set.union(t.columns()))
}

/// Returns `Err(message)` from the enclosing function when `condition` is false.
macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(format!($($message)+));
        }
    };
}

impl Store {
    /// Recomputes the accounting, gauges and index from scratch and checks every structural
    /// invariant: versions sorted and disjoint, only the last open, tags exactly on open
    /// versions and registered in the index (once per site, with the union of the columns its
    /// tags there name), every part's bytes as charged, and the total under the limit. O(everything): for tests and debugging, not for serving.
    pub fn verify_invariants(&self) -> Result<(), String> {
        ensure!(
            self.keys.consistent(),
            "key table: an entry is not found in its own bucket"
        );
        ensure!(
            self.plain.consistent(),
            "plain table: an item is not found in its own bucket"
        );
        let (ledger, registrations) = self.recount_entries()?;
        let (usage, gauges) = (&self.ledger.usage, &self.ledger.gauges);
        ensure!(
            ledger.usage == *usage,
            "charges {usage:?} != recomputed {:?}",
            ledger.usage
        );
        ensure!(
            ledger.gauges == *gauges,
            "gauges {gauges:?} != recomputed {:?}",
            ledger.gauges
        );
        let index = (registrations, self.index.bytes());
        ensure!(
            self.index.recount() == index,
            "tag index {:?} != {index:?}",
            self.index.recount()
        );
        // Read once and released before `memory()` reads it again: no nested read lock.
        let history = {
            let history = self.history.read();
            (history.bytes(), history.recount())
        };
        self.check_expiry_records()?;
        let parts = [
            ("history", history.0, history.1),
            ("ghosts", self.ghosts.bytes(), self.ghosts.recount()),
            ("staleness queue", self.stale.bytes(), self.stale.recount()),
        ];
        for (part, charged, recounted) in parts {
            ensure!(
                charged == recounted,
                "{part}: charged {charged} != recounted {recounted}"
            );
        }
        let (total, limit) = (self.memory().total(), self.config.max_memory);
        ensure!(total <= limit, "accounted {total} > limit {limit}");
        Ok(())
    }

    /// The charges and gauges of every entry, and its number of tag registrations.
    fn recount_entries(&self) -> Result<(Ledger, usize), String> {
        let mut ledger = Ledger::default();
        let mut registrations = 0;
        for item in self.plain.iter() {
            ensure!(
                self.keys.get(item.key()).is_none(),
                "{}: both plain and versioned",
                String::from_utf8_lossy(item.key())
            );
            ledger.add_plain(item);
        }
        for entry in self.keys.iter() {
            let (key, versions) = (entry.shared_key(), entry.versions());
            ledger.add_key(key.len());
            self.check_versions(key, versions)?;
            let newest = versions.len() - 1;
            ensure!(
                *entry.interval(newest) == versions[newest].interval
                    && Keyed::key(entry) == &key[..]
                    && versions[newest].detached_value().is_empty(),
                "{}: the entry's copies of its key or newest interval are stale, or its newest \
                 value is held twice",
                String::from_utf8_lossy(key)
            );
            for (version, value) in entry.with_values() {
                ledger.add_version(version, value.len());
                registrations += version.tags.as_deref().map_or(0, sites);
            }
        }
        Ok((ledger, registrations))
    }

    /// Every plain item with a deadline has a record of it in the expiry queue (or active
    /// expiry and eviction would never find it).
    fn check_expiry_records(&self) -> Result<(), String> {
        let records: std::collections::HashSet<(u64, u64)> = self.expiry.records().collect();
        for item in self.plain.iter() {
            if let Some(deadline) = item.deadline() {
                ensure!(
                    records.contains(&(deadline, self.plain.hash_of(item.key()))),
                    "{}: expires at {deadline} but the expiry queue does not say so",
                    String::from_utf8_lossy(item.key())
                );
            }
        }
        Ok(())
    }

    fn check_versions(&self, key: &[u8], versions: &[Version]) -> Result<(), String> {
        let name = String::from_utf8_lossy(key);
        ensure!(
            !versions.is_empty(),
            "{name}: versioned key without versions"
        );
        for pair in versions.windows(2) {
            ensure!(
                pair[0].stored_hi() <= pair[1].interval.lo(),
                "{name}: versions overlap or are unsorted"
            );
        }
        for (i, version) in versions.iter().enumerate() {
            ensure!(
                !version.is_open() || i + 1 == versions.len(),
                "{name}: open version is not the last"
            );
            ensure!(
                version.is_open() == version.tags.is_some(),
                "{name}: tags on a bounded version, or none on an open one"
            );
            let tags = version.tags.as_deref().unwrap_or_default();
            for tag in tags {
                ensure!(
                    self.index.is_registered(key, tag),
                    "{name}: open version not registered under {tag}"
                );
                let (registered, expected) = (
                    self.index.registered_columns(key, tag),
                    columns_at(tags, tag),
                );
                ensure!(
                    registered == Some(expected),
                    "{name}: registered under {tag} with {registered:?}, its tags there name \
                     {expected:?}"
                );
            }
        }
        Ok(())
    }
}

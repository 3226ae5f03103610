//! Inserts: the final interval from the invalidation history, then extension or
//! nondeterminism against the key's existing versions.

use crate::entry::{succ, Entry, Key, Version};
use crate::memory::Ledger;
use crate::memory::{key_usage, registration_bound, tag_list_usage, version_cost, STALE_RECORD};
use crate::tag_index::TagIndex;
use crate::{Store, StoreError};
use std::ops::Range;
use txcache_model::{InvalidationTag, Timestamp, ValidityInterval};

/// What the caller knows about a value it wants stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsertRequest {
    /// Where the cache reads made while computing the value allow it to be valid (open when
    /// they allow every later timestamp).
    pub interval: ValidityInterval,
    /// The snapshot the value's database queries ran at; `None` when it ran none.
    pub snapshot: Option<Timestamp>,
    /// The tags of those queries (and of cache hits it inherited): the rows it depends on.
    pub tags: Vec<InvalidationTag>,
}

/// What an insert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Stored as a new version with this interval (open: registered for invalidation).
    Inserted(ValidityInterval),
    /// Equal bytes overlapped existing versions; they were merged into one version with this
    /// interval.
    Extended(ValidityInterval),
    /// Different bytes overlapped an existing version: the existing one was kept, this one
    /// dropped, a warning logged and counted.
    Nondeterministic,
    /// The request's interval and the database interval do not meet: nothing was stored.
    EmptyInterval,
}

/// Sorted, without duplicates: the form tags are stored and returned in.
fn normalized(mut tags: Vec<InvalidationTag>) -> Vec<InvalidationTag> {
    tags.sort_unstable();
    tags.dedup();
    tags
}

/// The key as logged: lossy UTF-8 of at most its first 100 bytes.
fn printable(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[..key.len().min(100)]).into_owned()
}

/// The merge of `new` with the overlapping `old` versions (non-empty, equal bytes): their
/// union, open if any was. Its tags are those of the open input with the lowest `lo` (the
/// existing one on a tie): that input alone covers the whole open-ended part, and the bounded
/// inputs cover what lies below it, so truncating by its tags is sound. Like `new`, it has no
/// value of its own yet: the new copy of the bytes serves ([`Entry::replace`]).
fn merged(old: &[Version], new: Version) -> Version {
    let interval = old
        .iter()
        .fold(new.interval, |acc, v| acc.span(&v.interval));
    let tags = old
        .iter()
        .chain([&new])
        .filter(|v| v.is_open())
        .min_by_key(|v| v.interval.lo())
        .and_then(|v| v.tags.clone());
    // The bytes are equal, so the new copy serves (its caller gives it to the entry); the old
    // ones are freed with their versions.
    let mut merged = new;
    merged.interval = interval;
    merged.tags = tags;
    merged
}

/// Whether different bytes than `value` overlap `interval` in `versions`.
fn contradicted(entry: Option<&Entry>, value: &[u8], interval: &ValidityInterval) -> bool {
    entry.is_some_and(|entry| {
        entry
            .overlapping(interval)
            .any(|index| entry.value(index) != value)
    })
}

/// Moves the charges and registrations of `old` versions (removed from their list) to their
/// merge `new`, whose value is `new_value_len` bytes.
fn swap_charges(
    ledger: &mut Ledger,
    index: &mut TagIndex,
    key: &Key,
    old: &[Version],
    (new, new_value_len): (&Version, usize),
) {
    for version in old {
        ledger.remove_version(version, version.detached_value().len());
        if let Some(tags) = &version.tags {
            index.unregister(key, tags);
        }
    }
    ledger.add_version(new, new_value_len);
    if let Some(tags) = &new.tags {
        index.register(key, tags);
    }
}

impl Store {
    /// Stores `value` for `key` with the interval the request and the history allow.
    ///
    /// Refusals, checked in this order, leave the store unchanged: an open interval without a
    /// snapshot ([`StoreError::OpenWithoutSnapshot`]), a plain key ([`StoreError::WrongType`]).
    /// Then an empty final interval gives [`InsertOutcome::EmptyInterval`], a contradiction of
    /// an overlapping version [`InsertOutcome::Nondeterministic`], and an item larger than the
    /// whole limit [`StoreError::TooLarge`]; otherwise the store evicts until the item fits.
    pub fn insert(
        &mut self,
        key: &[u8],
        value: &[u8],
        request: InsertRequest,
    ) -> Result<InsertOutcome, StoreError> {
        let Some(mut interval) = self.admit(key, &request)? else {
            self.stats.empty_inserts += 1;
            return Ok(InsertOutcome::EmptyInterval);
        };
        // The key table's one probe on the common path: its position serves the placement
        // too, unless eviction moved entries since (no other step in between adds or removes
        // an entry).
        let found = self.keys.position(key);
        if contradicted(self.entry_at(found), value, &interval) {
            if self.contradicts_known(key, value, &interval) {
                return Ok(self.nondeterministic(key, &interval));
            }
            interval = self.keep_known_parts(key, value, interval);
        }
        let tags = interval
            .is_open()
            .then(|| normalized(request.tags).into_boxed_slice());
        let evicted = self.reserve(key, value, tags.as_deref().unwrap_or_default())?;
        let version = Version::bare(interval, self.tick(), tags);
        let outcome = self.place(key, found.filter(|_| !evicted), version, value);
        self.maybe_compact_stale();
        Ok(outcome)
    }

    /// The final interval, after the refusals that depend on the request and the key's kind.
    fn admit(
        &self,
        key: &[u8],
        request: &InsertRequest,
    ) -> Result<Option<ValidityInterval>, StoreError> {
        if request.interval.is_open() && request.snapshot.is_none() {
            return Err(StoreError::OpenWithoutSnapshot);
        }
        // "A commit at or before lo never truncates" holds only when lo is at most the
        // snapshot: a commit in (s, lo] would change the value yet be ignored.
        if let Some(snapshot) = request.snapshot.filter(|s| !request.interval.contains(*s)) {
            return Err(StoreError::SnapshotOutsideInterval {
                snapshot,
                interval: request.interval,
            });
        }
        if self.plain.position(key).is_some() {
            return Err(StoreError::WrongType);
        }
        Ok(self.final_interval(request))
    }

    /// The request's interval intersected with the database interval of its snapshot.
    ///
    /// When the database side is open but the cache reads bound the result, the version is
    /// not registered for invalidations, so it may claim only what this node has seen: up to
    /// and including `max(N, lo_db)`.
    fn final_interval(&self, request: &InsertRequest) -> Option<ValidityInterval> {
        let Some(s) = request.snapshot else {
            return Some(request.interval);
        };
        let database = self.database_interval(s, &request.tags)?;
        let combined = request.interval.intersect(&database)?;
        if database.is_open() && !combined.is_open() {
            let known = self.last_applied.max(database.lo()).next();
            return combined.truncated_at(known).ok();
        }
        Some(combined)
    }

    /// Where a value computed at snapshot `s` from the rows named by `tags` is known valid,
    /// from the invalidation history alone (the database interval an insert intersects with
    /// its request's interval; nothing is stored):
    /// - `s > N`: `[s, ∞)` (commits in `(N, s]` are unknown but visible in `s`);
    /// - no history yet, or `s < H`: `[s, s + 1)`;
    /// - otherwise `[max(H, latest commit ≤ s matching tags), first commit in (s, N] matching
    ///   tags)`, open when there is none. A global commit (tag `*`) matches every tag set,
    ///   the empty one too: without tags only global commits bound it (`[H, ∞)` without any).
    ///   Past a long run of commits whose columns miss the tags', the history answers with
    ///   the nearest commit instead: a shorter interval, never a longer one.
    ///
    /// An open result is valid through `N` as far as this node can vouch now
    /// ([`Store::effective`]). `None` only when `s` is `u64::MAX` (never a wire timestamp).
    pub fn database_interval(
        &self,
        s: Timestamp,
        tags: &[InvalidationTag],
    ) -> Option<ValidityInterval> {
        if s > self.last_applied {
            // Commits in (N, s] are unknown but visible in s: valid from s until one after s.
            return Some(ValidityInterval::open(s));
        }
        let history = self.history.read();
        match history.horizon() {
            Some(horizon) if s >= horizon => {
                let lo = history
                    .latest_matching(tags, s)
                    .map_or(horizon, |c| c.max(horizon));
                ValidityInterval::new(lo, history.first_matching_after(tags, s)).ok()
            }
            // Commits around s are unknown: valid at s alone.
            _ => ValidityInterval::bounded(s, succ(s)).ok(),
        }
    }

    /// What this node can vouch for of `interval`: an open interval only through `N`.
    fn known(&self, interval: &ValidityInterval) -> Option<ValidityInterval> {
        if !interval.is_open() {
            return Some(*interval);
        }
        let hi = self.last_applied.max(interval.lo()).next();
        ValidityInterval::bounded(interval.lo(), hi).ok()
    }

    /// Whether different bytes overlap `interval` where this node knows both to hold: a
    /// real contradiction, not one in the part of the stream it has not seen yet.
    fn contradicts_known(&self, key: &[u8], value: &[u8], interval: &ValidityInterval) -> bool {
        let Some(new) = self.known(interval) else {
            return false;
        };
        let Some(entry) = self.entry(key) else {
            return false;
        };
        entry.with_values().any(|(v, stored)| {
            stored != value && self.known(&v.interval).is_some_and(|k| k.overlaps(&new))
        })
    }

    /// Different bytes meet only beyond `N`: the two values prove a commit there that this
    /// node has not applied yet. Each open side keeps what is known of it — the stored
    /// version and the new one end at `max(N, lo) + 1` — which is sound whatever that commit
    /// turns out to be. Returns the new version's interval.
    fn keep_known_parts(
        &mut self,
        key: &[u8],
        value: &[u8],
        interval: ValidityInterval,
    ) -> ValidityInterval {
        let conflicting_open = self.entry(key).is_some_and(|entry| {
            entry.newest().is_some_and(|index| {
                let version = &entry.versions()[index];
                version.is_open()
                    && entry.value(index) != value
                    && version.interval.overlaps(&interval)
            })
        });
        if conflicting_open {
            self.bound_last_version(key);
        }
        if contradicted(self.entry(key), value, &interval) {
            return self.known(&interval).unwrap_or(interval);
        }
        interval
    }

    /// Bounds `key`'s last version (open) at `max(N, lo) + 1`, out of the tag index; the
    /// first commit at or after that end is beyond `N`, so its time is not known yet.
    fn bound_last_version(&mut self, key: &[u8]) {
        let n = self.last_applied;
        self.close_open_version(key, |lo| succ(n.max(lo)), None);
    }

    /// Counts and logs a contradicted insert.
    fn nondeterministic(&mut self, key: &[u8], interval: &ValidityInterval) -> InsertOutcome {
        self.stats.nondeterminism_warnings += 1;
        tracing::warn!(
            key = %printable(key), %interval,
            "nondeterministic insert: different bytes overlap a stored version; kept the stored one"
        );
        InsertOutcome::Nondeterministic
    }

    /// Refuses an item that could never fit; otherwise evicts until it fits as if it were new
    /// (merging never costs more), and says whether it evicted anything. Eviction may take
    /// versions of this very key, so the placement is decided only afterwards.
    fn reserve(
        &mut self,
        key: &[u8],
        value: &[u8],
        tags: &[InvalidationTag],
    ) -> Result<bool, StoreError> {
        let tag_bytes = tag_list_usage(tags) + registration_bound(tags);
        let record = STALE_RECORD + key.len();
        let size = key_usage(key.len()).total() + version_cost(value.len()) + tag_bytes + record;
        if size > self.config.max_memory {
            let limit = self.config.max_memory;
            return Err(StoreError::TooLarge { size, limit });
        }
        Ok(self.make_room(size))
    }

    /// `key`'s entry; `None` for an absent or plain key.
    fn entry(&self, key: &[u8]) -> Option<&Entry> {
        self.entry_at(self.keys.position(key))
    }

    /// The entry at `position` of the key table; `None` for none.
    fn entry_at(&self, position: Option<usize>) -> Option<&Entry> {
        position.and_then(|p| self.keys.item_at(p))
    }

    /// Inserts or merges the version holding `value` (no contradiction exists) into `key`'s
    /// entry: at `found` when that position is still known to be the entry's, else found by
    /// one probe, which makes a new key's entry with the version in it. The rest works on the
    /// entry at that position.
    fn place(
        &mut self,
        key: &[u8],
        found: Option<usize>,
        version: Version,
        value: &[u8],
    ) -> InsertOutcome {
        let interval = version.interval;
        let (position, version) = match found {
            Some(position) => (position, version),
            None => match self.entry_position(key, version, value) {
                (position, Some(version)) => (position, version),
                (position, None) => {
                    self.stats.inserts += 1;
                    self.account_version(position, 0, value.len());
                    return InsertOutcome::Inserted(interval);
                }
            },
        };
        debug_assert_eq!(self.keys.position(key), Some(position), "a moved entry");
        let range = self
            .entry_at(Some(position))
            .map_or(0..0, |entry| entry.overlapping(&interval));
        if range.is_empty() {
            self.stats.inserts += 1;
            if let Some(entry) = self.keys.item_at_mut(position) {
                entry.insert(range.start, version, value);
                self.account_version(position, range.start, value.len());
            }
            InsertOutcome::Inserted(interval)
        } else {
            self.stats.extensions += 1;
            InsertOutcome::Extended(self.extend(position, range, version, value))
        }
    }

    /// Where `key`'s entry is in the key table, and `version` back; or, when the key has none,
    /// a new entry (charged) holding `version` with `value`, and `None`. Taken only after
    /// eviction, or for a key that had no entry: evicting a key's last version removes its
    /// entry, which moves another entry into its place.
    fn entry_position(
        &mut self,
        key: &[u8],
        version: Version,
        value: &[u8],
    ) -> (usize, Option<Version>) {
        let made = self.keys.position_or_insert_with(key, version, |version| {
            Entry::with_version(key, version, value)
        });
        if made.1.is_none() {
            self.ledger.add_key(key.len());
        }
        made
    }

    /// Charges and registers the version at `index` of the entry at `position` (just added,
    /// its value `value_len` bytes) and queues its staleness record.
    fn account_version(&mut self, position: usize, index: usize, value_len: usize) {
        let Some(entry) = self.keys.item_at(position) else {
            return;
        };
        let (key, version) = (entry.shared_key(), &entry.versions()[index]);
        swap_charges(
            &mut self.ledger,
            &mut self.index,
            key,
            &[],
            (version, value_len),
        );
        if let Some(hi) = version.interval.hi() {
            self.stale
                .push(key, hi, self.history.read().commit_time_from(hi));
        }
    }

    /// Replaces the versions in `range` of the entry at `position` (equal bytes, overlapping
    /// `new`, which holds `value`) by their merge with `new`; returns the merged interval.
    fn extend(
        &mut self,
        position: usize,
        range: Range<usize>,
        new: Version,
        value: &[u8],
    ) -> ValidityInterval {
        let Some(entry) = self.keys.item_at_mut(position) else {
            return new.interval;
        };
        let start = range.start;
        let merged = merged(&entry.versions()[range.clone()], new);
        let old = entry.replace(range, merged, value);
        let merged = (&entry.versions()[start], entry.value(start).len());
        let key = entry.shared_key();
        swap_charges(&mut self.ledger, &mut self.index, key, &old, merged);
        let interval = merged.0.interval;
        // A new upper end needs its own staleness record; an old one already has one.
        if let Some(hi) = interval
            .hi()
            .filter(|hi| old.iter().all(|v| v.interval.hi() != Some(*hi)))
        {
            self.stale
                .push(key, hi, self.history.read().commit_time_from(hi));
        }
        interval
    }
}

//! An obviously-correct reference model of the store's contract: per key a plain list of
//! versions, the whole invalidation history in a `Vec`, every computation a linear scan.
//! No index, no eviction, no staleness removal, no ghosts.

#![allow(dead_code)]

use bytes::Bytes;
use std::collections::BTreeMap;
use txcache_model::{Invalidation, InvalidationTag, Timestamp, ValidityInterval, WallClock};
use txcache_store::{Hit, InsertOutcome, InsertRequest, Lookup, MissKind, StoreError};

/// One version, as the contract describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub value: Bytes,
    pub lo: Timestamp,
    pub hi: Option<Timestamp>,
    pub tags: Vec<InvalidationTag>,
}

#[derive(Clone, Debug)]
pub enum Entry {
    Plain(Bytes),
    Versioned(Vec<Version>),
}

/// One applied commit.
#[derive(Clone, Debug)]
pub struct Commit {
    pub ts: Timestamp,
    pub time: WallClock,
    pub tags: Vec<InvalidationTag>,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub n: Timestamp,
    pub h: Option<Timestamp>,
    /// Commits since the last reset: what the node may use.
    pub history: Vec<Commit>,
    /// Every applied commit ever: the truth about commit times.
    pub all_commits: Vec<Commit>,
    pub wall: WallClock,
    pub keys: BTreeMap<Vec<u8>, Entry>,
}

fn succ(t: Timestamp) -> Timestamp {
    Timestamp(t.0 + 1)
}

fn matches_any(a: &[InvalidationTag], b: &[InvalidationTag]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.matches(y)))
}

/// Whether a commit carrying `commit` may change a value depending on `tags`: a global commit
/// (tag `*`) may change anything, even a value that depends on no tag.
fn commit_matches(commit: &[InvalidationTag], tags: &[InvalidationTag]) -> bool {
    commit.iter().any(InvalidationTag::is_global) || matches_any(commit, tags)
}

/// What the node can vouch for of a version: an open one only through `n`.
fn known(v: &Version, n: Timestamp) -> (Timestamp, Timestamp) {
    (v.lo, v.hi.unwrap_or(Timestamp(n.0.max(v.lo.0) + 1)))
}

/// The effective `[lo, hi)` of a version given `N`.
pub fn effective(v: &Version, n: Timestamp) -> (Timestamp, Timestamp) {
    (v.lo, v.hi.unwrap_or(succ(n.max(v.lo))))
}

fn stored_hi(v: &Version) -> u64 {
    v.hi.map_or(u64::MAX, |h| h.0)
}

fn overlaps(v: &Version, lo: Timestamp, hi: Option<Timestamp>) -> bool {
    v.lo.0 < hi.map_or(u64::MAX, |h| h.0) && lo.0 < stored_hi(v)
}

impl Model {
    /// The database interval of a value computed at `s` from `tags`.
    pub fn database_interval(
        &self,
        s: Timestamp,
        tags: &[InvalidationTag],
    ) -> Option<ValidityInterval> {
        if s > self.n {
            return Some(ValidityInterval::open(s));
        }
        let Some(h) = self.h.filter(|h| s >= *h) else {
            return ValidityInterval::bounded(s, succ(s)).ok();
        };
        let matching = |c: &&Commit| commit_matches(&c.tags, tags);
        let lo = self
            .history
            .iter()
            .filter(matching)
            .filter(|c| c.ts <= s)
            .map(|c| c.ts)
            .max();
        let hi = self
            .history
            .iter()
            .filter(matching)
            .filter(|c| c.ts > s)
            .map(|c| c.ts)
            .min();
        ValidityInterval::new(lo.map_or(h, |l| l.max(h)), hi).ok()
    }

    pub fn final_interval(&self, request: &InsertRequest) -> Option<ValidityInterval> {
        let Some(s) = request.snapshot else {
            return Some(request.interval);
        };
        let database = self.database_interval(s, &request.tags)?;
        let combined = request.interval.intersect(&database)?;
        if database.is_open() && !combined.is_open() {
            // Not registered: only what the node has seen, through max(N, lo_db).
            let known = Timestamp(self.n.max(database.lo()).0 + 1);
            return combined.truncated_at(known).ok();
        }
        Some(combined)
    }

    pub fn insert(
        &mut self,
        key: &[u8],
        value: Bytes,
        request: InsertRequest,
    ) -> Result<InsertOutcome, StoreError> {
        if request.interval.is_open() && request.snapshot.is_none() {
            return Err(StoreError::OpenWithoutSnapshot);
        }
        if let Some(snapshot) = request.snapshot.filter(|s| !request.interval.contains(*s)) {
            return Err(StoreError::SnapshotOutsideInterval {
                snapshot,
                interval: request.interval,
            });
        }
        if matches!(self.keys.get(key), Some(Entry::Plain(_))) {
            return Err(StoreError::WrongType);
        }
        let Some(interval) = self.final_interval(&request) else {
            return Ok(InsertOutcome::EmptyInterval);
        };
        let mut tags = if interval.is_open() {
            request.tags
        } else {
            Vec::new()
        };
        tags.sort();
        tags.dedup();
        let mut new = Version {
            value,
            lo: interval.lo(),
            hi: interval.hi(),
            tags,
        };
        let n = self.n;
        let Entry::Versioned(versions) = self
            .keys
            .entry(key.to_vec())
            .or_insert(Entry::Versioned(Vec::new()))
        else {
            unreachable!("checked above");
        };
        let differs =
            |v: &Version, new: &Version| v.value != new.value && overlaps(v, new.lo, new.hi);
        if versions.iter().any(|v| differs(v, &new)) {
            // A contradiction only where the node knows both values to hold (open ones
            // through N); beyond N both open sides keep just what is known.
            let (new_lo, new_known_hi) = known(&new, n);
            if versions.iter().any(|v| {
                let (lo, hi) = known(v, n);
                v.value != new.value && lo < new_known_hi && new_lo < hi
            }) {
                return Ok(InsertOutcome::Nondeterministic);
            }
            for v in versions.iter_mut() {
                if v.hi.is_none() && differs(v, &new) {
                    v.hi = Some(known(v, n).1);
                    v.tags.clear();
                }
            }
            if versions.iter().any(|v| differs(v, &new)) && new.hi.is_none() {
                new.hi = Some(new_known_hi);
                new.tags.clear();
            }
        }
        let (overlapping, rest): (Vec<Version>, Vec<Version>) = versions
            .drain(..)
            .partition(|v| overlaps(v, new.lo, new.hi));
        *versions = rest;
        let outcome = if overlapping.is_empty() {
            let stored = ValidityInterval::new(new.lo, new.hi).expect("non-empty");
            versions.push(new);
            InsertOutcome::Inserted(stored)
        } else {
            let merged = merge(overlapping, new);
            let span = ValidityInterval::new(merged.lo, merged.hi).expect("non-empty");
            versions.push(merged);
            InsertOutcome::Extended(span)
        };
        versions.sort_by_key(|v| v.lo);
        Ok(outcome)
    }

    pub fn lookup(
        &self,
        key: &[u8],
        lo: Timestamp,
        hi: Timestamp,
        with_tags: bool,
    ) -> Result<Lookup, StoreError> {
        let versions = match self.keys.get(key) {
            Some(Entry::Plain(_)) => return Err(StoreError::WrongType),
            Some(Entry::Versioned(v)) => v.as_slice(),
            None => &[],
        };
        let intersecting = versions.iter().filter(|v| {
            let (elo, ehi) = effective(v, self.n);
            elo <= hi && ehi > lo
        });
        if let Some(v) = intersecting.max_by_key(|v| v.lo) {
            let (elo, ehi) = effective(v, self.n);
            let open = v.hi.is_none();
            return Ok(Lookup::Hit(Hit {
                value: v.value.clone(),
                interval: ValidityInterval::bounded(elo, ehi).expect("non-empty"),
                open,
                tags: (open && with_tags).then(|| v.tags.clone()),
            }));
        }
        Ok(Lookup::Miss(if versions.is_empty() {
            MissKind::Compulsory
        } else if versions.iter().any(|v| effective(v, self.n).1 > lo) {
            MissKind::Consistency
        } else {
            MissKind::Staleness
        }))
    }

    pub fn invalidate(&mut self, inv: &Invalidation) -> bool {
        if inv.ts <= self.n {
            return false;
        }
        for entry in self.keys.values_mut() {
            let Entry::Versioned(versions) = entry else {
                continue;
            };
            for v in versions.iter_mut() {
                if v.hi.is_none() && v.lo < inv.ts && commit_matches(&inv.tags, &v.tags) {
                    v.hi = Some(inv.ts);
                    v.tags.clear();
                }
            }
        }
        let commit = Commit {
            ts: inv.ts,
            time: inv.commit_time,
            tags: inv.tags.clone(),
        };
        self.history.push(commit.clone());
        self.all_commits.push(commit);
        self.n = inv.ts;
        self.h.get_or_insert(inv.ts);
        self.wall = self.wall.max(inv.commit_time);
        true
    }

    pub fn heartbeat(&mut self, ts: Timestamp, time: WallClock) -> bool {
        self.wall = self.wall.max(time);
        if ts <= self.n {
            return false;
        }
        self.n = ts;
        self.h.get_or_insert(ts);
        true
    }

    pub fn reset(&mut self, ts: Timestamp, time: WallClock) {
        let n = self.n;
        for entry in self.keys.values_mut() {
            let Entry::Versioned(versions) = entry else {
                continue;
            };
            for v in versions.iter_mut().filter(|v| v.hi.is_none()) {
                v.hi = Some(succ(n.max(v.lo)));
                v.tags.clear();
            }
        }
        self.history.clear();
        self.n = n.max(ts);
        self.h = Some(self.n);
        self.wall = self.wall.max(time);
    }

    pub fn set(&mut self, key: &[u8], value: Bytes) {
        self.keys.insert(key.to_vec(), Entry::Plain(value));
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        match self.keys.get(key) {
            Some(Entry::Plain(v)) => Ok(Some(v.clone())),
            Some(Entry::Versioned(_)) => Err(StoreError::WrongType),
            None => Ok(None),
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.keys.remove(key).is_some()
    }

    /// The commit time of the first commit at or after `ts`, if one happened.
    pub fn first_commit_time_from(&self, ts: Timestamp) -> Option<WallClock> {
        self.all_commits.iter().find(|c| c.ts >= ts).map(|c| c.time)
    }

    /// The latest commit older than the staleness cutoff: versions ending at or before it may
    /// have been removed, and readers are never older than it.
    pub fn stale_frontier(&self, max_staleness: u64) -> Timestamp {
        let cutoff = self.wall.minus_micros(max_staleness);
        self.all_commits
            .iter()
            .filter(|c| c.time < cutoff)
            .map(|c| c.ts)
            .max()
            .unwrap_or_default()
    }
}

/// The merge of equal-bytes versions: their union, open if any was, with the tags of the open
/// one with the lowest lo (the existing one on a tie).
fn merge(existing: Vec<Version>, new: Version) -> Version {
    let lo = existing
        .iter()
        .map(|v| v.lo)
        .chain([new.lo])
        .min()
        .expect("non-empty");
    let all: Vec<&Version> = existing.iter().chain([&new]).collect();
    let hi = match all.iter().any(|v| v.hi.is_none()) {
        true => None,
        false => all.iter().filter_map(|v| v.hi).max(),
    };
    let tags = all
        .iter()
        .filter(|v| v.hi.is_none())
        .min_by_key(|v| v.lo)
        .map(|v| v.tags.clone())
        .unwrap_or_default();
    Version {
        value: existing[0].value.clone(),
        lo,
        hi,
        tags,
    }
}

/// Every value-interval claim a store accepted, each truncated by its own tags only: the
/// ground truth a store's hits must be covered by.
#[derive(Clone, Debug, Default)]
pub struct Claims {
    pub list: Vec<(Vec<u8>, Version)>,
}

impl Claims {
    pub fn add(
        &mut self,
        key: &[u8],
        value: Bytes,
        interval: ValidityInterval,
        mut tags: Vec<InvalidationTag>,
    ) {
        if !interval.is_open() {
            tags.clear();
        }
        self.list.push((
            key.to_vec(),
            Version {
                value,
                lo: interval.lo(),
                hi: interval.hi(),
                tags,
            },
        ));
    }

    pub fn invalidate(&mut self, inv: &Invalidation) {
        for (_, v) in &mut self.list {
            if v.hi.is_none() && v.lo < inv.ts && commit_matches(&inv.tags, &v.tags) {
                v.hi = Some(inv.ts);
            }
        }
    }

    pub fn reset(&mut self, n: Timestamp) {
        for (_, v) in self.list.iter_mut().filter(|(_, v)| v.hi.is_none()) {
            v.hi = Some(succ(n.max(v.lo)));
        }
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.list.retain(|(k, _)| k != key);
    }

    /// Whether claims of `key` with bytes `value` together cover `interval` at `N = n`.
    pub fn cover(
        &self,
        key: &[u8],
        value: &Bytes,
        interval: &ValidityInterval,
        n: Timestamp,
    ) -> bool {
        let mut pieces: Vec<(Timestamp, Timestamp)> = self
            .list
            .iter()
            .filter(|(k, v)| k == key && v.value == *value)
            .map(|(_, v)| effective(v, n))
            .collect();
        pieces.sort();
        let (mut reached, end) = (interval.lo(), interval.hi().expect("hits are bounded"));
        for (lo, hi) in pieces {
            if lo <= reached && hi > reached {
                reached = hi;
            }
        }
        reached >= end
    }
}

//! The invalidation stream: invalidations, heartbeats and resets, and the housekeeping that
//! follows each (history trimming, stale removal, eviction down to the limit).

use crate::entry::{Entry, Key, KeyTable};
use crate::ghost::GhostReason;
use crate::Store;
use txcache_model::{Invalidation, InvalidationTag, Timestamp, ValidityInterval, WallClock};

/// Whether `key` has a bounded version ending at `hi`; its index if so.
fn bounded_version(keys: &KeyTable, key: &[u8], hi: Timestamp) -> Option<usize> {
    let versions = keys.get(key)?.versions();
    let index = versions.partition_point(|v| v.stored_hi() < hi);
    versions
        .get(index)
        .filter(|v| v.interval.hi() == Some(hi))
        .map(|_| index)
}

/// Every key whose newest version is open, tagged or not: what a global commit bounds. An
/// open version with no tags has no registration in the tag index, so only a walk finds it.
fn open_keys(keys: &KeyTable, out: &mut Vec<Key>) {
    let open = |entry: &&Entry| entry.newest().is_some_and(|i| entry.interval(i).is_open());
    out.extend(
        keys.iter()
            .filter(open)
            .map(|entry| entry.shared_key().clone()),
    );
}

impl Store {
    /// Applies one committed write transaction: bounds at `ts` every open version one of its
    /// tags matches — every open version at all when it carries the global tag `*`
    /// ([`InvalidationTag::global`]) — unless the version starts at or after `ts` (a commit
    /// at or before an entry's `lo` never truncates it), records it in the history and
    /// advances `N`. Returns false, changing nothing, when `ts` is not after `N` (a duplicate).
    pub fn invalidate(&mut self, invalidation: &Invalidation) -> bool {
        let Invalidation {
            ts, commit_time, ..
        } = *invalidation;
        if ts <= self.last_applied {
            self.stats.invalidations_duplicate += 1;
            return false;
        }
        let matched = self.matched_keys(&invalidation.tags);
        for key in &matched {
            self.truncate_open(key, ts, commit_time);
        }
        self.history.write().record(invalidation);
        self.last_applied = ts;
        self.latest_commit_time = self.latest_commit_time.max(commit_time);
        self.stale.resolve(ts, commit_time);
        self.stats.invalidations_applied += 1;
        self.housekeeping();
        true
    }

    /// The keys whose open version a commit carrying `tags` may change (a key may repeat).
    /// A global commit walks every key: it is rare (DDL whose dependents cannot be known), so
    /// the walk costs less than an index of the untagged open versions would on every insert.
    fn matched_keys(&self, tags: &[InvalidationTag]) -> Vec<Key> {
        let mut matched = Vec::new();
        if tags.iter().any(InvalidationTag::is_global) {
            open_keys(&self.keys, &mut matched);
            return matched;
        }
        for tag in tags {
            self.index.matching(tag, &mut matched);
        }
        matched
    }

    /// Bounds `key`'s open version at `ts` (a commit at `commit_time`), if it starts before.
    fn truncate_open(&mut self, key: &Key, ts: Timestamp, commit_time: WallClock) {
        if self.close_open_version(key, |_| ts, Some(commit_time)) {
            self.stats.versions_truncated += 1;
        }
    }

    /// Bounds `key`'s open version at `hi(lo)` and takes it out of the tag index; the first
    /// commit at or after that end is at `commit_time`, when known. False when the key has
    /// no open version, or it starts at or after that end (the commit is visible in its own
    /// snapshot).
    pub(crate) fn close_open_version(
        &mut self,
        key: &[u8],
        hi: impl FnOnce(Timestamp) -> Timestamp,
        commit_time: Option<WallClock>,
    ) -> bool {
        let newest = self.keys.get_mut(key).and_then(|entry| entry.newest_mut());
        let Some(newest) = newest.filter(|newest| newest.version.is_open()) else {
            return false;
        };
        let (shared, value_len, version) = (newest.key, newest.value_len, &mut *newest.version);
        let end = hi(version.interval.lo());
        let Ok(bounded) = ValidityInterval::bounded(version.interval.lo(), end) else {
            return false;
        };
        self.ledger.remove_version(version, value_len);
        version.interval = bounded;
        let tags = version.tags.take();
        self.ledger.add_version(version, value_len);
        if let Some(tags) = tags {
            self.index.unregister(key, &tags);
        }
        self.stale.push(shared, end, commit_time);
        true
    }

    /// Says nothing committed up to `ts` beyond what was sent: advances `N` when `ts` is after
    /// it (returning whether it did). The commit time advances the clock either way.
    pub fn heartbeat(&mut self, ts: Timestamp, commit_time: WallClock) -> bool {
        let advanced = ts > self.last_applied;
        if advanced {
            self.last_applied = ts;
            self.history.write().start(ts);
            self.stats.heartbeats += 1;
        }
        self.latest_commit_time = self.latest_commit_time.max(commit_time);
        self.housekeeping();
        advanced
    }

    /// The stream had a gap the agent cannot replay: every open version `[lo, ∞)` becomes
    /// `[lo, max(N, lo) + 1)` (valid through the old `N`, never beyond) and leaves the tag
    /// index; the history is forgotten; `N` becomes `max(N, ts)` and `H` the new `N`.
    pub fn reset(&mut self, ts: Timestamp, commit_time: WallClock) {
        self.bound_open_versions();
        self.index.clear();
        self.last_applied = self.last_applied.max(ts);
        self.history.write().reset(self.last_applied);
        self.latest_commit_time = self.latest_commit_time.max(commit_time);
        self.stats.resets += 1;
        self.housekeeping();
    }

    /// The database's positions went back below `N` (a restored backup, or a failed-over
    /// primary behind this one): positions after `ts` may name other commits now, so no
    /// interval measured in the old positions can be trusted. Every versioned key is dropped
    /// (plain values carry no database time and stay), ghosts and the history are forgotten,
    /// and `N` and `H` become `ts` — lower than `N`, unlike [`Store::reset`]. A `ts` at or
    /// past `N` changes nothing: it cannot be a rewind (another agent may have moved `N` on
    /// since this one looked), and dropping entries there would leave a gap in the history.
    pub fn rewind(&mut self, ts: Timestamp, commit_time: WallClock) {
        if ts >= self.last_applied {
            return;
        }
        // The key table holds only versioned keys; plain items live in their own table.
        let versioned: Vec<Key> = self.keys.iter().map(|e| e.shared_key().clone()).collect();
        for key in &versioned {
            self.drop_entry(key);
        }
        self.ghosts.clear();
        self.stale.clear();
        self.last_applied = ts;
        self.history.write().reset(ts);
        self.latest_commit_time = self.latest_commit_time.max(commit_time);
        self.stats.rewinds += 1;
        self.housekeeping();
    }

    /// Bounds every open version at `max(N, lo) + 1`.
    fn bound_open_versions(&mut self) {
        let n = self.last_applied;
        let mut unboundable = Vec::new();
        for entry in self.keys.iter_mut() {
            let Some(newest) = entry.newest_mut().filter(|newest| newest.version.is_open()) else {
                continue;
            };
            let (key, index, value_len) = (newest.key, newest.index, newest.value_len);
            let version = &mut *newest.version;
            let (lo, hi) = version.effective(n);
            let Ok(bounded) = ValidityInterval::bounded(lo, hi) else {
                // Only at lo = u64::MAX, beyond any wire timestamp: drop the version below.
                unboundable.push((key.clone(), index));
                continue;
            };
            self.ledger.remove_version(version, value_len);
            version.interval = bounded;
            version.tags = None;
            self.ledger.add_version(version, value_len);
            // The first commit at or after hi is yet to come: its time is not known.
            self.stale.push(key, hi, None);
        }
        for (key, index) in unboundable {
            self.remove_version(&key, index, GhostReason::Staleness);
        }
    }

    /// After every message: trim the history, remove stale versions, evict to the limit.
    pub(crate) fn housekeeping(&mut self) {
        let cutoff = self
            .latest_commit_time
            .minus_micros(self.config.max_staleness_micros);
        let budget = self.history_budget();
        self.history.write().trim(cutoff, budget);
        self.remove_stale(cutoff);
        self.maybe_compact_stale();
        self.make_room(0);
    }

    /// Removes bounded versions whose first later commit is older than `cutoff`: no reader
    /// within the staleness limit can ask for them.
    fn remove_stale(&mut self, cutoff: WallClock) {
        while let Some((key, hi)) = self.stale.pop_expired(cutoff) {
            if let Some(index) = bounded_version(&self.keys, &key, hi) {
                self.remove_version(&key, index, GhostReason::Staleness);
                self.stats.stale_removals += 1;
            }
        }
    }

    /// Compacts the staleness queue once its dead records outnumber the live ones.
    pub(crate) fn maybe_compact_stale(&mut self) {
        let gauges = &self.ledger.gauges;
        let bounded = gauges.versions - gauges.open_versions;
        if self.stale.len() > 2 * bounded + 64 {
            self.compact_stale();
        }
    }

    /// Drops staleness records whose version is gone.
    pub(crate) fn compact_stale(&mut self) {
        let keys = &self.keys;
        self.stale
            .compact(|key, hi| bounded_version(keys, key, hi).is_some());
    }
}

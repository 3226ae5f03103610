//! The invalidation history: recent commits and their tags, to compute an insert's interval.
//!
//! The node knows every commit with a timestamp above the horizon `H` (and the one at `H`).
//! Per fine tag, per table (commits with any tag of the table) and per table for wildcard
//! commits it keeps sorted deques of commit timestamps, so "the latest matching commit at or
//! before s" and "the first matching commit after s" are binary searches; a global deque of
//! records is what trimming walks, oldest first. Commits carrying the global tag `*`
//! ([`InvalidationTag::global`]: DDL whose dependents cannot be known) have a deque of their
//! own, searched for every tag set, the empty one included: they may have changed anything.
//!
//! Every shard of a node applies the same stream, so the shards share one history
//! ([`SharedHistory`]): the first shard to apply a message records it, the others find it
//! there. Recording, trimming and resetting are idempotent for that reason.

use crate::memory::{HISTORY_FINE_KEY, HISTORY_GLOBAL, HISTORY_RECORD, HISTORY_TABLE, HISTORY_TAG};
use hashbrown::HashMap;
use std::collections::VecDeque;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use txcache_model::{Invalidation, InvalidationTag, Timestamp, WallClock};

/// The invalidation history of one node, shared by its `shards` stores.
///
/// Each store is charged an equal share of its bytes and may let it grow to an eighth of the
/// node's memory (its own limit times the number of shards).
#[derive(Debug)]
pub struct SharedHistory {
    history: RwLock<History>,
    shards: usize,
}

impl SharedHistory {
    /// An empty history for a node of `shards` stores (at least one).
    pub fn new(shards: usize) -> Self {
        Self {
            history: RwLock::new(History::default()),
            shards: shards.max(1),
        }
    }

    /// How many stores share the history.
    pub(crate) fn shards(&self) -> usize {
        self.shards
    }

    /// The history, for reading.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, History> {
        // Every History method leaves it consistent, so a poisoned lock holds a good one.
        self.history.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The history, for changing.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, History> {
        self.history.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One recorded commit.
#[derive(Debug)]
pub(crate) struct Record {
    ts: Timestamp,
    commit_time: WallClock,
    tags: Box<[InvalidationTag]>,
    /// What this record was charged, credited back when it is trimmed.
    cost: usize,
}

/// The commits of one table.
#[derive(Debug, Default)]
pub(crate) struct TableHistory {
    /// Commits carrying any tag of the table.
    any: VecDeque<Timestamp>,
    /// Commits carrying the table's wildcard tag.
    wildcard: VecDeque<Timestamp>,
}

/// Recent commits, oldest first.
#[derive(Debug, Default)]
pub(crate) struct History {
    records: VecDeque<Record>,
    fine: HashMap<InvalidationTag, VecDeque<Timestamp>>,
    tables: HashMap<Box<str>, TableHistory>,
    /// Commits carrying the global tag: they match every tag set.
    global: VecDeque<Timestamp>,
    horizon: Option<Timestamp>,
    /// The newest commit recorded (or the reset point): later calls with it are repeats from
    /// the other shards of the node.
    newest: Option<Timestamp>,
    bytes: usize,
}

/// Appends `ts` unless it is already the last (a commit with two tags of one table).
fn push_once(deque: &mut VecDeque<Timestamp>, ts: Timestamp) {
    if deque.back() != Some(&ts) {
        deque.push_back(ts);
    }
}

/// Removes `ts` from the front, where the oldest record's timestamps are.
fn pop_once(deque: &mut VecDeque<Timestamp>, ts: Timestamp) {
    if deque.front() == Some(&ts) {
        deque.pop_front();
    }
}

impl History {
    /// `H`: `None` before the first message.
    pub fn horizon(&self) -> Option<Timestamp> {
        self.horizon
    }

    /// Accounted bytes of the history.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Marks the first message: history starts at `ts`.
    pub fn start(&mut self, ts: Timestamp) {
        self.horizon.get_or_insert(ts);
    }

    /// Forgets every commit: the node knows nothing below `horizon` any more. `horizon` may
    /// be below the newest recorded commit (a rewind). A repeat (the same reset from another
    /// shard) changes nothing.
    pub fn reset(&mut self, horizon: Timestamp) {
        if self.newest == Some(horizon) && self.records.is_empty() {
            return;
        }
        *self = History {
            horizon: Some(horizon),
            newest: Some(horizon),
            ..History::default()
        };
    }

    /// Records an applied invalidation (timestamps arrive strictly increasing); a commit at or
    /// before the newest recorded is a repeat from another shard and is skipped.
    pub fn record(&mut self, invalidation: &Invalidation) {
        let ts = invalidation.ts;
        if self.newest.is_some_and(|newest| ts <= newest) {
            return;
        }
        self.newest = Some(ts);
        self.start(ts);
        let mut cost = HISTORY_RECORD;
        for tag in &invalidation.tags {
            cost += HISTORY_TAG + tag.as_str().len();
            self.file(tag, ts);
        }
        self.bytes += cost;
        self.records.push_back(Record {
            ts,
            commit_time: invalidation.commit_time,
            tags: invalidation.tags.clone().into_boxed_slice(),
            cost,
        });
    }

    fn file(&mut self, tag: &InvalidationTag, ts: Timestamp) {
        if tag.is_global() {
            return self.file_global(ts);
        }
        if !tag.is_wildcard() {
            if !self.fine.contains_key(tag) {
                self.bytes += HISTORY_FINE_KEY + tag.as_str().len();
            }
            push_once(self.fine.entry(tag.clone()).or_default(), ts);
        }
        if !self.tables.contains_key(tag.table()) {
            self.bytes += HISTORY_TABLE + tag.table().len();
            self.tables
                .insert(tag.table().into(), TableHistory::default());
        }
        if let Some(table) = self.tables.get_mut(tag.table()) {
            push_once(&mut table.any, ts);
            if tag.is_wildcard() {
                push_once(&mut table.wildcard, ts);
            }
        }
    }

    /// Files a global commit; the deque's first buffer is charged while it holds any.
    fn file_global(&mut self, ts: Timestamp) {
        if self.global.is_empty() {
            self.bytes += HISTORY_GLOBAL;
        }
        push_once(&mut self.global, ts);
    }

    /// Drops the oldest records while they are older than `oldest` or the history is over
    /// `max_bytes`; `H` becomes the last dropped timestamp.
    pub fn trim(&mut self, oldest: WallClock, max_bytes: usize) {
        while let Some(front) = self.records.front() {
            if front.commit_time >= oldest && self.bytes <= max_bytes {
                break;
            }
            self.pop_oldest();
        }
    }

    /// Drops the oldest record; false when there is none.
    pub fn pop_oldest(&mut self) -> bool {
        let Some(record) = self.records.pop_front() else {
            return false;
        };
        for tag in record.tags.iter() {
            match tag.is_global() {
                true => self.unfile_global(record.ts),
                false => self.unfile(tag, record.ts),
            }
        }
        self.bytes -= record.cost;
        self.horizon = Some(record.ts);
        true
    }

    fn unfile(&mut self, tag: &InvalidationTag, ts: Timestamp) {
        if let Some(deque) = self.fine.get_mut(tag) {
            pop_once(deque, ts);
            if deque.is_empty() {
                self.fine.remove(tag);
                self.bytes -= HISTORY_FINE_KEY + tag.as_str().len();
            }
        }
        if let Some(table) = self.tables.get_mut(tag.table()) {
            pop_once(&mut table.any, ts);
            pop_once(&mut table.wildcard, ts);
            if table.any.is_empty() {
                self.tables.remove(tag.table());
                self.bytes -= HISTORY_TABLE + tag.table().len();
            }
        }
    }

    /// Unfiles a global commit (once, though a record may carry `*` twice); an emptied deque
    /// gives its buffer back, as its charge is credited.
    fn unfile_global(&mut self, ts: Timestamp) {
        if self.global.front() != Some(&ts) {
            return;
        }
        self.global.pop_front();
        if self.global.is_empty() {
            self.global = VecDeque::new();
            self.bytes -= HISTORY_GLOBAL;
        }
    }

    /// The deques holding the commits that match `tag`: for `t:c=v` its own and `t`'s
    /// wildcard commits; for `t`, every commit of `t`.
    fn deques(&self, tag: &InvalidationTag) -> [Option<&VecDeque<Timestamp>>; 2] {
        let table = self.tables.get(tag.table());
        match tag.is_wildcard() {
            true => [table.map(|t| &t.any), None],
            false => [self.fine.get(tag), table.map(|t| &t.wildcard)],
        }
    }

    /// The deques holding the commits that match a tag set `tags`: those of each tag, and
    /// the global commits, which match every set (the empty one too).
    fn matching<'a>(
        &'a self,
        tags: &'a [InvalidationTag],
    ) -> impl Iterator<Item = &'a VecDeque<Timestamp>> {
        tags.iter()
            .flat_map(|tag| self.deques(tag))
            .flatten()
            .chain([&self.global])
    }

    /// The latest recorded commit at or before `s` that matches one of `tags`, or is global.
    pub fn latest_matching(&self, tags: &[InvalidationTag], s: Timestamp) -> Option<Timestamp> {
        let latest =
            |d: &VecDeque<Timestamp>| d.partition_point(|&t| t <= s).checked_sub(1).map(|i| d[i]);
        self.matching(tags).filter_map(latest).max()
    }

    /// The first recorded commit after `s` that matches one of `tags`, or is global.
    pub fn first_matching_after(
        &self,
        tags: &[InvalidationTag],
        s: Timestamp,
    ) -> Option<Timestamp> {
        let first = |d: &VecDeque<Timestamp>| d.get(d.partition_point(|&t| t <= s)).copied();
        self.matching(tags).filter_map(first).min()
    }

    /// The commit time of the first recorded commit at or after `ts`: no earlier than that of
    /// the first commit at or after `ts`, and equal to it when that commit is recorded.
    pub fn commit_time_from(&self, ts: Timestamp) -> Option<WallClock> {
        let index = self.records.partition_point(|r| r.ts < ts);
        self.records.get(index).map(|r| r.commit_time)
    }

    /// The bytes recomputed from scratch (for the invariant check).
    pub fn recount(&self) -> usize {
        let records: usize = self
            .records
            .iter()
            .map(|r| {
                HISTORY_RECORD
                    + r.tags
                        .iter()
                        .map(|t| HISTORY_TAG + t.as_str().len())
                        .sum::<usize>()
            })
            .sum();
        let fine: usize = self
            .fine
            .keys()
            .map(|t| HISTORY_FINE_KEY + t.as_str().len())
            .sum();
        let tables: usize = self.tables.keys().map(|t| HISTORY_TABLE + t.len()).sum();
        let global = match self.global.is_empty() {
            true => 0,
            false => HISTORY_GLOBAL,
        };
        records + fine + tables + global
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(s: &str) -> InvalidationTag {
        InvalidationTag::parse(s).expect("valid tag")
    }

    fn commit(history: &mut History, ts: u64, time: u64, tags: &[&str]) {
        history.record(&Invalidation {
            ts: Timestamp(ts),
            commit_time: WallClock(time),
            tags: tags.iter().map(|t| tag(t)).collect(),
        });
    }

    fn sample() -> History {
        let mut h = History::default();
        commit(&mut h, 10, 100, &["s.t:id=1", "s.t:id=2"]);
        commit(&mut h, 20, 200, &["s.t"]);
        commit(&mut h, 30, 300, &["s.t:id=2", "s.u:id=1"]);
        h
    }

    #[test]
    fn matching_follows_tag_rules() {
        let h = sample();
        let ts = |n| Some(Timestamp(n));
        assert_eq!(h.latest_matching(&[tag("s.t:id=1")], Timestamp(35)), ts(20));
        assert_eq!(h.latest_matching(&[tag("s.t:id=1")], Timestamp(15)), ts(10));
        assert_eq!(
            h.first_matching_after(&[tag("s.t:id=1")], Timestamp(20)),
            None
        );
        assert_eq!(
            h.first_matching_after(&[tag("s.t:id=3")], Timestamp(5)),
            ts(20)
        );
        assert_eq!(h.latest_matching(&[tag("s.u")], Timestamp(29)), None);
        assert_eq!(
            h.first_matching_after(&[tag("s.u"), tag("s.t:id=1")], Timestamp(10)),
            ts(20)
        );
        assert_eq!(h.latest_matching(&[], Timestamp(30)), None);
    }

    #[test]
    fn trimming_moves_the_horizon_and_frees_every_byte() {
        let mut h = sample();
        assert_eq!(h.horizon(), Some(Timestamp(10)));
        assert_eq!(h.recount(), h.bytes());
        h.trim(WallClock(250), usize::MAX);
        assert_eq!(h.horizon(), Some(Timestamp(20)));
        assert_eq!(h.recount(), h.bytes());
        assert_eq!(h.latest_matching(&[tag("s.t:id=2")], Timestamp(25)), None);
        h.trim(WallClock(0), 0);
        assert_eq!((h.horizon(), h.bytes()), (Some(Timestamp(30)), 0));
    }

    #[test]
    fn repeats_from_other_shards_change_nothing() {
        let mut h = sample();
        let bytes = h.bytes();
        commit(&mut h, 30, 300, &["s.t:id=2", "s.u:id=1"]);
        commit(&mut h, 20, 200, &["s.t"]);
        assert_eq!((h.bytes(), h.records.len()), (bytes, 3));
        h.reset(Timestamp(40));
        h.reset(Timestamp(40));
        commit(&mut h, 40, 400, &["s.t"]);
        assert_eq!((h.horizon(), h.records.len()), (Some(Timestamp(40)), 0));
        commit(&mut h, 50, 500, &["s.t"]);
        assert_eq!(h.records.len(), 1);
        assert_eq!(h.bytes(), h.recount());
    }

    #[test]
    fn a_global_commit_matches_every_tag_set_even_the_empty_one() {
        let mut h = sample();
        commit(&mut h, 40, 400, &["*"]);
        commit(&mut h, 50, 500, &["s.v:id=1"]);
        let ts = |n| Some(Timestamp(n));
        for tags in [
            vec![],
            vec![tag("s.t:id=1")],
            vec![tag("s.v")],
            vec![tag("*")],
        ] {
            assert_eq!(h.latest_matching(&tags, Timestamp(45)), ts(40), "{tags:?}");
            assert_eq!(
                h.first_matching_after(&tags, Timestamp(35)),
                ts(40),
                "{tags:?}"
            );
        }
        // A later matching commit still wins over the global one below it.
        assert_eq!(h.latest_matching(&[tag("s.v:id=1")], Timestamp(55)), ts(50));
        assert_eq!(h.first_matching_after(&[], Timestamp(40)), None);
        assert_eq!(h.latest_matching(&[], Timestamp(39)), None);
        // The global tag files no table of its own.
        assert!(!h.tables.contains_key("*"));
    }

    #[test]
    fn trimming_unfiles_global_commits_and_frees_every_byte() {
        let mut h = History::default();
        commit(&mut h, 10, 100, &["*"]);
        commit(&mut h, 20, 200, &["*", "s.t:id=1", "*"]);
        commit(&mut h, 30, 300, &["s.t"]);
        assert_eq!(h.recount(), h.bytes());
        h.pop_oldest();
        assert_eq!(h.recount(), h.bytes());
        assert_eq!(h.latest_matching(&[], Timestamp(15)), None);
        assert_eq!(
            h.first_matching_after(&[], Timestamp(5)),
            Some(Timestamp(20))
        );
        h.pop_oldest();
        assert_eq!(h.recount(), h.bytes());
        assert_eq!(h.first_matching_after(&[], Timestamp(5)), None);
        assert_eq!(
            h.global.capacity(),
            0,
            "the emptied deque gave its buffer back"
        );
        h.pop_oldest();
        assert_eq!((h.bytes(), h.recount()), (0, 0));
    }

    #[test]
    fn a_repeated_global_commit_is_recorded_once() {
        let mut h = History::default();
        commit(&mut h, 10, 100, &["*"]);
        let bytes = h.bytes();
        commit(&mut h, 10, 100, &["*"]);
        assert_eq!((h.bytes(), h.records.len(), h.global.len()), (bytes, 1, 1));
        h.reset(Timestamp(20));
        assert_eq!(
            (h.bytes(), h.latest_matching(&[], Timestamp(20))),
            (0, None)
        );
    }

    #[test]
    fn commit_time_from_finds_the_first_commit_at_or_after() {
        let h = sample();
        assert_eq!(h.commit_time_from(Timestamp(20)), Some(WallClock(200)));
        assert_eq!(h.commit_time_from(Timestamp(21)), Some(WallClock(300)));
        assert_eq!(h.commit_time_from(Timestamp(31)), None);
    }
}

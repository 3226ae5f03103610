//! The invalidation history: recent commits and their tags, to compute an insert's interval.
//!
//! The node knows every commit with a timestamp above the horizon `H` (and the one at `H`).
//! Per table it keeps sorted deques of the commits with any tag of the table, with its
//! wildcard, and with each `column=value` (a tag's site: its text without the `#…` columns),
//! so "the latest matching commit at or before s" and "the first matching commit after s"
//! are binary searches; a global deque of records is what trimming walks, oldest first. Each
//! entry keeps the columns its commit's tags there name (their union): a search skips the
//! entries whose columns miss the read tag's, looking at most [`SCAN_LIMIT`] entries past its
//! binary search before answering with the nearest entry, which is sound (only shorter
//! validity). Commits carrying the global tag `*` ([`InvalidationTag::global`]: DDL whose
//! dependents cannot be known) have a deque of their own, searched for every tag set, the
//! empty one included: they may have changed anything.
//!
//! Every shard of a node applies the same stream, so the shards share one history
//! ([`SharedHistory`]): the first shard to apply a message records it, the others find it
//! there. Recording, trimming and resetting are idempotent for that reason.

use crate::memory::{HISTORY_FINE_KEY, HISTORY_GLOBAL, HISTORY_RECORD, HISTORY_TABLE, HISTORY_TAG};
use hashbrown::HashMap;
use std::collections::VecDeque;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use txcache_model::{ColumnSet, Invalidation, InvalidationTag, Timestamp, WallClock};

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

/// A commit filed in one of its table's deques: its timestamp and the columns its tags filed
/// there name (their union, when it carries several).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Filed {
    ts: Timestamp,
    columns: ColumnSet,
}

/// The commits of one table.
#[derive(Debug, Default)]
pub(crate) struct TableHistory {
    /// Commits carrying any tag of the table.
    any: VecDeque<Filed>,
    /// Commits carrying the table's wildcard tag.
    wildcard: VecDeque<Filed>,
    /// Commits carrying a fine tag of the table, by its `column=value`.
    fine: HashMap<Box<str>, VecDeque<Filed>>,
}

impl TableHistory {
    fn is_empty(&self) -> bool {
        self.any.is_empty() && self.wildcard.is_empty() && self.fine.is_empty()
    }
}

/// Recent commits, oldest first.
#[derive(Debug, Default)]
pub(crate) struct History {
    records: VecDeque<Record>,
    tables: HashMap<Box<str>, TableHistory>,
    /// Commits carrying the global tag: they match every tag set.
    global: VecDeque<Timestamp>,
    horizon: Option<Timestamp>,
    /// The newest commit recorded (or the reset point): later calls with it are repeats from
    /// the other shards of the node.
    newest: Option<Timestamp>,
    bytes: usize,
}

/// How many entries a search looks at past its binary search for one whose columns meet the
/// read's before it answers with the nearest entry, whatever its columns. A busy table's
/// updates of columns a wildcard read never uses pass a lagging pin by hundreds (a scan of
/// them costs about a microsecond); past the limit a stored value stops being open.
const SCAN_LIMIT: usize = 1024;

/// Appends `filed`, or adds its columns to the last entry when that is the same commit (a
/// commit with two tags of one table).
fn push_once(deque: &mut VecDeque<Filed>, filed: Filed) {
    match deque.back_mut() {
        Some(last) if last.ts == filed.ts => last.columns = last.columns.union(filed.columns),
        _ => deque.push_back(filed),
    }
}

/// Removes the entry of `ts` from the front, where the oldest record's entries are.
fn pop_once(deque: &mut VecDeque<Filed>, ts: Timestamp) {
    if deque.front().is_some_and(|f| f.ts == ts) {
        deque.pop_front();
    }
}

/// The latest entry at or before `s` whose columns meet `columns`.
fn latest_meeting(deque: &VecDeque<Filed>, s: Timestamp, columns: ColumnSet) -> Option<Timestamp> {
    let end = deque.partition_point(|f| f.ts <= s);
    let nearest = deque.get(end.checked_sub(1)?)?.ts;
    let start = end.saturating_sub(SCAN_LIMIT);
    let found = deque
        .range(start..end)
        .rev()
        .find(|f| f.columns.intersects(columns));
    // Past the limit, the nearest entry: a lo at or after the true one only shortens validity.
    found.map(|f| f.ts).or((start > 0).then_some(nearest))
}

/// The first entry after `s` whose columns meet `columns`.
fn first_meeting_after(
    deque: &VecDeque<Filed>,
    s: Timestamp,
    columns: ColumnSet,
) -> Option<Timestamp> {
    let start = deque.partition_point(|f| f.ts <= s);
    let nearest = deque.get(start)?.ts;
    let end = deque.len().min(start.saturating_add(SCAN_LIMIT));
    let found = deque
        .range(start..end)
        .find(|f| f.columns.intersects(columns));
    // Past the limit, the nearest entry: a hi at or before the true one only shortens validity.
    found
        .map(|f| f.ts)
        .or((end < deque.len()).then_some(nearest))
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

    /// Files a tag of the commit at `ts`: in its table's `any` deque, and in its wildcard
    /// deque or the deque of its `column=value`.
    fn file(&mut self, tag: &InvalidationTag, ts: Timestamp) {
        if tag.is_global() {
            return self.file_global(ts);
        }
        if !self.tables.contains_key(tag.table()) {
            self.bytes += HISTORY_TABLE + tag.table().len();
            self.tables
                .insert(tag.table().into(), TableHistory::default());
        }
        let Some(table) = self.tables.get_mut(tag.table()) else {
            return;
        };
        let filed = Filed {
            ts,
            columns: tag.columns(),
        };
        push_once(&mut table.any, filed);
        let Some(cv) = tag.column_value() else {
            return push_once(&mut table.wildcard, filed);
        };
        if !table.fine.contains_key(cv) {
            self.bytes += HISTORY_FINE_KEY + cv.len();
            table.fine.insert(cv.into(), VecDeque::new());
        }
        if let Some(deque) = table.fine.get_mut(cv) {
            push_once(deque, filed);
        }
    }

    /// Files a global commit; the deque's first buffer is charged while it holds any.
    fn file_global(&mut self, ts: Timestamp) {
        if self.global.is_empty() {
            self.bytes += HISTORY_GLOBAL;
        }
        if self.global.back() != Some(&ts) {
            self.global.push_back(ts);
        }
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

    /// Unfiles a tag of the oldest record, at `ts`. Another tag of the same table in that
    /// record may have unfiled its entries already; the table goes once all its deques are
    /// empty, which they are after the record's last tag.
    fn unfile(&mut self, tag: &InvalidationTag, ts: Timestamp) {
        let Some(table) = self.tables.get_mut(tag.table()) else {
            return;
        };
        if let Some(cv) = tag.column_value() {
            if let Some(deque) = table.fine.get_mut(cv) {
                pop_once(deque, ts);
                if deque.is_empty() {
                    table.fine.remove(cv);
                    self.bytes -= HISTORY_FINE_KEY + cv.len();
                }
            }
        }
        pop_once(&mut table.any, ts);
        pop_once(&mut table.wildcard, ts);
        if table.is_empty() {
            self.tables.remove(tag.table());
            self.bytes -= HISTORY_TABLE + tag.table().len();
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

    /// The deques holding the commits that may match `tag` (those whose columns meet the
    /// tag's do): for `t:c=v` its own and `t`'s wildcard commits; for `t`, every commit of
    /// `t`.
    fn deques(&self, tag: &InvalidationTag) -> [Option<&VecDeque<Filed>>; 2] {
        let Some(table) = self.tables.get(tag.table()) else {
            return [None, None];
        };
        match tag.column_value() {
            None => [Some(&table.any), None],
            Some(cv) => [table.fine.get(cv), Some(&table.wildcard)],
        }
    }

    /// Each deque that may hold commits matching one of `tags`, with that tag's columns.
    fn matching<'a>(
        &'a self,
        tags: &'a [InvalidationTag],
    ) -> impl Iterator<Item = (&'a VecDeque<Filed>, ColumnSet)> {
        tags.iter().flat_map(move |tag| {
            self.deques(tag)
                .into_iter()
                .flatten()
                .map(move |deque| (deque, tag.columns()))
        })
    }

    /// The latest recorded commit at or before `s` that matches one of `tags`, or is global
    /// (global commits match every tag set, the empty one too). Where a deque holds more than
    /// [`SCAN_LIMIT`] commits before `s` whose columns miss, the latest of them answers
    /// instead: later, never earlier.
    pub fn latest_matching(&self, tags: &[InvalidationTag], s: Timestamp) -> Option<Timestamp> {
        let global = self.global.partition_point(|&t| t <= s);
        let global = global.checked_sub(1).map(|i| self.global[i]);
        self.matching(tags)
            .filter_map(|(deque, columns)| latest_meeting(deque, s, columns))
            .chain(global)
            .max()
    }

    /// The first recorded commit after `s` that matches one of `tags`, or is global. Where a
    /// deque holds more than [`SCAN_LIMIT`] commits after `s` whose columns miss, the first
    /// of them answers instead: earlier, never later.
    pub fn first_matching_after(
        &self,
        tags: &[InvalidationTag],
        s: Timestamp,
    ) -> Option<Timestamp> {
        let global = self.global.get(self.global.partition_point(|&t| t <= s));
        self.matching(tags)
            .filter_map(|(deque, columns)| first_meeting_after(deque, s, columns))
            .chain(global.copied())
            .min()
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
        let tables: usize = self
            .tables
            .iter()
            .map(|(name, table)| {
                HISTORY_TABLE
                    + name.len()
                    + table
                        .fine
                        .keys()
                        .map(|cv| HISTORY_FINE_KEY + cv.len())
                        .sum::<usize>()
            })
            .sum();
        let global = match self.global.is_empty() {
            true => 0,
            false => HISTORY_GLOBAL,
        };
        records + tables + global
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

    #[test]
    fn searches_skip_commits_whose_columns_miss_the_read() {
        let mut h = History::default();
        commit(&mut h, 10, 100, &["s.t#1:id=1"]);
        commit(&mut h, 20, 200, &["s.t#20:id=1"]);
        commit(&mut h, 30, 300, &["s.t#20"]);
        commit(&mut h, 40, 400, &["s.t#8:id=1"]);
        commit(&mut h, 50, 500, &["s.t#1:id=2"]);
        let ts = |n| Some(Timestamp(n));
        let read = [tag("s.t#9:id=1")];
        assert_eq!(h.latest_matching(&read, Timestamp(35)), ts(10));
        assert_eq!(h.first_matching_after(&read, Timestamp(10)), ts(40));
        let update = [tag("s.t#20:id=1")];
        assert_eq!(h.latest_matching(&update, Timestamp(45)), ts(30));
        assert_eq!(h.first_matching_after(&update, Timestamp(30)), None);
        // A wildcard read meets every commit of its table by columns alone.
        assert_eq!(h.latest_matching(&[tag("s.t#1")], Timestamp(45)), ts(10));
        assert_eq!(
            h.first_matching_after(&[tag("s.t#1")], Timestamp(10)),
            ts(50)
        );
        assert_eq!(h.latest_matching(&[tag("s.t#2")], Timestamp(60)), None);
        // Without columns a read meets every commit of its site, as before.
        assert_eq!(h.latest_matching(&[tag("s.t:id=1")], Timestamp(35)), ts(30));
    }

    #[test]
    fn two_tags_of_one_commit_at_one_site_file_the_union_of_their_columns() {
        let mut h = History::default();
        commit(&mut h, 10, 100, &["s.t#1:id=1", "s.t#8:id=1", "s.t#2:id=2"]);
        commit(&mut h, 20, 200, &["s.u#4"]);
        let table = &h.tables["s.t"];
        assert_eq!(table.fine["id=1"].len(), 1);
        assert_eq!(table.any.len(), 1);
        assert_eq!(table.any[0].columns, ColumnSet::from_bits(0xb));
        for (read, expected) in [
            ("s.t#8:id=1", true),
            ("s.t#1:id=1", true),
            ("s.t#2:id=1", false),
        ] {
            let found = h.latest_matching(&[tag(read)], Timestamp(15));
            assert_eq!(found.is_some(), expected, "{read}");
        }
        assert_eq!(h.recount(), h.bytes());
        // The record's first tag unfiles the table's shared entries; the table goes only
        // with the record's last tag, and every byte comes back.
        h.pop_oldest();
        assert!(!h.tables.contains_key("s.t"));
        assert_eq!(h.recount(), h.bytes());
        h.pop_oldest();
        assert_eq!((h.bytes(), h.recount(), h.tables.len()), (0, 0, 0));
    }

    #[test]
    fn past_the_scan_limit_the_nearest_commit_answers() {
        let mut h = History::default();
        let read = [tag("s.t#9:id=1")];
        let ts = |n| Some(Timestamp(n));
        // A match at 1, then misses (an update of another column) at 2..=limit.
        commit(&mut h, 1, 1, &["s.t#1:id=1"]);
        let limit = SCAN_LIMIT as u64;
        for at in 2..=limit {
            commit(&mut h, at, at, &["s.t#20:id=1"]);
        }
        // The match is the last of the limit's entries: still found.
        assert_eq!(h.latest_matching(&read, Timestamp(limit)), ts(1));
        // One miss more, and the nearest miss answers: a later lo than the truth (1).
        commit(&mut h, limit + 1, limit + 1, &["s.t#20:id=1"]);
        assert_eq!(
            h.latest_matching(&read, Timestamp(limit + 1)),
            ts(limit + 1)
        );
        // Likewise forward: after 1, `limit` misses before the next match, so the nearest
        // miss answers, an earlier hi than the truth; one miss fewer and the match is found.
        commit(&mut h, limit + 2, limit + 2, &["s.t#8:id=1"]);
        assert_eq!(h.first_matching_after(&read, Timestamp(1)), ts(2));
        assert_eq!(h.first_matching_after(&read, Timestamp(2)), ts(limit + 2));
        assert_eq!(
            h.latest_matching(&read, Timestamp(limit + 2)),
            ts(limit + 2)
        );
        // Reads the misses meet are answered exactly.
        let update = [tag("s.t#20:id=1")];
        assert_eq!(h.first_matching_after(&update, Timestamp(1)), ts(2));
        assert_eq!(
            h.latest_matching(&update, Timestamp(limit + 2)),
            ts(limit + 1)
        );
    }
}

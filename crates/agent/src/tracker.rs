//! What the stream has decoded, shared with the pincushion and the library server.
//!
//! The stream task records every commit (LSN, xid, time), every fence and every heartbeat;
//! pins are certified against the commit log, "current as of" times come from the progress,
//! and read-your-writes waits for an xid's commit here. A bounded history of decoded commits
//! and heartbeats places a standby's replay position on the stream ([`StreamTracker::replay_point`]).

use crate::certify::{Certification, CommitLog, DecodedCommit, Snapshot};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use txcache_model::{Timestamp, WallClock};

/// Recent commits kept for read-your-writes lookups by xid.
const XID_MEMORY: usize = 1 << 20;

/// Tag-column catalog versions kept for libraries.
const CATALOG_VERSIONS: usize = 16;

/// Decoded commits and heartbeats kept for placing standbys' replay positions: at 5
/// heartbeats a second, about 14 hours of an idle database, or the last 262,144 commits.
const HISTORY: usize = 1 << 18;

/// One version of the tag-column catalog: in force from `since` (the commit LSN of the DDL
/// that produced it; 0 or, after a reconnect, the WAL position where a session read it).
#[derive(Clone, Debug)]
pub struct CatalogVersion {
    /// The first timestamp it applies to.
    pub since: Timestamp,
    /// `(schema.table, tag columns)`, sorted by table.
    pub tables: Arc<Vec<(String, Vec<String>)>>,
}

/// Positions and times the stream has reached.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// The newest decoded commit's LSN.
    pub commit: Timestamp,
    /// When it committed.
    pub commit_time: WallClock,
    /// The newest decoded heartbeat position (a heartbeat message's, or a keepalive's)…
    pub heartbeat: Timestamp,
    /// …and a wall-clock time the state there was current at: when the newest heartbeat
    /// message was written (a keepalive carries that time on).
    pub heartbeat_time: WallClock,
}

#[derive(Debug)]
struct State {
    log: CommitLog,
    /// The end of what has been decoded: every record below it (commit, message) is seen.
    decoded: Timestamp,
    xids: HashMap<u32, Timestamp>,
    xid_order: VecDeque<u32>,
    progress: Progress,
    catalogs: VecDeque<CatalogVersion>,
    /// The newest commit that changed the schema or truncated a table; at least just below
    /// where the stream (re)started, since one below it may have gone by undecoded.
    barrier: Timestamp,
    /// Recent commits and heartbeats with their times, for standbys' replay positions.
    history: History,
    /// The timeline the stream follows (`None` before it first connected).
    timeline: Option<u32>,
}

/// The stream's record, behind one lock; waiters are woken on every change.
#[derive(Debug)]
pub struct StreamTracker {
    state: Mutex<State>,
    changed: Notify,
    barrier_raised: Notify,
}

impl StreamTracker {
    /// A tracker for a stream resuming at `resume`; `pending_xid` as for [`CommitLog::new`].
    ///
    /// The barrier starts just below `resume` (the state a pin on an idle database has): a
    /// previous agent may have decoded (and confirmed) a
    /// schema change just below it that this one never replays, and a library still holding
    /// an older snapshot must not store what it reads with the newer catalog.
    pub fn new(resume: Timestamp, pending_xid: u64) -> Self {
        Self {
            state: Mutex::new(State {
                log: CommitLog::new(resume, pending_xid),
                decoded: Timestamp::ZERO,
                xids: HashMap::new(),
                xid_order: VecDeque::new(),
                progress: Progress {
                    heartbeat: Timestamp(resume.0.saturating_sub(1)),
                    ..Progress::default()
                },
                catalogs: VecDeque::new(),
                barrier: Timestamp(resume.0.saturating_sub(1)),
                history: History::new(resume, HISTORY),
                timeline: None,
            }),
            changed: Notify::new(),
            barrier_raised: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a decoded commit (a repeat after a reconnect is ignored).
    /// Its LSN is where its commit record starts: everything below was decoded before it.
    pub fn commit(&self, lsn: Timestamp, xid: u32, time: WallClock) {
        let mut state = self.lock();
        if lsn <= state.progress.commit {
            return;
        }
        state.log.push(DecodedCommit { lsn, xid });
        state.history.commit(lsn, time);
        state.decoded = state.decoded.max(lsn);
        state.progress.commit = lsn;
        state.progress.commit_time = time;
        if state.xids.insert(xid, lsn).is_none() {
            state.xid_order.push_back(xid);
        }
        while state.xid_order.len() > XID_MEMORY {
            if let Some(old) = state.xid_order.pop_front() {
                state.xids.remove(&old);
            }
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// Records a decoded heartbeat: every commit below `position` was decoded, and the
    /// state at `position` was current at `time`.
    pub fn heartbeat(&self, position: Timestamp, time: WallClock) {
        let mut state = self.lock();
        state.decoded = state.decoded.max(position);
        state.history.heartbeat(position, time);
        if position > state.progress.heartbeat {
            state.progress.heartbeat = position;
            state.progress.heartbeat_time = time;
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// Records a decoded fence message at `lsn` (as the stream reports a message's LSN).
    pub fn fence(&self, lsn: Timestamp) {
        let mut state = self.lock();
        state.decoded = state.decoded.max(lsn);
        drop(state);
        self.changed.notify_waiters();
    }

    /// The stream starts again at `resume` after a gap (its slot was recreated) or after the
    /// database's positions went back: forget what was decoded, so that nothing is certified
    /// across the gap — a fence written before it is never taken as decoded, nor one at a
    /// position the old stream had passed — and no xid maps to a commit of the old history.
    /// The barrier moves to just below `resume`: schema changes in the gap were never
    /// decoded. The history of commits and heartbeats starts again at `resume` too.
    pub fn restart(&self, resume: Timestamp, pending_xid: u64) {
        let mut state = self.lock();
        let before = Timestamp(resume.0.saturating_sub(1));
        state.barrier = before;
        state.log = CommitLog::new(resume, pending_xid);
        state.decoded = before;
        state.progress.commit = before;
        state.progress.heartbeat = before;
        // A time of the old history says nothing of the new one's positions (a keepalive
        // would carry it on: `Stream::keepalive`).
        state.progress.heartbeat_time = WallClock::default();
        state.xids.clear();
        state.xid_order.clear();
        state.history = History::new(resume, HISTORY);
    }

    /// The stream follows `timeline` of the database's history from now on: standbys'
    /// replay positions are placed on it only while they stream that timeline too
    /// ([`crate::standby::check_timeline`]; none before the stream first connected).
    pub fn follow_timeline(&self, timeline: u32) {
        self.lock().timeline = Some(timeline);
    }

    /// The timeline the stream follows (`None` before it first connected).
    pub fn timeline(&self) -> Option<u32> {
        self.lock().timeline
    }

    /// Records the tag-column catalog in force from `since` (unchanged versions are not
    /// repeated). Versions stay ordered: one from a position at or below the newest version's
    /// (a DDL replayed after a session read the catalog) replaces that version's tables, which
    /// are never more than it brings, the catalog only growing.
    pub fn catalog(&self, since: Timestamp, tables: Vec<(String, Vec<String>)>) {
        let unchanged = self
            .lock()
            .catalogs
            .back()
            .is_some_and(|last| *last.tables == tables);
        if !unchanged {
            self.schema_changed(since, tables);
        }
    }

    /// Records the catalog read after a schema change, in force from `since`: a new version
    /// even when the tag columns did not change, so that libraries see every schema change
    /// and re-read what they derive from the catalog (views, types, functions, …).
    pub fn schema_changed(&self, since: Timestamp, tables: Vec<(String, Vec<String>)>) {
        let mut state = self.lock();
        if let Some(last) = state.catalogs.back_mut().filter(|last| since <= last.since) {
            last.tables = Arc::new(tables);
            return;
        }
        state.catalogs.push_back(CatalogVersion {
            since,
            tables: Arc::new(tables),
        });
        while state.catalogs.len() > CATALOG_VERSIONS {
            state.catalogs.pop_front();
        }
    }

    /// The catalog versions kept, oldest first.
    pub fn catalogs(&self) -> Vec<CatalogVersion> {
        self.lock().catalogs.iter().cloned().collect()
    }

    /// Records a commit that changed the schema or truncated a table: a snapshot older than
    /// it that reads an affected table afterwards sees the table empty (`TRUNCATE` and
    /// rewriting `ALTER TABLE` are not MVCC-safe) or under definitions it never had.
    pub fn barrier(&self, lsn: Timestamp) {
        let mut state = self.lock();
        state.barrier = state.barrier.max(lsn);
        drop(state);
        self.barrier_raised.notify_one();
    }

    /// Waits until a barrier is recorded (one recorded since the last wait counts).
    pub async fn barrier_raised(&self) {
        self.barrier_raised.notified().await;
    }

    /// The newest barrier recorded: no pin older than it is offered any more.
    pub fn newest_barrier(&self) -> Timestamp {
        self.lock().barrier
    }

    /// The newest barrier and the end of what has been decoded, read together: every
    /// schema change or `TRUNCATE` that committed below the second is at or before the first.
    pub fn schema_fence(&self) -> (Timestamp, Timestamp) {
        let state = self.lock();
        (state.barrier, state.decoded)
    }

    /// The stream's progress now.
    pub fn progress(&self) -> Progress {
        self.lock().progress
    }

    /// Waits until the stream, following `timeline` (the one the fence was written on, when
    /// known), has decoded the fence written at `fence` (the LSN the pinner's
    /// `pg_logical_emit_message` returned), then certifies `snapshot` against the commits
    /// before it. `None` when the stream does not get there within `timeout`.
    ///
    /// Keyed by LSN, not by a pin number: fences replayed after a restart carry old numbers
    /// but can never carry this LSN. And by timeline: a stream still on the history a
    /// failover left may have decoded past `fence` on the old timeline, whose commits past
    /// the switch point the new primary never had.
    pub async fn certify(
        &self,
        fence: Timestamp,
        timeline: Option<u32>,
        snapshot: &Snapshot,
        timeout: Duration,
    ) -> Option<Certification> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            {
                let mut state = self.lock();
                let followed = timeline.is_none() || state.timeline == timeline;
                if followed && state.decoded >= fence {
                    let verdict = state.log.certify(snapshot, fence);
                    if matches!(verdict, Certification::Clean(_)) {
                        state.log.trim_visible_to_all(snapshot, fence);
                    }
                    return Some(verdict);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Waits until the stream has decoded every commit below `replay` (a standby's
    /// `pg_last_wal_replay_lsn()`, the end of the last record it replayed), then places it:
    /// a snapshot taken with replay paused there sees exactly the commits below it
    /// ([`History::place`]). `None` when the stream does not get there within `timeout`, or
    /// the answer is not known (it left the history, or lies below where the stream resumed).
    pub async fn replay_point(&self, replay: Timestamp, timeout: Duration) -> Option<ReplayPoint> {
        let deadline = tokio::time::Instant::now() + timeout;
        let needed = Timestamp(replay.0.saturating_sub(1));
        loop {
            let notified = self.changed.notified();
            {
                let state = self.lock();
                if state.decoded >= needed {
                    return state.history.place(replay);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Waits until the commit of transaction `xid` (its low 32 bits) is decoded: its LSN;
    /// [`CommitWait::Passed`] once the stream decoded everything below `upto` (a position at
    /// or after the commit) without it — the transaction changed nothing the stream
    /// decodes (it only locked rows, or wrote unpublished tables); [`CommitWait::TimedOut`]
    /// after `timeout`.
    pub async fn commit_lsn(
        &self,
        xid: u32,
        timeout: Duration,
        upto: Option<Timestamp>,
    ) -> CommitWait {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            {
                let state = self.lock();
                if let Some(lsn) = state.xids.get(&xid) {
                    return CommitWait::Decoded(*lsn);
                }
                if upto.is_some_and(|upto| state.decoded >= upto) {
                    return CommitWait::Passed;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return CommitWait::TimedOut;
            }
        }
    }
}

/// Where a standby's replay position lies on the stream ([`StreamTracker::replay_point`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayPoint {
    /// The commit point a snapshot taken there shows: the last commit below the position.
    pub ts: Timestamp,
    /// The wall-clock time up to which that state is known to have been the current one.
    pub current_as_of: WallClock,
}

/// A heartbeat kept in the [`History`].
#[derive(Clone, Copy, Debug)]
struct Beat {
    position: Timestamp,
    /// The largest time of the heartbeats since the commit before this one, this included:
    /// every one of them vouches for the state at that commit.
    newest_time: WallClock,
}

/// The commits and heartbeats decoded in this run of the stream, in stream order, at most
/// `capacity` of them (the oldest dropped first), for placing replay positions.
///
/// Positions only grow: a commit is at its LSN, a heartbeat at `p` says the state at `p`
/// (every commit `<= p`) was current at its time. A heartbeat below the newest commit or
/// heartbeat (one repeated after a reconnect) or below the run's resume point is not kept.
#[derive(Debug)]
struct History {
    /// Where this run of the stream starts: commits below it are not decoded in it.
    resume: Timestamp,
    commits: VecDeque<(Timestamp, WallClock)>,
    beats: VecDeque<Beat>,
    /// The newest commit dropped from `commits`.
    dropped: Option<(Timestamp, WallClock)>,
    /// The first commit of this run, kept or not.
    first_commit: Option<Timestamp>,
    capacity: usize,
}

impl History {
    fn new(resume: Timestamp, capacity: usize) -> Self {
        Self {
            resume,
            commits: VecDeque::new(),
            beats: VecDeque::new(),
            dropped: None,
            first_commit: None,
            capacity,
        }
    }

    /// The newest commit recorded, kept or dropped.
    fn last_commit(&self) -> Option<Timestamp> {
        let kept = self.commits.back().map(|commit| commit.0);
        kept.or(self.dropped.map(|commit| commit.0))
    }

    /// The newest position recorded, or just below the resume point.
    fn newest(&self) -> Timestamp {
        let beat = self.beats.back().map(|beat| beat.position);
        let floor = Timestamp(self.resume.0.saturating_sub(1));
        self.last_commit().max(beat).unwrap_or(floor).max(floor)
    }

    /// Records a decoded commit (repeats and older ones are ignored).
    fn commit(&mut self, lsn: Timestamp, time: WallClock) {
        if self.commits.back().is_some_and(|last| last.0 >= lsn) {
            return;
        }
        self.first_commit.get_or_insert(lsn);
        self.commits.push_back((lsn, time));
        self.bound();
    }

    /// Records a decoded heartbeat at `position`, the state there current at `time`.
    fn heartbeat(&mut self, position: Timestamp, time: WallClock) {
        if position < self.newest() {
            return;
        }
        let last_commit = self.last_commit();
        let since_last_commit = self
            .beats
            .back()
            .filter(|beat| last_commit.is_none_or(|commit| beat.position >= commit));
        let newest_time = since_last_commit.map_or(time, |beat| beat.newest_time.max(time));
        self.beats.push_back(Beat {
            position,
            newest_time,
        });
        self.bound();
    }

    /// Drops the oldest entry while more than `capacity` are kept, remembering the newest
    /// commit dropped.
    fn bound(&mut self) {
        while self.commits.len() + self.beats.len() > self.capacity {
            let oldest_commit = self.commits.front().map(|commit| commit.0);
            let oldest_beat = self.beats.front().map(|beat| beat.position);
            if oldest_beat.is_none() || oldest_commit.is_some_and(|c| Some(c) <= oldest_beat) {
                self.dropped = self.commits.pop_front().or(self.dropped);
            } else {
                self.beats.pop_front();
            }
        }
    }

    /// Where a snapshot that sees exactly the commits below `replay` lies: the last commit
    /// below it, or just below the resume point when this run decoded none (the convention
    /// of [`crate::certify::CommitLog::certify`]); `None` when that commit left the history
    /// or `replay` is below the resume point. Every commit below `replay` must be decoded.
    fn place(&self, replay: Timestamp) -> Option<ReplayPoint> {
        let (ts, commit_time) = self.last_commit_below(replay)?;
        let below = self.beats.partition_point(|beat| beat.position < replay);
        let beat = below.checked_sub(1).map(|index| self.beats[index]);
        let beat_time = beat
            .filter(|beat| beat.position >= ts)
            .map(|beat| beat.newest_time);
        let current_as_of = commit_time.max(beat_time).unwrap_or_default();
        Some(ReplayPoint { ts, current_as_of })
    }

    /// The last commit below `replay` with its time (`None` for the resume convention's,
    /// which has no time); `None` when it is not known.
    fn last_commit_below(&self, replay: Timestamp) -> Option<(Timestamp, Option<WallClock>)> {
        // No commit of this run below it: the commits below it are those below the resume
        // point, which the stream never decoded.
        if self.first_commit.is_none_or(|first| first >= replay) {
            let floor = Timestamp(self.resume.0.saturating_sub(1));
            return (replay >= self.resume).then_some((floor, None));
        }
        let below = self.commits.partition_point(|commit| commit.0 < replay);
        if let Some(index) = below.checked_sub(1) {
            let (lsn, time) = self.commits[index];
            return Some((lsn, Some(time)));
        }
        // Every kept commit is at or past it: the newest dropped one, if below it.
        let dropped = self.dropped.filter(|dropped| dropped.0 < replay);
        dropped.map(|(lsn, time)| (lsn, Some(time)))
    }
}

/// What waiting for a transaction's commit gave ([`StreamTracker::commit_lsn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitWait {
    /// Its commit LSN.
    Decoded(Timestamp),
    /// The stream passed the position given without decoding it.
    Passed,
    /// Neither within the time given.
    TimedOut,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_commit_the_stream_passed_without_decoding_is_told_at_once() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.commit(Timestamp(500), 7, WallClock(1));
        let wait = Duration::from_secs(60);
        let found = tracker.commit_lsn(7, wait, Some(Timestamp(520))).await;
        assert_eq!(found, CommitWait::Decoded(Timestamp(500)));
        tracker.heartbeat(Timestamp(900), WallClock(2));
        let passed = tracker.commit_lsn(8, wait, Some(Timestamp(880))).await;
        assert_eq!(passed, CommitWait::Passed);
        let short = Duration::from_millis(10);
        assert_eq!(
            tracker.commit_lsn(8, short, Some(Timestamp(950))).await,
            CommitWait::TimedOut
        );
        assert_eq!(
            tracker.commit_lsn(8, short, None).await,
            CommitWait::TimedOut
        );
    }

    fn point(ts: u64, current_as_of: u64) -> Option<ReplayPoint> {
        Some(ReplayPoint {
            ts: Timestamp(ts),
            current_as_of: WallClock(current_as_of),
        })
    }

    /// A history resuming at 100 with commits at 200 (time 20) and 300 (time 30).
    fn two_commits() -> History {
        let mut history = History::new(Timestamp(100), HISTORY);
        history.commit(Timestamp(200), WallClock(20));
        history.commit(Timestamp(300), WallClock(30));
        history
    }

    #[test]
    fn a_commit_at_the_replay_position_is_not_seen_one_below_is() {
        let history = two_commits();
        assert_eq!(history.place(Timestamp(300)), point(200, 20));
        assert_eq!(history.place(Timestamp(301)), point(300, 30));
        assert_eq!(history.place(Timestamp(201)), point(200, 20));
        assert_eq!(history.place(Timestamp(200)), point(99, 0));
    }

    #[test]
    fn heartbeats_between_the_commit_and_the_replay_position_move_current_as_of() {
        let mut history = two_commits();
        history.heartbeat(Timestamp(350), WallClock(35));
        history.heartbeat(Timestamp(380), WallClock(38));
        history.commit(Timestamp(400), WallClock(40));
        history.heartbeat(Timestamp(450), WallClock(45));
        assert_eq!(history.place(Timestamp(350)), point(300, 30));
        assert_eq!(history.place(Timestamp(351)), point(300, 35));
        assert_eq!(history.place(Timestamp(381)), point(300, 38));
        assert_eq!(history.place(Timestamp(400)), point(300, 38));
        // Past the next commit, only the heartbeats after it count.
        assert_eq!(history.place(Timestamp(401)), point(400, 40));
        assert_eq!(history.place(Timestamp(451)), point(400, 45));
        // A heartbeat repeated after a reconnect is not kept.
        history.heartbeat(Timestamp(420), WallClock(99));
        assert_eq!(history.place(Timestamp(451)), point(400, 45));
    }

    #[test]
    fn without_a_commit_below_it_the_state_is_the_one_below_the_resume_point() {
        let mut history = History::new(Timestamp(100), HISTORY);
        assert_eq!(history.place(Timestamp(100)), point(99, 0));
        assert_eq!(history.place(Timestamp(99)), None, "below the resume point");
        history.heartbeat(Timestamp(150), WallClock(15));
        history.commit(Timestamp(200), WallClock(20));
        assert_eq!(history.place(Timestamp(151)), point(99, 15));
        assert_eq!(history.place(Timestamp(150)), point(99, 0));
    }

    #[test]
    fn an_answer_that_left_the_history_is_none() {
        let mut history = History::new(Timestamp(100), 2);
        history.commit(Timestamp(200), WallClock(20));
        history.heartbeat(Timestamp(250), WallClock(25));
        history.commit(Timestamp(300), WallClock(30));
        // 200 was dropped: it is still the last commit below 300, and its heartbeat at 250
        // is kept.
        assert_eq!(history.place(Timestamp(300)), point(200, 25));
        history.commit(Timestamp(400), WallClock(40));
        history.commit(Timestamp(500), WallClock(50));
        // 300 is the newest commit dropped: it answers, without the heartbeats after it.
        assert_eq!(history.place(Timestamp(350)), point(300, 30));
        assert_eq!(history.place(Timestamp(201)), None, "200 left the history");
        assert_eq!(history.place(Timestamp(300)), None);
        // Below the run's first commit, the resume convention still holds.
        assert_eq!(history.place(Timestamp(200)), point(99, 0));
        assert_eq!(history.place(Timestamp(401)), point(400, 40));
        assert_eq!(history.place(Timestamp(501)), point(500, 50));
    }

    #[tokio::test]
    async fn a_replay_position_is_placed_once_the_stream_decoded_below_it() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.commit(Timestamp(200), 7, WallClock(20));
        tracker.heartbeat(Timestamp(260), WallClock(26));
        let wait = Duration::from_secs(60);
        assert_eq!(
            tracker.replay_point(Timestamp(261), wait).await,
            point(200, 26)
        );
        let short = Duration::from_millis(10);
        assert_eq!(tracker.replay_point(Timestamp(400), short).await, None);
        let waiting = tracker.replay_point(Timestamp(400), wait);
        let decoding = async {
            tokio::task::yield_now().await;
            tracker.commit(Timestamp(300), 8, WallClock(30));
            tracker.heartbeat(Timestamp(399), WallClock(39));
        };
        let (placed, ()) = tokio::join!(waiting, decoding);
        assert_eq!(placed, point(300, 39));
    }

    #[tokio::test]
    async fn a_restart_forgets_the_history() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.commit(Timestamp(200), 7, WallClock(20));
        tracker.heartbeat(Timestamp(900), WallClock(90));
        tracker.restart(Timestamp(1000), 0);
        // No time of the old history is carried on to the new one's positions.
        assert_eq!(tracker.progress().heartbeat_time, WallClock::default());
        let short = Duration::from_millis(10);
        assert_eq!(tracker.replay_point(Timestamp(500), short).await, None);
        tracker.heartbeat(Timestamp(1100), WallClock(110));
        assert_eq!(tracker.replay_point(Timestamp(500), short).await, None);
        assert_eq!(
            tracker.replay_point(Timestamp(1101), short).await,
            point(999, 110)
        );
    }

    fn tables(columns: &[&str]) -> Vec<(String, Vec<String>)> {
        let columns = columns.iter().map(|column| column.to_string()).collect();
        vec![("public.items".to_owned(), columns)]
    }

    fn versions(tracker: &StreamTracker) -> Vec<(u64, Vec<String>)> {
        let catalogs = tracker.catalogs();
        let columns = |version: &CatalogVersion| version.tables[0].1.clone();
        catalogs
            .iter()
            .map(|version| (version.since.0, columns(version)))
            .collect()
    }

    #[tokio::test]
    async fn a_fence_on_another_timeline_waits_for_the_stream_to_follow_it() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.follow_timeline(1);
        tracker.heartbeat(Timestamp(900), WallClock(2));
        let snapshot = Snapshot::parse("8:8:").unwrap();
        let wait = Duration::from_millis(20);
        let waited = tracker
            .certify(Timestamp(400), Some(2), &snapshot, wait)
            .await;
        assert_eq!(
            waited, None,
            "decoded past the fence, but on the timeline a failover left"
        );
        tracker.follow_timeline(2);
        let certified = tracker
            .certify(Timestamp(400), Some(2), &snapshot, wait)
            .await;
        assert!(
            certified.is_some(),
            "the stream follows the fence's timeline"
        );
    }

    #[tokio::test]
    async fn a_restart_certifies_no_fence_the_old_stream_had_passed() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.commit(Timestamp(500), 7, WallClock(1));
        tracker.heartbeat(Timestamp(900), WallClock(2));
        tracker.restart(Timestamp(300), 0);
        let snapshot = Snapshot::parse("8:8:").unwrap();
        let waited = tracker
            .certify(Timestamp(400), None, &snapshot, Duration::from_millis(20))
            .await;
        assert_eq!(
            waited, None,
            "a fence below the old position is not decoded yet"
        );
        assert_eq!(tracker.progress().commit, Timestamp(299));
        let waited = tracker.commit_lsn(7, Duration::from_millis(1), None).await;
        assert_eq!(waited, CommitWait::TimedOut);
    }

    #[test]
    fn the_schema_fence_is_the_newest_barrier_and_the_decoded_end() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.commit(Timestamp(200), 7, WallClock::default());
        tracker.barrier(Timestamp(200));
        tracker.heartbeat(Timestamp(260), WallClock::default());
        tracker.barrier(Timestamp(150)); // an older one never lowers it
        assert_eq!(tracker.schema_fence(), (Timestamp(200), Timestamp(260)));
    }

    #[test]
    fn the_barrier_starts_where_the_stream_resumes_and_moves_with_a_restart() {
        // A schema change below the resume point may have been decoded by a previous agent
        // only: older snapshots must still count as older than one.
        let tracker = StreamTracker::new(Timestamp(100), 0);
        assert_eq!(tracker.newest_barrier(), Timestamp(99));
        tracker.barrier(Timestamp(200));
        tracker.restart(Timestamp(700), 0);
        assert_eq!(tracker.newest_barrier(), Timestamp(699));
    }

    #[test]
    fn an_unchanged_catalog_adds_no_version() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.catalog(Timestamp(100), tables(&["id"]));
        tracker.catalog(Timestamp(200), tables(&["id"]));
        assert_eq!(versions(&tracker), [(100, vec!["id".to_owned()])]);
    }

    #[test]
    fn every_schema_change_adds_a_version_even_with_the_same_columns() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.catalog(Timestamp(100), tables(&["id"]));
        tracker.schema_changed(Timestamp(200), tables(&["id"]));
        tracker.schema_changed(Timestamp(150), tables(&["id", "sku"]));
        let expected = [
            (100, vec!["id".to_owned()]),
            (200, vec!["id".to_owned(), "sku".to_owned()]),
        ];
        assert_eq!(versions(&tracker), expected);
    }

    #[test]
    fn a_ddl_adds_a_version_from_its_commit() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.catalog(Timestamp(100), tables(&["id"]));
        tracker.catalog(Timestamp(300), tables(&["id", "price"]));
        let expected = [
            (100, vec!["id".to_owned()]),
            (300, vec!["id".to_owned(), "price".to_owned()]),
        ];
        assert_eq!(versions(&tracker), expected);
    }

    /// A session read the catalog at 500, then replays a DDL that committed at 300 and
    /// reads more columns: they apply from 500, never from before the reading.
    #[test]
    fn a_replayed_ddl_never_moves_a_version_back() {
        let tracker = StreamTracker::new(Timestamp(100), 0);
        tracker.catalog(Timestamp(100), tables(&["id"]));
        tracker.catalog(Timestamp(500), tables(&["id", "sku"]));
        tracker.catalog(Timestamp(300), tables(&["id", "price", "sku"]));
        let expected = [
            (100, vec!["id".to_owned()]),
            (
                500,
                vec!["id".to_owned(), "price".to_owned(), "sku".to_owned()],
            ),
        ];
        assert_eq!(versions(&tracker), expected);
    }
}

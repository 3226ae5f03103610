//! The staleness queue: bounded versions, by the time after which no reader can want them.
//!
//! A bounded version `[lo, hi)` stays readable while some reader's snapshot in `[lo, hi)` can
//! still be within the staleness limit, that is, until the first commit at or after `hi` is
//! older than the limit. Records whose commit time is known wait in `due`, a min-heap on that
//! time; records of versions whose `hi` is past every recorded commit wait in `pending`, a
//! min-heap on `hi`, until an invalidation at or after `hi` tells the time. A record names its
//! version by `(key, hi)`; a record whose version has since gone is dropped when popped, or
//! by compaction when such leftovers outnumber the live records.

use crate::entry::Key;
use crate::memory::STALE_RECORD;
use hashbrown::HashSet;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use txcache_model::{Timestamp, WallClock};

/// Bounded versions waiting for removal.
#[derive(Debug, Default)]
pub(crate) struct StaleQueue {
    due: BinaryHeap<Reverse<(WallClock, Timestamp, Key)>>,
    pending: BinaryHeap<Reverse<(Timestamp, Key)>>,
    bytes: usize,
}

/// A record is charged its heap slot and the key bytes it may keep alive.
fn cost(key: &[u8]) -> usize {
    STALE_RECORD + key.len()
}

impl StaleQueue {
    /// Accounted bytes of the queue.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.due.len() + self.pending.len()
    }

    /// Queues the version `(key, hi)` whose first commit at or after `hi` is at `time`
    /// (`None`: not known yet).
    pub fn push(&mut self, key: &Key, hi: Timestamp, time: Option<WallClock>) {
        self.bytes += cost(key);
        match time {
            Some(time) => self.due.push(Reverse((time, hi, key.clone()))),
            None => self.pending.push(Reverse((hi, key.clone()))),
        }
    }

    /// A commit at `ts` at `time`: every pending version with `hi <= ts` now knows its time.
    pub fn resolve(&mut self, ts: Timestamp, time: WallClock) {
        while self
            .pending
            .peek()
            .is_some_and(|Reverse((hi, _))| *hi <= ts)
        {
            if let Some(Reverse((hi, key))) = self.pending.pop() {
                self.due.push(Reverse((time, hi, key)));
            }
        }
    }

    /// The next version whose time is before `cutoff`, removed from the queue.
    pub fn pop_expired(&mut self, cutoff: WallClock) -> Option<(Key, Timestamp)> {
        let Reverse((time, _, _)) = self.due.peek()?;
        if *time >= cutoff {
            return None;
        }
        let Reverse((_, hi, key)) = self.due.pop()?;
        self.bytes -= cost(&key);
        Some((key, hi))
    }

    /// Keeps only records for which `live(key, hi)` holds, one per version (the latest time).
    pub fn compact(&mut self, live: impl Fn(&[u8], Timestamp) -> bool) {
        let mut due = std::mem::take(&mut self.due).into_sorted_vec();
        let mut seen = HashSet::new();
        // Ascending under `Reverse` is latest time first: the first record seen for a version,
        // the one kept, is its latest (removal may only come late, never early).
        due.retain(|Reverse((_, hi, key))| live(key, *hi) && seen.insert((key.clone(), *hi)));
        let mut pending = std::mem::take(&mut self.pending).into_vec();
        pending.retain(|Reverse((hi, key))| live(key, *hi) && seen.insert((key.clone(), *hi)));
        self.bytes = due.iter().map(|Reverse((_, _, k))| cost(k)).sum::<usize>()
            + pending.iter().map(|Reverse((_, k))| cost(k)).sum::<usize>();
        self.due = due.into();
        self.pending = pending.into();
    }

    pub fn clear(&mut self) {
        *self = StaleQueue::default();
    }

    /// The bytes recomputed from scratch (for the invariant check).
    pub fn recount(&self) -> usize {
        self.due
            .iter()
            .map(|Reverse((_, _, k))| cost(k))
            .sum::<usize>()
            + self
                .pending
                .iter()
                .map(|Reverse((_, k))| cost(k))
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::from(s.as_bytes())
    }

    #[test]
    fn pending_records_wait_for_a_commit_at_or_after_hi() {
        let mut q = StaleQueue::default();
        q.push(&key("a"), Timestamp(10), None);
        q.push(&key("b"), Timestamp(5), Some(WallClock(50)));
        assert_eq!(
            q.pop_expired(WallClock(1000)),
            Some((key("b"), Timestamp(5)))
        );
        assert_eq!(q.pop_expired(WallClock(1000)), None);
        q.resolve(Timestamp(9), WallClock(90));
        assert_eq!(q.pop_expired(WallClock(1000)), None);
        q.resolve(Timestamp(10), WallClock(100));
        assert_eq!(q.pop_expired(WallClock(100)), None);
        assert_eq!(
            q.pop_expired(WallClock(101)),
            Some((key("a"), Timestamp(10)))
        );
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn compaction_keeps_one_live_record_per_version_with_the_latest_time() {
        let mut q = StaleQueue::default();
        q.push(&key("a"), Timestamp(10), Some(WallClock(5)));
        q.push(&key("a"), Timestamp(10), Some(WallClock(7)));
        q.push(&key("b"), Timestamp(10), Some(WallClock(1)));
        q.compact(|k, _| k == b"a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.recount(), q.bytes());
        assert_eq!(q.pop_expired(WallClock(7)), None);
        assert!(q.pop_expired(WallClock(8)).is_some());
    }
}

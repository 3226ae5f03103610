//! Certifying pins: deciding which commit point an exported snapshot is (docs/agent.md, "Pins").
//!
//! A PostgreSQL snapshot on a primary need not be a prefix of commit order: a transaction's
//! commit record (and LSN) is written before it becomes visible. A pin's snapshot `S` is
//! taken in the same statement that writes a fence message, so every commit visible in `S`
//! has an LSN below the fence; when the decoder reaches the fence, every such commit has been
//! decoded. `S` is *clean* when the commits it sees are exactly those up to some LSN `t`;
//! then `ts(S) = t` and the pin is certified. Otherwise the pin is discarded.
//!
//! Commits decoded earlier than the [`CommitLog`]'s floor are not kept; certification needs
//! them all visible in `S`, which holds when `S.xmin` is above the largest xid among them.

use std::collections::VecDeque;
use txcache_model::Timestamp;

/// A snapshot as `pg_current_snapshot()::text` prints it: `xmin:xmax:xip,xip,…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Every xid below this had finished when the snapshot was taken.
    pub xmin: u64,
    /// Every xid at or above this had not started.
    pub xmax: u64,
    /// Xids in `[xmin, xmax)` still running (sorted).
    pub in_progress: Vec<u64>,
}

/// A snapshot text that is not `xmin:xmax:xip,…`.
#[derive(Debug, thiserror::Error)]
#[error("not a pg_snapshot: {0:?}")]
pub struct SnapshotParseError(String);

impl Snapshot {
    /// Parses `pg_current_snapshot()::text`.
    pub fn parse(text: &str) -> Result<Self, SnapshotParseError> {
        let error = || SnapshotParseError(text.to_owned());
        let mut parts = text.trim().splitn(3, ':');
        let number =
            |part: Option<&str>| part.and_then(|p| p.parse::<u64>().ok()).ok_or_else(error);
        let xmin = number(parts.next())?;
        let xmax = number(parts.next())?;
        let mut in_progress = match parts.next() {
            Some("") | None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(|xid| xid.parse::<u64>().map_err(|_| error()))
                .collect::<Result<Vec<_>, _>>()?,
        };
        in_progress.sort_unstable();
        Ok(Self {
            xmin,
            xmax,
            in_progress,
        })
    }

    /// Whether the (64-bit) transaction `xid` had committed visibly for this snapshot, given
    /// that it did commit.
    pub fn sees(&self, xid: u64) -> bool {
        xid < self.xmin || (xid < self.xmax && self.in_progress.binary_search(&xid).is_err())
    }

    /// Widens a 32-bit xid (as logical decoding reports it) to the 64-bit xid nearest this
    /// snapshot's `xmax`: live xids are never more than 2^31 apart.
    pub fn widen(&self, xid: u32) -> u64 {
        widen_xid(xid, self.xmax)
    }
}

/// The 64-bit xid with low bits `xid` nearest `reference`.
pub fn widen_xid(xid: u32, reference: u64) -> u64 {
    let candidate = (reference & !0xFFFF_FFFF) | u64::from(xid);
    if candidate > reference.saturating_add(1 << 31) && candidate >= 1 << 32 {
        candidate - (1 << 32)
    } else if candidate.saturating_add(1 << 31) < reference {
        candidate + (1 << 32)
    } else {
        candidate
    }
}

/// One decoded commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedCommit {
    /// Its commit LSN.
    pub lsn: Timestamp,
    /// Its top-level xid as logical decoding reports it (32 bits).
    pub xid: u32,
}

/// The commits decoded so far, in LSN order, above a floor.
///
/// Below the floor the log keeps two numbers: the floor LSN (every commit below it was
/// decoded before the log starts, or trimmed) and the largest xid among those commits that
/// a snapshot must see to have seen them all.
#[derive(Debug)]
pub struct CommitLog {
    commits: VecDeque<DecodedCommit>,
    floor: Timestamp,
    floor_xid: u64,
}

/// The verdict on one snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Certification {
    /// The snapshot is exactly the database state at this timestamp.
    Clean(Timestamp),
    /// It sees the commit at `visible` but not the earlier one at `missing`.
    Unclean {
        /// An earlier commit the snapshot does not see.
        missing: Timestamp,
        /// A later commit it does see.
        visible: Timestamp,
    },
    /// It may not see every commit below the floor (one was still finishing when it was
    /// taken); take another.
    BelowFloor,
}

impl CommitLog {
    /// A log whose stream resumes at `resume`: commits below it are not decoded in this run.
    /// `pending_xid` is the largest xid that was running when the stream position was fixed
    /// (from a snapshot taken then; 0 when none was running): a snapshot must see past it
    /// before it can be known to see every commit below `resume`.
    pub fn new(resume: Timestamp, pending_xid: u64) -> Self {
        Self {
            commits: VecDeque::new(),
            floor: resume,
            floor_xid: pending_xid,
        }
    }

    /// Records a decoded commit (in LSN order).
    pub fn push(&mut self, commit: DecodedCommit) {
        debug_assert!(self
            .commits
            .back()
            .is_none_or(|last| last.lsn <= commit.lsn));
        self.commits.push_back(commit);
    }

    /// Number of commits kept.
    pub fn len(&self) -> usize {
        self.commits.len()
    }

    /// Whether no commit is kept.
    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
    }

    /// Forgets the oldest commits that `snapshot` (just certified, fence at `fence`) sees.
    ///
    /// A commit visible in one snapshot is visible in every snapshot taken later, and the
    /// pinner takes and certifies its snapshots one at a time: every snapshot certified from
    /// now on sees what is trimmed here. Trimming by visibility, not by `xmin`, keeps the log
    /// short while a long transaction holds `xmin` back.
    pub fn trim_visible_to_all(&mut self, snapshot: &Snapshot, fence: Timestamp) {
        while let Some(oldest) = self.commits.front() {
            if oldest.lsn >= fence || !snapshot.sees(snapshot.widen(oldest.xid)) {
                break;
            }
            self.floor = oldest.lsn.next();
            self.commits.pop_front();
        }
    }

    /// Certifies `snapshot`, whose fence message is at `fence`; every commit below the fence
    /// must have been pushed already.
    pub fn certify(&self, snapshot: &Snapshot, fence: Timestamp) -> Certification {
        if snapshot.xmin <= self.floor_xid && self.floor_xid != 0 {
            return Certification::BelowFloor;
        }
        let mut last_visible = None;
        let mut first_missing = None;
        for commit in self.commits.iter().take_while(|c| c.lsn < fence) {
            if snapshot.sees(snapshot.widen(commit.xid)) {
                if let Some(missing) = first_missing {
                    return Certification::Unclean {
                        missing,
                        visible: commit.lsn,
                    };
                }
                last_visible = Some(commit.lsn);
            } else {
                first_missing.get_or_insert(commit.lsn);
            }
        }
        // Seeing no decoded commit, it is the state just below the floor.
        Certification::Clean(last_visible.unwrap_or(Timestamp(self.floor.0.saturating_sub(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(text: &str) -> Snapshot {
        Snapshot::parse(text).unwrap()
    }

    fn log(resume: u64, commits: &[(u64, u32)]) -> CommitLog {
        let mut log = CommitLog::new(Timestamp(resume), 0);
        for &(lsn, xid) in commits {
            log.push(DecodedCommit {
                lsn: Timestamp(lsn),
                xid,
            });
        }
        log
    }

    #[test]
    fn parses_snapshot_text() {
        assert_eq!(
            snapshot("10:20:"),
            Snapshot {
                xmin: 10,
                xmax: 20,
                in_progress: vec![]
            }
        );
        assert_eq!(snapshot("10:20:15,11").in_progress, vec![11, 15]);
        assert!(Snapshot::parse("10").is_err());
        assert!(Snapshot::parse("a:b:").is_err());
        assert!(Snapshot::parse("1:2:x").is_err());
    }

    #[test]
    fn visibility_follows_xmin_xmax_and_in_progress() {
        let s = snapshot("10:20:12,15");
        assert!(s.sees(9) && s.sees(10) && s.sees(11) && s.sees(19));
        assert!(!s.sees(12) && !s.sees(15) && !s.sees(20) && !s.sees(25));
    }

    #[test]
    fn widening_picks_the_nearest_epoch() {
        let epoch1 = 1u64 << 32;
        assert_eq!(widen_xid(5, epoch1 + 10), epoch1 + 5);
        assert_eq!(widen_xid(u32::MAX - 1, epoch1 + 10), epoch1 - 2);
        assert_eq!(widen_xid(5, 10), 5);
        assert_eq!(widen_xid(20, 10), 20);
        assert_eq!(widen_xid(3, epoch1 - 2), epoch1 + 3);
    }

    #[test]
    fn prefix_snapshot_is_clean_at_its_last_visible_commit() {
        let log = log(50, &[(100, 11), (200, 12), (300, 13)]);
        assert_eq!(
            log.certify(&snapshot("13:13:"), Timestamp(400)),
            Certification::Clean(Timestamp(200))
        );
        assert_eq!(
            log.certify(&snapshot("14:14:"), Timestamp(400)),
            Certification::Clean(Timestamp(300))
        );
    }

    #[test]
    fn snapshot_missing_an_earlier_commit_is_unclean() {
        // xid 12 committed first (LSN 200) but is still in progress for the snapshot,
        // which already sees xid 13 (LSN 300).
        let log = log(50, &[(100, 11), (200, 12), (300, 13)]);
        assert_eq!(
            log.certify(&snapshot("12:14:12"), Timestamp(400)),
            Certification::Unclean {
                missing: Timestamp(200),
                visible: Timestamp(300)
            }
        );
    }

    #[test]
    fn commits_after_the_fence_do_not_count() {
        let log = log(50, &[(100, 11), (500, 12)]);
        assert_eq!(
            log.certify(&snapshot("12:13:"), Timestamp(400)),
            Certification::Clean(Timestamp(100))
        );
    }

    #[test]
    fn seeing_no_decoded_commit_is_the_state_below_the_floor() {
        let log = log(50, &[(100, 11)]);
        assert_eq!(
            log.certify(&snapshot("11:12:11"), Timestamp(400)),
            Certification::Clean(Timestamp(49))
        );
    }

    #[test]
    fn a_transaction_running_at_startup_holds_certification_until_seen_finished() {
        let log = CommitLog::new(Timestamp(50), 9);
        assert_eq!(
            log.certify(&snapshot("9:12:9"), Timestamp(60)),
            Certification::BelowFloor
        );
        assert_eq!(
            log.certify(&snapshot("10:12:"), Timestamp(60)),
            Certification::Clean(Timestamp(49))
        );
    }

    #[test]
    fn a_long_transaction_does_not_stop_trimming() {
        // xid 11 runs throughout (xmin stays 11); later commits are visible and trimmed.
        let mut log = log(50, &[(100, 12), (200, 13), (300, 14)]);
        log.trim_visible_to_all(&snapshot("11:15:11"), Timestamp(400));
        assert!(log.is_empty());
        assert_eq!(
            log.certify(&snapshot("11:16:11"), Timestamp(500)),
            Certification::Clean(Timestamp(300))
        );
    }

    #[test]
    fn trimming_keeps_certification_exact() {
        let mut log = log(50, &[(100, 11), (200, 12), (300, 13)]);
        log.trim_visible_to_all(&snapshot("13:14:13"), Timestamp(250));
        assert_eq!(log.len(), 1);
        // A later snapshot seeing nothing decoded after the trim is the state at LSN 200.
        assert_eq!(
            log.certify(&snapshot("13:14:13"), Timestamp(400)),
            Certification::Clean(Timestamp(200))
        );
        assert_eq!(
            log.certify(&snapshot("14:14:"), Timestamp(400)),
            Certification::Clean(Timestamp(300))
        );
    }
}

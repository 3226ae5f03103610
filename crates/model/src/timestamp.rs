//! Points in database time and in wall-clock time.

use std::fmt;

/// A point in database time: the commit LSN of a PostgreSQL transaction.
///
/// Commit LSNs are totally ordered, so a timestamp names one commit point. Values stay within
/// `0..=i64::MAX` so that they travel as RESP integers; [`Timestamp::MAX`] is that bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The earliest timestamp, before any commit.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The largest timestamp representable on the wire (a RESP integer is an `i64`).
    pub const MAX: Timestamp = Timestamp(i64::MAX as u64);

    /// The timestamp just after this one, saturating at [`Timestamp::MAX`].
    pub fn next(self) -> Timestamp {
        Timestamp(self.0.saturating_add(1).min(Self::MAX.0))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A wall-clock instant in microseconds since the Unix epoch (PostgreSQL's commit-time unit).
///
/// Staleness limits are seconds of wall-clock time; every invalidation and heartbeat carries
/// one of these, which is how a node knows how old a version is without reading its own clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallClock(pub u64);

impl WallClock {
    /// `self` moved back by `micros`, saturating at the epoch.
    pub fn minus_micros(self, micros: u64) -> WallClock {
        WallClock(self.0.saturating_sub(micros))
    }
}

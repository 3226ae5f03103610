//! Validity intervals: the timestamps at which a cached value is correct.

use crate::Timestamp;
use std::fmt;
use std::num::NonZeroU64;

/// The half-open range `[lo, hi)` of timestamps at which a value is correct, or `[lo, ∞)`
/// when no commit has changed it yet (an *open* interval).
///
/// Invariant: `lo < hi` when bounded, so an interval is never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ValidityInterval {
    lo: Timestamp,
    /// `hi`, never zero since `hi > lo >= 0`: the zero an `Option` of it uses for open keeps
    /// the interval at two words, in every version a node stores.
    hi: Option<NonZeroU64>,
}

/// Why a pair of bounds does not make an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("empty validity interval: lo {lo} is not below hi {hi}")]
pub struct IntervalError {
    /// The lower bound given.
    pub lo: Timestamp,
    /// The upper bound given.
    pub hi: Timestamp,
}

impl ValidityInterval {
    /// `[lo, hi)`, or an error when it would be empty.
    pub fn bounded(lo: Timestamp, hi: Timestamp) -> Result<Self, IntervalError> {
        match NonZeroU64::new(hi.0) {
            Some(nonzero) if lo < hi => Ok(Self {
                lo,
                hi: Some(nonzero),
            }),
            _ => Err(IntervalError { lo, hi }),
        }
    }

    /// `[lo, ∞)`: valid from `lo` until some future commit changes it.
    pub const fn open(lo: Timestamp) -> Self {
        Self { lo, hi: None }
    }

    /// `[lo, hi)` when `hi` is given, `[lo, ∞)` otherwise.
    pub fn new(lo: Timestamp, hi: Option<Timestamp>) -> Result<Self, IntervalError> {
        match hi {
            Some(hi) => Self::bounded(lo, hi),
            None => Ok(Self::open(lo)),
        }
    }

    /// The first timestamp at which the value is valid.
    pub fn lo(&self) -> Timestamp {
        self.lo
    }

    /// The first timestamp at which the value is no longer valid; `None` while open.
    pub fn hi(&self) -> Option<Timestamp> {
        self.hi.map(|hi| Timestamp(hi.get()))
    }

    /// Whether no commit has bounded this interval yet.
    pub fn is_open(&self) -> bool {
        self.hi.is_none()
    }

    /// Whether the value is valid at `t`.
    pub fn contains(&self, t: Timestamp) -> bool {
        self.lo <= t && self.hi().is_none_or(|hi| t < hi)
    }

    /// Whether some timestamp lies in both intervals.
    pub fn overlaps(&self, other: &ValidityInterval) -> bool {
        self.intersect(other).is_some()
    }

    /// The timestamps in both intervals, or `None` when they are disjoint.
    pub fn intersect(&self, other: &ValidityInterval) -> Option<ValidityInterval> {
        let lo = self.lo.max(other.lo);
        let hi = match (self.hi(), other.hi()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self::new(lo, hi).ok()
    }

    /// The smallest interval holding both; only meaningful when they overlap or touch.
    pub fn span(&self, other: &ValidityInterval) -> ValidityInterval {
        let hi = match (self.hi(), other.hi()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        let lo = self.lo.min(other.lo);
        // Never empty: `lo` is at most either start and `hi` at least either end.
        Self::new(lo, hi).expect("the span of two intervals is never empty")
    }

    /// This interval cut off at `hi` (when that is earlier than its own end).
    pub fn truncated_at(&self, hi: Timestamp) -> Result<ValidityInterval, IntervalError> {
        let hi = self.hi().map_or(hi, |own| own.min(hi));
        Self::bounded(self.lo, hi)
    }
}

impl fmt::Display for ValidityInterval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.hi() {
            Some(hi) => write!(f, "[{}, {})", self.lo, hi),
            None => write!(f, "[{}, open)", self.lo),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(n: u64) -> Timestamp {
        Timestamp(n)
    }

    #[test]
    fn empty_bounded_interval_is_refused() {
        assert!(ValidityInterval::bounded(ts(5), ts(5)).is_err());
        assert!(ValidityInterval::bounded(ts(6), ts(5)).is_err());
    }

    #[test]
    fn an_interval_is_two_words_with_every_end_kept() {
        assert_eq!(size_of::<ValidityInterval>(), 2 * size_of::<u64>());
        let widest = ValidityInterval::bounded(ts(0), ts(u64::MAX)).unwrap();
        assert_eq!((widest.lo(), widest.hi()), (ts(0), Some(ts(u64::MAX))));
        let narrowest = ValidityInterval::bounded(ts(0), ts(1)).unwrap();
        assert_eq!(narrowest.hi(), Some(ts(1)));
        assert!(ValidityInterval::open(ts(0)).is_open());
        assert!(ValidityInterval::bounded(ts(0), ts(0)).is_err());
    }

    #[test]
    fn contains_is_half_open() {
        let i = ValidityInterval::bounded(ts(5), ts(8)).unwrap();
        assert!(!i.contains(ts(4)) && i.contains(ts(5)) && i.contains(ts(7)) && !i.contains(ts(8)));
        assert!(ValidityInterval::open(ts(5)).contains(ts(u64::MAX)));
    }

    #[test]
    fn intersect_of_touching_intervals_is_none() {
        let a = ValidityInterval::bounded(ts(1), ts(5)).unwrap();
        let b = ValidityInterval::open(ts(5));
        assert_eq!(a.intersect(&b), None);
        let c = ValidityInterval::open(ts(3));
        assert_eq!(
            a.intersect(&c),
            Some(ValidityInterval::bounded(ts(3), ts(5)).unwrap())
        );
    }

    #[test]
    fn truncation_never_extends() {
        let a = ValidityInterval::bounded(ts(1), ts(5)).unwrap();
        assert_eq!(a.truncated_at(ts(9)).unwrap(), a);
        assert_eq!(
            ValidityInterval::open(ts(1))
                .truncated_at(ts(3))
                .unwrap()
                .hi(),
            Some(ts(3))
        );
        assert!(a.truncated_at(ts(1)).is_err());
    }
}

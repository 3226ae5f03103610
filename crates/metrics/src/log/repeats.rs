//! Lines that repeat, logged without flooding: the first occurrence in full, then at most one
//! summary per interval, and (for a failure that ends) its end. [`Repeats`] is the pure
//! count for one owner; [`Throttle`] shares one between tasks, for lines a peer can cause at
//! will (refused connections, failed logins). Time is tokio's, so tests with a paused clock
//! see it move.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// What to log of one occurrence of a repeating line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The first since the repeats began: log it in full.
    First,
    /// The first one an interval after the last line: log a summary of the `count`
    /// occurrences since that line (this one included), `total` since the first, which
    /// was `failing_for` ago.
    Summary {
        /// Occurrences since the last line logged, this one included.
        count: u64,
        /// Occurrences since the first.
        total: u64,
        /// Time since the first.
        failing_for: Duration,
    },
    /// Nothing: the last line is less than an interval old.
    Quiet,
}

impl Report {
    /// Whether to log a line now.
    pub fn is_line(self) -> bool {
        self != Report::Quiet
    }
}

/// The occurrences of a line that repeats, for logging the first one, then at most one
/// summary per `interval`, and the end of a failure ([`Repeats::ended`]).
#[derive(Clone, Debug)]
pub struct Repeats {
    interval: Duration,
    first: Option<Instant>,
    last_line: Option<Instant>,
    since_line: u64,
    total: u64,
}

impl Repeats {
    /// Nothing yet; summaries at most once per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            first: None,
            last_line: None,
            since_line: 0,
            total: 0,
        }
    }

    /// It occurred (again) at `now`: what to log of it.
    pub fn occurred(&mut self, now: Instant) -> Report {
        self.total += 1;
        self.since_line += 1;
        let first = *self.first.get_or_insert(now);
        let report = match self.last_line {
            None => Report::First,
            Some(last) if now.saturating_duration_since(last) >= self.interval => Report::Summary {
                count: self.since_line,
                total: self.total,
                failing_for: now.saturating_duration_since(first),
            },
            Some(_) => Report::Quiet,
        };
        if report.is_line() {
            self.last_line = Some(now);
            self.since_line = 0;
        }
        report
    }

    /// The failure ended at `now` (a success): how many occurrences there were and for how
    /// long, when there were any; the next one is a [`Report::First`] again.
    pub fn ended(&mut self, now: Instant) -> Option<(u64, Duration)> {
        let first = self.first?;
        let ended = (self.total, now.saturating_duration_since(first));
        *self = Self::new(self.interval);
        Some(ended)
    }
}

/// One [`Repeats`] shared by the tasks that may log a kind of line (usable in a `static`).
#[derive(Debug)]
pub struct Throttle {
    repeats: Mutex<Repeats>,
}

impl Throttle {
    /// Lines of one kind are logged at most once per `interval` (the first at once).
    pub const fn new(interval: Duration) -> Self {
        Self {
            repeats: Mutex::new(Repeats::new(interval)),
        }
    }

    /// A line of this kind occurred now: what to log of it.
    pub fn occurred(&self) -> Report {
        let mut repeats = self.repeats.lock().unwrap_or_else(PoisonError::into_inner);
        repeats.occurred(Instant::now())
    }

    /// `Some(held)`: log this line now, with the count of lines of its kind not logged since
    /// the last one; `None`: stay quiet.
    pub fn admit(&self) -> Option<u64> {
        match self.occurred() {
            Report::First => Some(0),
            Report::Summary { count, .. } => Some(count - 1),
            Report::Quiet => None,
        }
    }
}

/// `duration` to the second (at least the millisecond below one), for a log line.
pub fn rounded(duration: Duration) -> Duration {
    if duration >= Duration::from_secs(1) {
        Duration::from_secs(duration.as_secs())
    } else {
        Duration::from_millis(duration.as_millis() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeating_failure_is_logged_first_then_summarised_once_per_interval() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut repeats = Repeats::new(Duration::from_secs(30));
        assert_eq!(repeats.occurred(at(0)), Report::First);
        // One a second for 34 s: a single summary, at the first past 30 s.
        let reports: Vec<Report> = (1..=34).map(|s| repeats.occurred(at(s))).collect();
        let lines: Vec<&Report> = reports.iter().filter(|r| r.is_line()).collect();
        let summary = Report::Summary {
            count: 30,
            total: 31,
            failing_for: Duration::from_secs(30),
        };
        assert_eq!(lines, [&summary]);
        assert_eq!(repeats.ended(at(35)), Some((35, Duration::from_secs(35))));
        // Ended: nothing more to say, and the next failure is a first again.
        assert_eq!(repeats.ended(at(36)), None);
        assert_eq!(repeats.occurred(at(40)), Report::First);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_logs_the_first_then_one_per_interval_with_the_count_held() {
        let throttle = Throttle::new(Duration::from_secs(60));
        let after = |seconds| tokio::time::advance(Duration::from_secs(seconds));
        assert_eq!(throttle.admit(), Some(0));
        after(1).await;
        assert_eq!(throttle.admit(), None);
        after(58).await;
        assert_eq!(throttle.admit(), None);
        after(1).await;
        assert_eq!(throttle.admit(), Some(2));
        after(140).await;
        assert_eq!(throttle.admit(), Some(0));
    }

    #[test]
    fn durations_in_log_lines_are_rounded() {
        assert_eq!(
            rounded(Duration::from_millis(34_567)),
            Duration::from_secs(34)
        );
        assert_eq!(
            rounded(Duration::from_micros(1_500)),
            Duration::from_millis(1)
        );
    }
}

//! Retrying without flooding the log: [`Backoff`], the delay between attempts, doubling to
//! a cap; and [`Repeats`], what to log of a failure that repeats — the first occurrence,
//! then at most one summary per interval, and the end (pure but for the sleep).

use std::time::Duration;
use tokio::time::Instant;

/// The delay before each next attempt: `first`, doubling up to `cap`, back to `first` after
/// a [`reset`](Backoff::reset) (a success).
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    /// A backoff starting at `first` and doubling to `cap`.
    pub const fn new(first: Duration, cap: Duration) -> Self {
        Self {
            first,
            cap,
            next: first,
        }
    }

    /// The delay before the next attempt; the one after is twice it, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.cap);
        delay
    }

    /// Sleeps [`next_delay`](Backoff::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// The attempts succeeded: the next failure waits `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// What to log of one occurrence of a repeating failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The first since the failures began: log it in full.
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

/// The occurrences of a failure that repeats, for logging the first one, then at most one
/// summary per `interval`, and its end ([`Repeats::ended`]).
#[derive(Clone, Debug)]
pub struct Repeats {
    interval: Duration,
    first: Option<Instant>,
    last_line: Option<Instant>,
    since_line: u64,
    total: u64,
}

impl Repeats {
    /// No failure yet; summaries at most once per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            first: None,
            last_line: None,
            since_line: 0,
            total: 0,
        }
    }

    /// The failure occurred (again) at `now`: what to log of it.
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
        if report != Report::Quiet {
            self.last_line = Some(now);
            self.since_line = 0;
        }
        report
    }

    /// The failures ended at `now` (a success): how many there were and for how long, when
    /// there were any; the next one is a [`Report::First`] again.
    pub fn ended(&mut self, now: Instant) -> Option<(u64, Duration)> {
        let first = self.first?;
        let ended = (self.total, now.saturating_duration_since(first));
        *self = Self::new(self.interval);
        Some(ended)
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
    fn the_backoff_doubles_to_its_cap_and_restarts_after_a_success() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<u128> = (0..6).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn a_repeating_failure_is_logged_first_then_summarised_once_per_interval() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut repeats = Repeats::new(Duration::from_secs(30));
        assert_eq!(repeats.occurred(at(0)), Report::First);
        // One a second for 34 s: a single summary, at the first past 30 s.
        let reports: Vec<Report> = (1..=34).map(|s| repeats.occurred(at(s))).collect();
        let lines: Vec<&Report> = reports.iter().filter(|r| **r != Report::Quiet).collect();
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

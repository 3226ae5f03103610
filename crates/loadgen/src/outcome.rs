//! What a run counted: requests by kind and reply, and the latency histogram.

use crate::histogram::Histogram;
use crate::protocol::Reply;
use crate::workload::Op;
use std::time::Duration;

/// Counts and latencies of one connection, or of a whole run once merged.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Every request answered, warm-up included (for CPU per request on the server).
    pub requests: u64,
    /// Measured lookups.
    pub gets: u64,
    /// Measured stores.
    pub sets: u64,
    /// Measured lookups that found a value.
    pub hits: u64,
    /// Measured lookups that found nothing.
    pub misses: u64,
    /// Error replies, warm-up included.
    pub errors: u64,
    /// Requests sent but never answered before the drain deadline (open loop).
    pub unanswered: u64,
    /// Latencies of the measured requests, in nanoseconds.
    pub latency: Histogram,
    /// Open loop: the sum of (actual − intended) send times, in nanoseconds.
    pub send_lag_ns: u128,
}

impl Outcome {
    /// Counts one reply to a request of kind `op`; `latency` is recorded when `measured`.
    pub fn record(&mut self, op: Op, reply: Reply, latency: Duration, measured: bool) {
        self.requests += 1;
        self.errors += u64::from(reply == Reply::Error);
        if !measured {
            return;
        }
        self.latency
            .record(latency.as_nanos().min(u128::from(u64::MAX)) as u64);
        match op {
            Op::Get => {
                self.gets += 1;
                self.hits += u64::from(reply == Reply::Value);
                self.misses += u64::from(reply == Reply::Miss);
            }
            Op::Set => self.sets += 1,
        }
    }

    /// Adds `other`'s counts and latencies.
    pub fn merge(&mut self, other: &Outcome) {
        self.requests += other.requests;
        self.gets += other.gets;
        self.sets += other.sets;
        self.hits += other.hits;
        self.misses += other.misses;
        self.errors += other.errors;
        self.unanswered += other.unanswered;
        self.latency.merge(&other.latency);
        self.send_lag_ns += other.send_lag_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_replies_count_only_as_requests_and_errors() {
        let mut o = Outcome::default();
        let us = Duration::from_micros(1);
        o.record(Op::Get, Reply::Value, us, false);
        o.record(Op::Set, Reply::Error, us, false);
        o.record(Op::Get, Reply::Miss, us * 3, true);
        o.record(Op::Get, Reply::Value, us * 5, true);
        o.record(Op::Set, Reply::Status, us, true);
        let mut total = Outcome::default();
        total.merge(&o);
        total.merge(&o);
        assert_eq!((total.requests, total.errors), (10, 2));
        assert_eq!(
            (total.gets, total.hits, total.misses, total.sets),
            (4, 2, 2, 2)
        );
        assert_eq!(total.latency.count(), 6);
        assert_eq!(total.latency.max(), 5_000);
    }
}

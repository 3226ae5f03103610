//! The machine's memory latency at the moment, measured beside a benchmark.
//!
//! A cache server's request is mostly a chain of dependent cache misses (hash slot, item,
//! value). On a shared host the time of one miss moves with what the neighbours do to the
//! shared caches, so two servers with different chains move by different factors; a
//! benchmark that records this latency next to its rounds can tell a changed host from a
//! changed server.

use crate::rng::Rng;
use std::time::{Duration, Instant};

/// What one probe measured.
#[derive(Clone, Copy, Debug)]
pub struct MemoryLatency {
    /// Mean nanoseconds per load, each load's address read by the one before it.
    pub ns_per_load: f64,
    /// Loads made.
    pub loads: u64,
    /// The memory chased through, bytes.
    pub bytes: usize,
}

/// Chases one random cycle through `bytes` of memory for about `duration`: every load's
/// address is the previous load's value, so no two loads overlap and the mean time per load
/// is the latency of the level of the memory hierarchy that holds `bytes`.
pub fn probe(bytes: usize, duration: Duration, seed: u64) -> MemoryLatency {
    let next = random_cycle(bytes / std::mem::size_of::<u32>(), seed);
    let mut at = 0u32;
    let mut loads = 0u64;
    let started = Instant::now();
    // Chase in rounds of a fixed count so the clock is read rarely.
    while started.elapsed() < duration {
        for _ in 0..(1 << 16) {
            at = next[at as usize];
        }
        loads += 1 << 16;
    }
    let elapsed = started.elapsed();
    std::hint::black_box(at);
    MemoryLatency {
        ns_per_load: elapsed.as_nanos() as f64 / loads.max(1) as f64,
        loads,
        bytes: next.len() * std::mem::size_of::<u32>(),
    }
}

/// `next[i]` for a single cycle through all `len` slots in random order (Sattolo's
/// algorithm: a uniformly random cyclic permutation, so the chase visits every slot before
/// it repeats and no prefetcher can guess the next address).
fn random_cycle(len: usize, seed: u64) -> Vec<u32> {
    let len = len.clamp(2, u32::MAX as usize);
    let mut next: Vec<u32> = (0..len as u32).collect();
    let mut rng = Rng::new(seed);
    for i in (1..len).rev() {
        let j = (rng.next_u64() % i as u64) as usize;
        next.swap(i, j);
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cycle_visits_every_slot_once() {
        for len in [2, 3, 10, 1000] {
            let next = random_cycle(len, 7);
            let mut seen = vec![false; len];
            let mut at = 0usize;
            for _ in 0..len {
                assert!(!seen[at], "slot {at} visited twice in a cycle of {len}");
                seen[at] = true;
                at = next[at] as usize;
            }
            assert_eq!(at, 0, "the chase is one cycle of length {len}");
        }
    }

    #[test]
    fn a_probe_reports_loads_and_a_positive_latency() {
        let measured = probe(1 << 16, Duration::from_millis(5), 1);
        assert!(measured.loads >= 1 << 16);
        assert!(measured.ns_per_load > 0.0);
        assert_eq!(measured.bytes, 1 << 16);
    }
}

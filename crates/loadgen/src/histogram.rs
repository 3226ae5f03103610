//! A latency histogram with bounded relative error (log-linear buckets, as HdrHistogram).
//!
//! Values are nanoseconds. Below 128 every value has its own bucket; above, each power of two
//! is split into 64 buckets, so a reported quantile is within 1/64 (1.6 %) of the truth.
//! Recording is an index computation and an increment; histograms of several connections
//! merge by adding counts.

/// Buckets per power of two (as a bit count): 2^6 = 64.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Enough buckets for every `u64`.
const BUCKETS: usize = ((64 - SUB_BITS as usize) * SUB as usize) + SUB as usize;

/// Counts of latencies, with their exact sum and maximum.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
            sum: 0,
            max: 0,
        }
    }
}

/// The bucket holding `value`.
fn index(value: u64) -> usize {
    let magnitude = 63 - (value | 1).leading_zeros();
    let shift = magnitude.saturating_sub(SUB_BITS);
    (u64::from(shift) * SUB + (value >> shift)) as usize
}

/// The smallest value and the width of bucket `index`.
fn bucket(index: usize) -> (u64, u64) {
    let index = index as u64;
    if index < 2 * SUB {
        return (index, 1);
    }
    let shift = index / SUB - 1;
    ((index - shift * SUB) << shift, 1 << shift)
}

impl Histogram {
    /// Counts one latency of `nanos` nanoseconds.
    pub fn record(&mut self, nanos: u64) {
        self.counts[index(nanos)] += 1;
        self.total += 1;
        self.sum += u128::from(nanos);
        self.max = self.max.max(nanos);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// How many latencies were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The exact mean in nanoseconds (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.sum as f64 / self.total as f64
    }

    /// The largest latency recorded.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `fraction` quantile (nearest rank): the middle of the bucket holding it, never
    /// above the maximum. 0 when empty.
    pub fn quantile(&self, fraction: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((fraction * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, width) = bucket(i);
                return (low + width / 2).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_line_without_gaps() {
        let mut expected_low = 0;
        for i in 0..BUCKETS {
            let (low, width) = bucket(i);
            assert_eq!(low, expected_low, "bucket {i}");
            assert_eq!(index(low), i);
            assert_eq!(index(low + (width - 1)), i);
            expected_low = low.wrapping_add(width);
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn small_values_are_exact_and_large_ones_within_two_percent() {
        let mut h = Histogram::default();
        for v in 0..100 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 49);
        assert_eq!(h.quantile(1.0), 99);
        for v in [1_000u64, 12_345, 987_654, 5_000_000_000] {
            let mut one = Histogram::default();
            one.record(v);
            one.record(v + 1);
            let q = one.quantile(0.5) as f64;
            assert!((q - v as f64).abs() / (v as f64) < 1.0 / 64.0, "{v} -> {q}");
        }
    }

    #[test]
    fn quantiles_mean_and_merge() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        for v in 1..=1000u64 {
            a.record(v * 1000);
        }
        b.record(10_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 1001);
        assert_eq!(a.max(), 10_000_000);
        let p50 = a.quantile(0.5) as f64;
        assert!((p50 - 501_000.0).abs() / 501_000.0 < 0.02, "{p50}");
        let p99 = a.quantile(0.99) as f64;
        assert!((p99 - 991_000.0).abs() / 991_000.0 < 0.02, "{p99}");
        assert_eq!(a.quantile(1.0), 10_000_000);
        let mean = (500_500_000.0 + 10_000_000.0) / 1001.0;
        assert!((a.mean() - mean).abs() < 1e-6);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }
}

//! The distributions a workload draws from: Zipf key popularity, and the key and value sizes
//! of Facebook's ETC pool (Atikoglu et al., SIGMETRICS 2012, as parameterized in mutilate).
//!
//! Every sampler takes the [`Rng`] explicitly, so a connection's sequence is reproducible.

use crate::rng::Rng;

/// The largest key memcached accepts; ETC key sizes are clamped to it.
pub const MAX_KEY_LEN: usize = 250;

/// The largest value drawn from the ETC distribution: memcached's default item limit is
/// 1 MiB including the item header, so the (rare: p < 10⁻⁶) larger draws are clamped.
pub const MAX_VALUE_LEN: usize = 1_000_000;

/// Zipf-distributed ranks `1..=n` with `P(k) ∝ k^-exponent`, by rejection-inversion
/// (Hörmann and Derflinger 1996): O(1) per draw and no table, whatever `n` is.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    exponent: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl Zipf {
    /// Ranks `1..=n` (`n >= 1`) with exponent `exponent > 0` (YCSB's default is 0.99).
    pub fn new(n: u64, exponent: f64) -> Self {
        assert!(
            n >= 1 && exponent > 0.0,
            "Zipf needs n >= 1 and exponent > 0"
        );
        let h_integral_x1 = h_integral(1.5, exponent) - 1.0;
        let h_integral_n = h_integral(n as f64 + 0.5, exponent);
        let s = 2.0 - h_integral_inverse(h_integral(2.5, exponent) - h(2.0, exponent), exponent);
        Self {
            n: n as f64,
            exponent,
            h_integral_x1,
            h_integral_n,
            s,
        }
    }

    /// One rank in `1..=n`; 1 is the most popular.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let e = self.exponent;
        loop {
            let u = self.h_integral_n + rng.open01() * (self.h_integral_x1 - self.h_integral_n);
            let x = h_integral_inverse(u, e);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= h_integral(k + 0.5, e) - h(k, e) {
                return k as u64;
            }
        }
    }
}

/// `x^-e`.
fn h(x: f64, e: f64) -> f64 {
    (-e * x.ln()).exp()
}

/// An antiderivative of `h`, continuous in `e` (also at `e = 1`).
fn h_integral(x: f64, e: f64) -> f64 {
    let log_x = x.ln();
    exp_m1_over_x((1.0 - e) * log_x) * log_x
}

/// The inverse of [`h_integral`].
fn h_integral_inverse(x: f64, e: f64) -> f64 {
    let t = (x * (1.0 - e)).max(-1.0);
    (ln_1p_over_x(t) * x).exp()
}

/// `ln(1 + x) / x`, accurate near 0.
fn ln_1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn exp_m1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// The generalized extreme value distribution (shape `k != 0`), by inversion.
#[derive(Clone, Copy, Debug)]
pub struct Gev {
    /// Location μ.
    pub mu: f64,
    /// Scale σ.
    pub sigma: f64,
    /// Shape k (ξ).
    pub k: f64,
}

impl Gev {
    /// ETC key sizes in bytes.
    pub const ETC_KEYS: Gev = Gev {
        mu: 30.7984,
        sigma: 8.20449,
        k: 0.078688,
    };

    /// One draw: `μ + σ((−ln u)^−k − 1)/k`.
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        self.mu + self.sigma * ((-rng.open01().ln()).powf(-self.k) - 1.0) / self.k
    }

    /// The cumulative distribution function.
    pub fn cdf(&self, x: f64) -> f64 {
        let t = 1.0 + self.k * (x - self.mu) / self.sigma;
        if t <= 0.0 {
            return if self.k > 0.0 { 0.0 } else { 1.0 };
        }
        (-t.powf(-1.0 / self.k)).exp()
    }
}

/// The generalized Pareto distribution (shape `k != 0`), by inversion.
#[derive(Clone, Copy, Debug)]
pub struct GPareto {
    /// Location θ: the smallest value.
    pub theta: f64,
    /// Scale σ.
    pub sigma: f64,
    /// Shape k.
    pub k: f64,
}

impl GPareto {
    /// The tail of ETC value sizes in bytes (above the discrete head 0–14).
    pub const ETC_VALUES: GPareto = GPareto {
        theta: 15.0,
        sigma: 214.476,
        k: 0.348238,
    };

    /// One draw: `θ + σ(u^−k − 1)/k`.
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        self.theta + self.sigma * (rng.open01().powf(-self.k) - 1.0) / self.k
    }

    /// The cumulative distribution function.
    pub fn cdf(&self, x: f64) -> f64 {
        if x <= self.theta {
            return 0.0;
        }
        1.0 - (1.0 + self.k * (x - self.theta) / self.sigma).powf(-1.0 / self.k)
    }
}

/// ETC's discrete head: `(size, probability)` for values of 0–14 bytes, together 44.155 %.
pub const ETC_VALUE_HEAD: [(usize, f64); 15] = [
    (0, 0.00536),
    (1, 0.00047),
    (2, 0.17820),
    (3, 0.09239),
    (4, 0.00018),
    (5, 0.02740),
    (6, 0.00065),
    (7, 0.00606),
    (8, 0.00023),
    (9, 0.00837),
    (10, 0.00837),
    (11, 0.08989),
    (12, 0.00092),
    (13, 0.00326),
    (14, 0.01980),
];

/// A size distribution for keys or values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Size {
    /// Always this many bytes.
    Fixed(usize),
    /// Facebook ETC: [`Gev::ETC_KEYS`] for keys; [`ETC_VALUE_HEAD`] then
    /// [`GPareto::ETC_VALUES`] for values.
    Etc,
}

impl Size {
    /// A value size in bytes.
    pub fn value_len(&self, rng: &mut Rng) -> usize {
        match *self {
            Size::Fixed(len) => len,
            Size::Etc => etc_value_len(rng),
        }
    }

    /// A key size in bytes, at least `min` (what the key's identifying part needs).
    pub fn key_len(&self, rng: &mut Rng, min: usize) -> usize {
        let len = match *self {
            Size::Fixed(len) => len,
            Size::Etc => Gev::ETC_KEYS.sample(rng).clamp(1.0, MAX_KEY_LEN as f64) as usize,
        };
        len.max(min)
    }
}

/// One ETC value size: the discrete head with its probabilities, else the Pareto tail.
fn etc_value_len(rng: &mut Rng) -> usize {
    let mut u = rng.open01();
    for &(len, probability) in &ETC_VALUE_HEAD {
        if u < probability {
            return len;
        }
        u -= probability;
    }
    (GPareto::ETC_VALUES.sample(rng) as usize).min(MAX_VALUE_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAWS: usize = 400_000;

    /// Exact Zipf probabilities of ranks 1..=n.
    fn zipf_pmf(n: u64, e: f64) -> Vec<f64> {
        let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-e)).collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    }

    #[test]
    fn zipf_frequencies_match_the_exact_pmf() {
        for exponent in [0.5, 0.99, 1.0, 1.5] {
            let n = 20;
            let zipf = Zipf::new(n, exponent);
            let mut rng = Rng::new(3);
            let mut counts = vec![0usize; n as usize];
            for _ in 0..DRAWS {
                counts[zipf.sample(&mut rng) as usize - 1] += 1;
            }
            for (rank, (&count, p)) in counts.iter().zip(zipf_pmf(n, exponent)).enumerate() {
                let expected = p * DRAWS as f64;
                let tolerance = 5.0 * expected.sqrt();
                assert!(
                    (count as f64 - expected).abs() < tolerance,
                    "exponent {exponent} rank {}: {count} vs {expected:.0}",
                    rank + 1
                );
            }
        }
    }

    #[test]
    fn zipf_stays_in_range_for_one_and_for_many_keys() {
        let mut rng = Rng::new(4);
        let one = Zipf::new(1, 0.99);
        assert!((0..1000).all(|_| one.sample(&mut rng) == 1));
        let many = Zipf::new(10_000_000, 0.99);
        let draws: Vec<u64> = (0..100_000).map(|_| many.sample(&mut rng)).collect();
        assert!(draws.iter().all(|&k| (1..=10_000_000).contains(&k)));
        // The hottest key of 10 M at 0.99 gets about 1/H(10M, 0.99) ≈ 5.9 % of draws.
        let hottest = draws.iter().filter(|&&k| k == 1).count() as f64 / draws.len() as f64;
        assert!((0.052..0.066).contains(&hottest), "{hottest}");
    }

    /// The empirical CDF of `draws` at `x`.
    fn ecdf(draws: &[f64], x: f64) -> f64 {
        draws.iter().filter(|&&d| d <= x).count() as f64 / draws.len() as f64
    }

    #[test]
    fn gev_key_sizes_follow_their_cdf() {
        let gev = Gev::ETC_KEYS;
        let mut rng = Rng::new(5);
        let draws: Vec<f64> = (0..DRAWS).map(|_| gev.sample(&mut rng)).collect();
        for x in [20.0, 25.0, 30.0, 35.0, 45.0, 60.0, 90.0] {
            let (seen, want) = (ecdf(&draws, x), gev.cdf(x));
            assert!((seen - want).abs() < 0.004, "F({x}) {seen} vs {want}");
        }
        // The mode sits at μ; the median a little above it (k > 0: right-skewed).
        assert!((gev.cdf(33.86) - 0.5).abs() < 0.01);
    }

    #[test]
    fn pareto_tail_follows_its_cdf_and_mean() {
        let gp = GPareto::ETC_VALUES;
        let mut rng = Rng::new(6);
        let draws: Vec<f64> = (0..DRAWS).map(|_| gp.sample(&mut rng)).collect();
        assert!(draws.iter().all(|&d| d >= 15.0));
        for x in [50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0] {
            let (seen, want) = (ecdf(&draws, x), gp.cdf(x));
            assert!((seen - want).abs() < 0.004, "F({x}) {seen} vs {want}");
        }
        let mean = draws.iter().sum::<f64>() / DRAWS as f64;
        let want = gp.theta + gp.sigma / (1.0 - gp.k); // ≈ 344 B
        assert!((mean - want).abs() / want < 0.03, "mean {mean} vs {want}");
    }

    #[test]
    fn etc_values_have_the_discrete_head_then_the_tail() {
        let head_total: f64 = ETC_VALUE_HEAD.iter().map(|(_, p)| p).sum();
        assert!((head_total - 0.44155).abs() < 1e-9);
        let mut rng = Rng::new(7);
        let draws: Vec<usize> = (0..DRAWS).map(|_| Size::Etc.value_len(&mut rng)).collect();
        let share = |pred: &dyn Fn(usize) -> bool| {
            draws.iter().filter(|&&d| pred(d)).count() as f64 / DRAWS as f64
        };
        assert!((share(&|d| d < 15) - 0.44155).abs() < 0.004);
        assert!((share(&|d| d == 2) - 0.17820).abs() < 0.003);
        assert!((share(&|d| d == 11) - 0.08989).abs() < 0.003);
        assert!(share(&|d| d == 4 || d == 8) < 0.001);
        assert!(draws.iter().all(|&d| d <= MAX_VALUE_LEN));
    }

    #[test]
    fn key_sizes_respect_the_minimum_and_memcached_limit() {
        let mut rng = Rng::new(8);
        assert_eq!(Size::Fixed(16).key_len(&mut rng, 4), 16);
        assert_eq!(Size::Fixed(4).key_len(&mut rng, 9), 9);
        for _ in 0..100_000 {
            let len = Size::Etc.key_len(&mut rng, 8);
            assert!((8..=MAX_KEY_LEN).contains(&len));
        }
    }
}

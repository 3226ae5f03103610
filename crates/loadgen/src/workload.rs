//! What a run asks for: the key space, which keys and sizes, the mix of lookups and stores;
//! and [`Requests`], the per-connection source of encoded requests.

use crate::dist::{Size, Zipf, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::protocol::Protocol;
use crate::rng::{splitmix, Rng};
use bytes::BytesMut;
use std::sync::Arc;

/// How keys are picked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Zipf with this exponent: key 0 is the most popular.
    Zipf(f64),
}

/// The kind of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A lookup.
    Get,
    /// A store.
    Set,
}

/// Everything that defines the requests of a run; shared by all connections.
#[derive(Debug)]
pub struct Workload {
    /// The wire protocol and command pair.
    pub protocol: Protocol,
    /// Keys are `0..keys`.
    pub keys: u64,
    /// Which keys are picked.
    pub key_dist: KeyDist,
    /// Value sizes.
    pub value_size: Size,
    /// The fraction of requests that are lookups.
    pub get_fraction: f64,
    /// Each key's length (fixed for a key across the run, so a store and a later lookup name
    /// the same key).
    key_lens: Vec<u8>,
    /// Bytes values are cut from (varied, so that stores do not all carry equal values).
    value_pool: Vec<u8>,
}

impl Workload {
    /// A workload; key lengths are drawn once per key (deterministically from `seed`).
    pub fn new(
        protocol: Protocol,
        keys: u64,
        key_dist: KeyDist,
        key_size: Size,
        value_size: Size,
        get_fraction: f64,
        seed: u64,
    ) -> Self {
        let key_lens = (0..keys)
            .map(|i| {
                let mut rng = Rng::new(splitmix(seed ^ i));
                key_size
                    .key_len(&mut rng, key_prefix_len(i))
                    .min(MAX_KEY_LEN) as u8
            })
            .collect();
        let mut rng = Rng::new(seed);
        let value_pool = (0..MAX_VALUE_LEN + 4096)
            .map(|_| b'a' + rng.below(26) as u8)
            .collect();
        Self {
            protocol,
            keys,
            key_dist,
            value_size,
            get_fraction,
            key_lens,
            value_pool,
        }
    }

    /// Appends key `index` to `out`: `k<index>:` padded with `x` to the key's length.
    pub fn write_key(&self, index: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.push(b'k');
        // The digits by hand, least significant first, then reversed: `write!` costs the
        // load tool, which shares the CPUs with the server, ~150 instructions per request.
        let digits = out.len();
        let mut rest = index;
        loop {
            out.push(b'0' + (rest % 10) as u8);
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        out[digits..].reverse();
        out.push(b':');
        let len = usize::from(self.key_lens[index as usize]);
        out.resize(start + len.max(out.len() - start), b'x');
    }

    /// The mean key length in bytes.
    pub fn mean_key_len(&self) -> f64 {
        let total: u64 = self.key_lens.iter().map(|&l| u64::from(l)).sum();
        total as f64 / self.keys.max(1) as f64
    }
}

/// The length of `k<index>:`, the part of a key that names it.
fn key_prefix_len(index: u64) -> usize {
    index.checked_ilog10().unwrap_or(0) as usize + 3
}

/// The most connections a run may have. Each owns a range of versions ([`Requests::new`]);
/// the preload's connections own the ranges after all of theirs ([`Requests::preloading`]).
pub const MAX_CONNECTIONS: usize = 1024;

/// Versions each request source may store: its range is `(source + 1) << VERSION_BITS` on.
const VERSION_BITS: u32 = 40;

/// One connection's request source: its own random sequence and version counter.
pub struct Requests {
    workload: Arc<Workload>,
    rng: Rng,
    zipf: Option<Zipf>,
    next_version: u64,
    key: Vec<u8>,
}

impl Requests {
    /// The source of the run's connection `connection` (below [`MAX_CONNECTIONS`]), which
    /// seeds it and owns a range of versions.
    pub fn new(workload: Arc<Workload>, connection: u64, seed: u64) -> Self {
        debug_assert!(
            connection < MAX_CONNECTIONS as u64,
            "connection {connection}"
        );
        Self::source(workload, connection, seed)
    }

    /// The source of the preload's connection `connection`: a sequence and a range of
    /// versions of its own, after (and above) every run connection's, so that no store of a
    /// run repeats a preloaded version (the two once shared connections 1000 and up) and a
    /// run's stores land below the preloaded versions.
    pub fn preloading(workload: Arc<Workload>, connection: u64, seed: u64) -> Self {
        Self::source(workload, MAX_CONNECTIONS as u64 + connection, seed)
    }

    /// Request source number `source`: its random sequence and its range of versions.
    fn source(workload: Arc<Workload>, source: u64, seed: u64) -> Self {
        let zipf = match workload.key_dist {
            KeyDist::Zipf(exponent) => Some(Zipf::new(workload.keys, exponent)),
            KeyDist::Uniform => None,
        };
        Self {
            workload,
            rng: Rng::new(splitmix(seed.wrapping_add(source + 1))),
            zipf,
            next_version: (source + 1) << VERSION_BITS,
            key: Vec::with_capacity(MAX_KEY_LEN),
        }
    }

    /// Appends the next request of the mix to `out`; returns its kind.
    pub fn next(&mut self, out: &mut BytesMut) -> Op {
        let index = match &self.zipf {
            Some(zipf) => zipf.sample(&mut self.rng) - 1,
            None => self.rng.below(self.workload.keys),
        };
        if self.rng.open01() < self.workload.get_fraction {
            self.get(index, out);
            Op::Get
        } else {
            self.set(index, out);
            Op::Set
        }
    }

    /// Appends a lookup of key `index`.
    pub fn get(&mut self, index: u64, out: &mut BytesMut) {
        self.key.clear();
        self.workload.write_key(index, &mut self.key);
        self.workload.protocol.encode_get(out, &self.key);
    }

    /// Appends a store to key `index` (a value of the workload's size, a fresh version).
    pub fn set(&mut self, index: u64, out: &mut BytesMut) {
        let len = self.workload.value_size.value_len(&mut self.rng);
        let pool = &self.workload.value_pool;
        let offset = self.rng.below((pool.len() - len) as u64) as usize;
        self.key.clear();
        self.workload.write_key(index, &mut self.key);
        let version = self.next_version;
        self.next_version += 1;
        self.workload
            .protocol
            .encode_set(out, &self.key, &pool[offset..offset + len], version);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(keys: u64, key_dist: KeyDist, key_size: Size, get: f64) -> Arc<Workload> {
        Arc::new(Workload::new(
            Protocol::Memcache,
            keys,
            key_dist,
            key_size,
            Size::Fixed(100),
            get,
            1,
        ))
    }

    #[test]
    fn keys_are_named_and_padded_to_their_length() {
        let w = workload(1000, KeyDist::Uniform, Size::Fixed(16), 0.9);
        let mut out = Vec::new();
        w.write_key(42, &mut out);
        assert_eq!(out, b"k42:xxxxxxxxxxxx");
        out.clear();
        w.write_key(0, &mut out);
        assert_eq!(out, b"k0:xxxxxxxxxxxxx");
        out.clear();
        w.write_key(990, &mut out);
        assert_eq!(out, b"k990:xxxxxxxxxxx");
        assert_eq!(w.mean_key_len(), 16.0);
        let short = workload(1000, KeyDist::Uniform, Size::Fixed(2), 0.9);
        out.clear();
        short.write_key(999, &mut out);
        assert_eq!(out, b"k999:");
    }

    #[test]
    fn etc_keys_keep_one_length_per_key() {
        let w = workload(10_000, KeyDist::Uniform, Size::Etc, 0.9);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        w.write_key(7, &mut a);
        w.write_key(7, &mut b);
        assert_eq!(a, b);
        assert!(
            (30.0..40.0).contains(&w.mean_key_len()),
            "{}",
            w.mean_key_len()
        );
    }

    #[test]
    fn the_mix_follows_the_get_fraction() {
        for (fraction, low, high) in [(0.9, 0.89, 0.91), (30.0 / 31.0, 0.961, 0.974)] {
            let w = workload(1000, KeyDist::Uniform, Size::Fixed(16), fraction);
            let mut requests = Requests::new(w, 0, 9);
            let mut out = BytesMut::new();
            let gets = (0..50_000)
                .filter(|_| requests.next(&mut out) == Op::Get)
                .count() as f64
                / 50_000.0;
            assert!((low..high).contains(&gets), "{gets}");
        }
    }

    #[test]
    fn zipf_keys_favour_key_zero() {
        let w = workload(1000, KeyDist::Zipf(0.99), Size::Fixed(16), 1.0);
        let mut requests = Requests::new(w, 0, 9);
        let mut out = BytesMut::new();
        let mut hot = 0;
        for _ in 0..10_000 {
            out.clear();
            requests.next(&mut out);
            hot += usize::from(out.starts_with(b"get k0:"));
        }
        // P(key 0) = 1 / H(1000, 0.99) ≈ 0.13.
        assert!((1_100..1_500).contains(&hot), "{hot}");
    }

    /// The version of the one store `requests` appends.
    fn stored_version(requests: &mut Requests) -> u64 {
        let mut out = BytesMut::new();
        requests.set(1, &mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        // `*5 TXSET key value lo hi`: `lo`, `hi`'s length, `hi`, and the empty piece after the
        // last CRLF end it.
        let lines: Vec<&str> = text.split("\r\n").collect();
        lines[lines.len() - 4].parse().expect("a timestamp")
    }

    #[test]
    fn no_run_connection_stores_a_preloaded_version() {
        let w = Arc::new(Workload::new(
            Protocol::Versioned,
            10,
            KeyDist::Uniform,
            Size::Fixed(16),
            Size::Fixed(3),
            0.0,
            1,
        ));
        // Every source's first version; each owns the range from it to the next one's.
        let run: Vec<u64> = (0..MAX_CONNECTIONS as u64)
            .map(|c| stored_version(&mut Requests::new(Arc::clone(&w), c, 1)))
            .collect();
        let preload: Vec<u64> = (0..16)
            .map(|c| stored_version(&mut Requests::preloading(Arc::clone(&w), c, 1)))
            .collect();
        let mut all = [run.clone(), preload.clone()].concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), MAX_CONNECTIONS + 16, "two sources share a range");
        let highest_run = run.iter().max().copied().unwrap_or_default();
        assert!(preload
            .iter()
            .all(|&v| v > highest_run + (1 << VERSION_BITS) - 1));
        // The preload's versions stay below the end of TXGET's range.
        assert!(preload
            .iter()
            .all(|&v| v + (1 << VERSION_BITS) < 9_223_372_036_854_775_806));
    }

    #[test]
    fn each_connection_stores_fresh_versions_in_its_own_range() {
        let w = Arc::new(Workload::new(
            Protocol::Versioned,
            10,
            KeyDist::Uniform,
            Size::Fixed(16),
            Size::Fixed(3),
            0.0,
            1,
        ));
        let mut out = BytesMut::new();
        let mut requests = Requests::new(w, 2, 1);
        requests.set(1, &mut out);
        requests.set(1, &mut out);
        let text = String::from_utf8_lossy(&out);
        let first = (3u64 << 40).to_string();
        let second = ((3u64 << 40) + 1).to_string();
        assert!(text.contains(&first) && text.contains(&second), "{text}");
    }
}

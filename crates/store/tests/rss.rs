//! Checks that the accounted bytes track what the process really holds. Ignored by default
//! (it allocates hundreds of megabytes); run it in release mode on Linux:
//! `cargo test --release -p txcache-store --test rss -- --ignored --nocapture`.

use txcache_model::{Invalidation, InvalidationTag, Timestamp, ValidityInterval, WallClock};
use txcache_store::{InsertRequest, Store, StoreConfig};

/// Resident bytes of this process, from /proc (0 where unavailable).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(0)
        * 4096
}

fn tag(text: &str) -> InvalidationTag {
    InvalidationTag::parse(text).expect("valid tag")
}

/// What each stored item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// A bounded version under a 32-byte key.
    Bounded,
    /// An open version with two tags under a 32-byte key.
    Open,
    /// A plain value under a 16-byte key (`set`).
    Plain,
}

/// Fills a store with `count` items shaped like `shape` and reports RSS growth against the
/// accounted total.
fn measure(name: &str, count: u64, value_len: usize, shape: Shape) -> f64 {
    let before = resident();
    let mut store = Store::new(StoreConfig {
        max_memory: usize::MAX,
        max_staleness_micros: u64::MAX,
    });
    store.heartbeat(Timestamp(1), WallClock(1));
    for i in 0..count {
        if shape == Shape::Plain {
            let key = format!("{:016x}", i * 0x9E37_79B9);
            store
                .set(key.as_bytes(), &vec![7u8; value_len])
                .expect("fits");
            continue;
        }
        let key = format!("{:032x}", i * 0x9E37_79B9);
        let (interval, snapshot, tags) = match shape == Shape::Open {
            true => (
                ValidityInterval::open(Timestamp(0)),
                Some(Timestamp(1)),
                vec![
                    tag(&format!("public.items:id={i}")),
                    tag("public.categories"),
                ],
            ),
            false => (
                ValidityInterval::bounded(Timestamp(1), Timestamp(2)).expect("non-empty"),
                None,
                vec![],
            ),
        };
        let request = InsertRequest {
            interval,
            snapshot,
            tags,
        };
        store
            .insert(key.as_bytes(), &vec![7u8; value_len], request)
            .expect("fits");
    }
    for i in 0..count / 100 {
        let tags = vec![tag(&format!("public.users:id={i}"))];
        store.invalidate(&Invalidation {
            ts: Timestamp(2 + i),
            commit_time: WallClock(2 + i),
            tags,
        });
    }
    let grown = resident().saturating_sub(before);
    let accounted = store.memory().total();
    let ratio = grown as f64 / accounted as f64;
    println!(
        "{name}: {count} items, accounted {accounted} B, RSS grew {grown} B, ratio {ratio:.2}"
    );
    drop(store);
    ratio
}

/// The shapes measured: name, items, value length, shape.
const CASES: [(&str, u64, usize, Shape); 6] = [
    ("bounded, 100 B values", 1_000_000, 100, Shape::Bounded),
    (
        "open with 2 tags, 100 B values",
        1_000_000,
        100,
        Shape::Open,
    ),
    ("bounded, 1 KiB values", 200_000, 1024, Shape::Bounded),
    ("open with 2 tags, 10 B values", 1_000_000, 10, Shape::Open),
    (
        "plain, 16 B keys, 100 B values",
        1_000_000,
        100,
        Shape::Plain,
    ),
    // One byte more: the 121-byte item lands just past glibc's 128-byte chunk, in a 144-byte
    // one, the plain item's worst case for its charge.
    (
        "plain, 16 B keys, 101 B values",
        1_000_000,
        101,
        Shape::Plain,
    ),
];

/// Runs each case in a fresh process: memory a finished case freed would otherwise be reused
/// by the next without showing in its growth.
#[test]
#[ignore = "allocates hundreds of megabytes; run in release mode by hand"]
fn resident_size_tracks_accounting() {
    let exe = std::env::current_exe().expect("test binary path");
    for case in 0..CASES.len() {
        let status = std::process::Command::new(&exe)
            .args(["--exact", "one_case", "--ignored", "--nocapture"])
            .env("TXCACHE_RSS_CASE", case.to_string())
            .status()
            .expect("spawn the test binary");
        assert!(status.success(), "case {case} failed");
    }
}

/// One case, chosen by `TXCACHE_RSS_CASE` (run by `resident_size_tracks_accounting`).
#[test]
#[ignore = "run by resident_size_tracks_accounting"]
fn one_case() {
    let Some(case) = std::env::var("TXCACHE_RSS_CASE")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
    else {
        return;
    };
    let (name, count, len, shape) = CASES[case];
    let ratio = measure(name, count, len, shape);
    assert!(
        (0.75..1.25).contains(&ratio),
        "{name}: RSS/accounted = {ratio:.2}"
    );
}

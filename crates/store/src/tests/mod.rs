//! Unit tests of the store's rules, each named after what it guards.

mod bucket;
mod expiry;
mod insert;
mod interval;
mod invalidate;
mod lookup;
mod memory;
mod plain;

use crate::{Hit, InsertOutcome, InsertRequest, Lookup, MissKind, Store, StoreConfig};
use txcache_model::{Invalidation, InvalidationTag, Timestamp, ValidityInterval, WallClock};

/// Key `k` of a table's property test: bytes of varying length (0 to 4), some with the high
/// bit set, so that a few hundred operations hit the same keys often.
pub(super) fn small_key(k: u8) -> Vec<u8> {
    vec![k; usize::from(k % 5)]
}

pub(super) fn ts(n: u64) -> Timestamp {
    Timestamp(n)
}

pub(super) fn tag(s: &str) -> InvalidationTag {
    InvalidationTag::parse(s).expect("valid tag")
}

pub(super) fn tags(list: &[&str]) -> Vec<InvalidationTag> {
    list.iter().map(|t| tag(t)).collect()
}

pub(super) fn bounded(lo: u64, hi: u64) -> ValidityInterval {
    ValidityInterval::bounded(ts(lo), ts(hi)).expect("non-empty")
}

pub(super) fn open(lo: u64) -> ValidityInterval {
    ValidityInterval::open(ts(lo))
}

/// A store with the default limits.
pub(super) fn store() -> Store {
    Store::new(StoreConfig::default())
}

/// Applies an invalidation at `at` with commit time `at` (µs) and `list` tags.
pub(super) fn commit(store: &mut Store, at: u64, list: &[&str]) -> bool {
    commit_at(store, at, at, list)
}

pub(super) fn commit_at(store: &mut Store, at: u64, time: u64, list: &[&str]) -> bool {
    store.invalidate(&Invalidation {
        ts: ts(at),
        commit_time: WallClock(time),
        tags: tags(list),
    })
}

/// Inserts a value computed at snapshot `s` from `list`, allowed everywhere by cache reads.
pub(super) fn insert_at(
    store: &mut Store,
    key: &str,
    value: &str,
    s: u64,
    list: &[&str],
) -> InsertOutcome {
    let request = InsertRequest {
        interval: open(0),
        snapshot: Some(ts(s)),
        tags: tags(list),
    };
    store
        .insert(key.as_bytes(), value.as_bytes(), request)
        .expect("insert accepted")
}

/// Inserts a value valid over `interval` by cache reads alone (no snapshot).
pub(super) fn insert_bounded(
    store: &mut Store,
    key: &str,
    value: &str,
    interval: ValidityInterval,
) -> InsertOutcome {
    let request = InsertRequest {
        interval,
        snapshot: None,
        tags: Vec::new(),
    };
    store
        .insert(key.as_bytes(), value.as_bytes(), request)
        .expect("insert accepted")
}

pub(super) fn lookup(store: &mut Store, key: &str, lo: u64, hi: u64) -> Lookup {
    let result = store
        .lookup(key.as_bytes(), ts(lo), ts(hi), true)
        .expect("valid lookup");
    store.verify_invariants().expect("invariants hold");
    result
}

/// The hit's value and interval, or the miss.
pub(super) fn answer(
    store: &mut Store,
    key: &str,
    lo: u64,
    hi: u64,
) -> Result<(String, ValidityInterval), MissKind> {
    match lookup(store, key, lo, hi) {
        Lookup::Hit(Hit {
            value, interval, ..
        }) => Ok((String::from_utf8_lossy(&value).into_owned(), interval)),
        Lookup::Miss(kind) => Err(kind),
    }
}

/// The hit, which must exist.
pub(super) fn hit(store: &mut Store, key: &str, lo: u64, hi: u64) -> Hit {
    match lookup(store, key, lo, hi) {
        Lookup::Hit(hit) => hit,
        Lookup::Miss(kind) => panic!("expected a hit on {key} [{lo}, {hi}], got a {kind:?} miss"),
    }
}

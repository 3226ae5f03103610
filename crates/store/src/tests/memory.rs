use super::*;
use crate::StoreError;

fn small(max_memory: usize) -> Store {
    Store::new(StoreConfig {
        max_memory,
        ..StoreConfig::default()
    })
}

fn value(len: usize) -> Vec<u8> {
    vec![b'x'; len]
}

#[test]
fn accounted_total_stays_under_the_limit_under_churn() {
    let mut s = small(32 << 10);
    for i in 0..2000u64 {
        let key = format!("key{}", i % 300);
        let request = InsertRequest {
            interval: open(0),
            snapshot: Some(ts(i)),
            tags: tags(&["t:id=1", "t"]),
        };
        let _ = s.insert(key.as_bytes(), &value((i % 700) as usize), request);
        if i % 7 == 0 {
            commit(&mut s, i, &["t:id=1"]);
        }
        if i % 11 == 0 {
            s.set(format!("plain{i}").as_bytes(), &value(100))
                .expect("fits");
        }
        s.verify_invariants().expect("invariants hold");
    }
    assert!(s.stats().evictions > 0);
}

#[test]
fn eviction_prefers_the_least_recently_used() {
    let mut s = small(16 << 10);
    insert_bounded(&mut s, "old", "v", bounded(1, 2));
    insert_bounded(&mut s, "hot", "v", bounded(1, 2));
    let mut i = 0;
    while s.contains(b"old") {
        hit(&mut s, "hot", 1, 1);
        insert_bounded(&mut s, &format!("filler{i}"), "v", bounded(1, 2));
        i += 1;
    }
    assert!(
        s.contains(b"hot"),
        "a key hit before every insert outlives the sampled LRU"
    );
}

/// The sampled-eviction key of item `i`.
fn sampled_key(i: usize) -> String {
    format!("key-{i:04}")
}

/// Lowers the limit of a store holding keys 0..1000 (the even ones hit after every key was
/// stored) to 70 % of its use, and requires eviction to take mostly odd (cold) keys.
fn assert_eviction_takes_mostly_cold_keys(s: &mut Store) {
    s.set_max_memory(s.memory().total() * 7 / 10);
    s.verify_invariants().expect("invariants hold");
    let evicted = |parity: usize| {
        (0..1000)
            .filter(|i| i % 2 == parity && !s.contains(sampled_key(*i).as_bytes()))
            .count()
    };
    let (hot, cold) = (evicted(0), evicted(1));
    assert!(hot + cold > 100, "evicted {hot} hot and {cold} cold keys");
    // Five samples evict a hot key only when all five are hot: about one eviction in six
    // here, as cold keys run out; a sampler blind to recency evicts as many hot as cold.
    assert!(
        hot * 4 < hot + cold,
        "evicted {hot} hot and {cold} cold keys"
    );
}

#[test]
fn sampled_eviction_takes_mostly_cold_versioned_keys() {
    // Many keys, so that the samples come from random buckets of the key table and the walk
    // to the next occupied one.
    let mut s = small(4 << 20);
    for i in 0..1000 {
        insert_bounded(&mut s, &sampled_key(i), "value", bounded(1, 2));
    }
    for i in (0..1000).step_by(2) {
        hit(&mut s, &sampled_key(i), 1, 1);
    }
    assert_eviction_takes_mostly_cold_keys(&mut s);
}

#[test]
fn sampled_eviction_takes_mostly_cold_plain_items() {
    // Plain items are compared by their 3-byte stamps (256 ticks of the store's clock a step).
    let mut s = small(4 << 20);
    for i in 0..1000 {
        s.set(sampled_key(i).as_bytes(), b"value").expect("fits");
    }
    for i in (0..1000).step_by(2) {
        assert!(matches!(
            s.get(sampled_key(i).as_bytes(), || 0),
            Ok(Some(_))
        ));
    }
    assert_eviction_takes_mostly_cold_keys(&mut s);
}

#[test]
fn capacity_and_staleness_misses_are_told_apart() {
    let mut s = Store::new(StoreConfig {
        max_memory: 16 << 10,
        max_staleness_micros: 100,
    });
    commit_at(&mut s, 10, 1000, &[]);
    insert_at(&mut s, "stale", "v", 10, &["t:id=1"]);
    commit_at(&mut s, 20, 1000, &["t:id=1"]);
    s.heartbeat(ts(21), WallClock(2000));
    assert_eq!(answer(&mut s, "stale", 12, 12), Err(MissKind::Staleness));
    insert_at(&mut s, "evicted", "v", 21, &["t:id=2"]);
    let mut i = 0;
    while s.contains(b"evicted") {
        insert_bounded(&mut s, &format!("filler{i}"), "v", bounded(1, 2));
        i += 1;
    }
    // The evicted version was open: a ghost counts from its lo on.
    assert_eq!(answer(&mut s, "evicted", 25, 30), Err(MissKind::Capacity));
    // History up to 20 was trimmed, so the version was open from H = 20.
    assert_eq!(answer(&mut s, "evicted", 20, 20), Err(MissKind::Capacity));
    assert_eq!(answer(&mut s, "evicted", 0, 19), Err(MissKind::Staleness));
    assert_eq!(
        (s.stats().misses_capacity, s.stats().misses_staleness),
        (2, 2)
    );
}

#[test]
fn evicting_an_open_version_unregisters_its_tags() {
    let mut s = small(16 << 10);
    commit(&mut s, 1, &[]);
    insert_at(&mut s, "open", "v", 1, &["t:id=1", "u"]);
    let mut i = 0;
    while s.contains(b"open") {
        insert_bounded(&mut s, &format!("filler{i}"), "v", bounded(1, 2));
        i += 1;
    }
    s.verify_invariants().expect("invariants hold");
    commit(&mut s, 2, &["t:id=1"]);
    assert_eq!(s.stats().versions_truncated, 0);
}

#[test]
fn item_larger_than_the_limit_is_refused() {
    let mut s = small(4096);
    let request = InsertRequest {
        interval: bounded(1, 2),
        snapshot: None,
        tags: vec![],
    };
    assert!(matches!(
        s.insert(b"k", &value(4096), request),
        Err(StoreError::TooLarge { limit: 4096, .. })
    ));
    assert!(s.set(b"k", &value(3000)).is_ok());
}

#[test]
fn lowering_max_memory_evicts_at_once() {
    let mut s = small(1 << 20);
    for i in 0..500 {
        insert_bounded(&mut s, &format!("k{i}"), "value", bounded(1, 2));
    }
    let before = s.memory().total();
    s.set_max_memory(before / 4);
    assert!(s.memory().total() <= before / 4);
    s.verify_invariants().expect("invariants hold");
    s.set_max_memory(0);
    assert_eq!((s.memory().total(), s.gauges().keys), (0, 0));
}

#[test]
fn eviction_samples_plain_and_versioned_keys_alike() {
    let mut s = small(1 << 20);
    for i in 0..400 {
        s.set(format!("plain{i}").as_bytes(), &value(100))
            .expect("fits");
        insert_bounded(&mut s, &format!("versioned{i}"), "value", bounded(1, 2));
    }
    s.set_max_memory(s.memory().total() / 2);
    s.verify_invariants().expect("invariants hold");
    let plain_left = (0..400)
        .filter(|i| s.contains(format!("plain{i}").as_bytes()))
        .count();
    let versioned_left = (0..400)
        .filter(|i| s.contains(format!("versioned{i}").as_bytes()))
        .count();
    assert!((1..400).contains(&plain_left), "plain left: {plain_left}");
    assert!(
        (1..400).contains(&versioned_left),
        "versioned left: {versioned_left}"
    );
    assert_eq!(s.gauges().keys, plain_left + versioned_left);
}

#[test]
fn a_plain_item_is_charged_its_bytes_and_its_overhead() {
    let mut s = store();
    s.set(b"sixteen-byte-key", &value(100)).expect("set");
    let usage = s.memory();
    assert_eq!(usage.values, 100);
    assert_eq!(usage.keys, 16 + 1 + crate::memory::PLAIN_ITEM_OVERHEAD);
    assert!(s.remove(b"sixteen-byte-key", 0));
    assert_eq!((s.memory().values, s.memory().keys), (0, 0));
}

#[test]
fn ghosts_are_bounded_by_a_thirty_second_of_memory() {
    let mut s = small(64 << 10);
    for i in 0..5000 {
        insert_bounded(&mut s, &format!("key-{i:06}"), "v", bounded(1, 2));
        assert!(s.memory().ghosts <= (64 << 10) / 32);
    }
    assert!(s.memory().ghosts > 0);
}

#[test]
fn gauges_and_histogram_follow_every_change() {
    let mut s = store();
    commit(&mut s, 1, &[]);
    insert_at(&mut s, "a", "", 1, &["t:id=1"]);
    insert_bounded(&mut s, "b", "xyz", bounded(1, 2));
    s.set(b"c", &value(1024)).expect("set");
    let g = s.gauges().clone();
    assert_eq!((g.keys, g.versions, g.open_versions), (3, 2, 1));
    assert_eq!(
        (
            g.size_histogram[0],
            g.size_histogram[2],
            g.size_histogram[11]
        ),
        (1, 1, 1)
    );
    commit(&mut s, 2, &["t:id=1"]);
    assert_eq!(s.gauges().open_versions, 0);
    s.remove(b"c", 0);
    assert_eq!(s.gauges().size_histogram[11], 0);
    s.clear();
    assert_eq!(
        (s.gauges().keys, s.memory().total() - s.memory().history),
        (0, 0)
    );
    assert_eq!(s.last_applied(), ts(2), "clear keeps the stream position");
}

#[test]
fn memory_is_accounted_by_part() {
    let mut s = store();
    commit(&mut s, 1, &["t:id=1"]);
    insert_at(&mut s, "key", "12345", 1, &["t:id=1"]);
    let m = s.memory();
    assert_eq!(m.values, 5);
    assert!(m.keys > 3 && m.intervals > 0 && m.tags > 0 && m.history > 0 && m.ghosts == 0);
    assert_eq!(
        m.total(),
        m.values + m.keys + m.intervals + m.tags + m.history
    );
}

#[test]
fn store_can_be_shared_behind_a_mutex() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
}

#[test]
fn a_plain_item_past_the_thin_pointer_limit_is_charged_its_spilled_pointer() {
    // Key "k" with the 3-byte stamp and its 1-byte prefix: 5 bytes before the value; the
    // limit is 0xffff in all.
    let charge = |value_len: usize| {
        let mut s = store();
        s.set(b"k", &value(value_len)).unwrap();
        s.memory().keys
    };
    let below = charge(0xffff - 6);
    assert_eq!(charge(0xffff - 6 - 100), below);
    assert_eq!(charge(0xffff - 5), below + size_of::<Box<[u8]>>() + 16);
}

#[test]
fn a_version_past_the_thin_pointer_limit_is_charged_its_spilled_pointer() {
    // A value of 0xffff bytes or more keeps its fat pointer in an allocation of its own.
    let charge = |value_len: usize| {
        let mut s = store();
        let request = InsertRequest {
            interval: bounded(1, 2),
            snapshot: None,
            tags: Vec::new(),
        };
        let value = value(value_len);
        s.insert(b"k", &value, request).unwrap();
        s.verify_invariants().unwrap();
        let Ok(Lookup::Hit(hit)) = s.lookup(b"k", ts(1), ts(1), false) else {
            panic!("the version answers its own interval");
        };
        assert_eq!(hit.value, value);
        s.memory().intervals
    };
    let below = charge(0xffff - 1);
    assert_eq!(charge(0xffff - 100), below);
    assert_eq!(charge(0xffff), below + size_of::<Box<[u8]>>() + 16);
}

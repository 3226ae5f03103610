//! Plain keys' expiry and Redis's string operations: an expired value is never returned and is
//! removed lazily, by the sweep, or first under memory pressure; `SET`'s options, `EXPIRE`'s
//! conditions, `PERSIST` and `update` keep the expiry as Redis does; the expiry queue stays
//! bounded however often deadlines are set again.

use super::*;
use crate::plain::{plain_prefix_len, PlainItem};
use crate::{ExpireCondition, KeyExpiry, SetCondition, SetExpiry, SetOptions, StoreError};
use proptest::prelude::*;
use std::collections::HashMap;

/// A `now` that must not be read: hits on items without a deadline read no clock.
fn no_clock() -> u64 {
    panic!("the clock was read for an item without a deadline")
}

fn at(deadline: u64) -> SetOptions {
    SetOptions {
        expiry: SetExpiry::At(deadline),
        ..SetOptions::default()
    }
}

fn set_at(s: &mut Store, key: &[u8], value: &[u8], deadline: u64, now: u64) {
    assert_eq!(s.set_with(key, value, at(deadline), now, |_| {}), Ok(true));
    s.verify_invariants().expect("invariants hold");
}

fn get(s: &mut Store, key: &[u8], now: u64) -> Option<Vec<u8>> {
    let value = s.get(key, || now).expect("a plain key").map(<[u8]>::to_vec);
    s.verify_invariants().expect("invariants hold");
    value
}

#[test]
fn an_item_keeps_its_deadline_beside_key_and_value() {
    for key_len in [0, 1, 63, 64, 127, 128, 8191, 8192] {
        let key = vec![0x80; key_len];
        for deadline in [None, Some(0), Some(1_700_000_000_000), Some(u64::MAX)] {
            let mut item = PlainItem::with_deadline(&key, b"value", 5, deadline);
            assert_eq!(item.parts(), (&key[..], deadline, &b"value"[..]));
            assert_eq!(item.stamp(), 5);
            if deadline.is_some() {
                item.move_deadline(42);
                assert_eq!(item.parts(), (&key[..], Some(42), &b"value"[..]));
            }
        }
    }
    // The expiry flag takes a bit of the prefix: one byte below 64, two from 64.
    assert_eq!((plain_prefix_len(63), plain_prefix_len(64)), (1, 2));
    assert_eq!((plain_prefix_len(8191), plain_prefix_len(8192)), (2, 3));
}

#[test]
fn an_expired_value_is_never_returned_and_is_removed_when_found() {
    let mut s = store();
    s.set(b"forever", b"f").expect("fits");
    set_at(&mut s, b"brief", b"b", 1_000, 500);
    assert_eq!(s.get(b"forever", no_clock), Ok(Some(&b"f"[..])));
    assert_eq!(get(&mut s, b"brief", 999), Some(b"b".to_vec()));
    assert_eq!(
        get(&mut s, b"brief", 1_000),
        Some(b"b".to_vec()),
        "alive at its deadline"
    );
    assert_eq!(get(&mut s, b"brief", 1_001), None);
    assert!(!s.contains(b"brief"), "removed on the spot");
    assert_eq!(s.stats().plain_expired, 1);
    assert_eq!(s.gauges().plain_expiring, 0);
    // Every access treats it the same way.
    set_at(&mut s, b"brief", b"b", 1_000, 500);
    assert!(s.exists(b"brief", 1_000) && !s.exists(b"brief", 1_001));
    set_at(&mut s, b"brief", b"b", 1_000, 500);
    assert!(
        !s.remove(b"brief", 1_001),
        "DEL of an expired key removes nothing"
    );
    set_at(&mut s, b"brief", b"b", 1_000, 500);
    assert_eq!(s.expiry(b"brief", 1_001), KeyExpiry::Absent);
    assert_eq!(s.stats().plain_expired, 4);
    assert_eq!(s.gauges().keys, 1);
}

#[test]
fn a_deadline_costs_its_bytes_and_a_queue_record() {
    let mut s = store();
    s.set(b"k", b"v").expect("fits");
    let plain = s.memory();
    set_at(&mut s, b"k", b"v", 10, 0);
    let expiring = s.memory();
    let record = crate::memory::EXPIRY_RECORD;
    assert_eq!(expiring.intervals, plain.intervals + 8 + record);
    assert_eq!(expiring.keys, plain.keys);
    assert!(s.persist(b"k", 0));
    assert_eq!(s.memory().keys, plain.keys);
    assert_eq!(
        s.memory().intervals,
        plain.intervals + record,
        "the dead record stays"
    );
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn set_options_follow_redis() {
    let mut s = store();
    let nx = SetOptions {
        condition: SetCondition::IfAbsent,
        ..SetOptions::default()
    };
    let xx = SetOptions {
        condition: SetCondition::IfPresent,
        ..SetOptions::default()
    };
    assert_eq!(s.set_with(b"k", b"1", xx, 0, |_| {}), Ok(false));
    assert_eq!(s.set_with(b"k", b"1", nx, 0, |_| {}), Ok(true));
    assert_eq!(s.set_with(b"k", b"2", nx, 0, |_| {}), Ok(false));
    assert_eq!(s.set_with(b"k", b"2", xx, 0, |_| {}), Ok(true));
    assert_eq!(get(&mut s, b"k", 0), Some(b"2".to_vec()));
    // GET shows the old value, whether or not the condition lets the new one in.
    let mut seen = Vec::new();
    let get_nx = SetOptions { get: true, ..nx };
    assert_eq!(
        s.set_with(b"k", b"3", get_nx, 0, |old| seen
            .push(old.map(<[u8]>::to_vec))),
        Ok(false)
    );
    let get_any = SetOptions {
        get: true,
        ..SetOptions::default()
    };
    assert_eq!(
        s.set_with(b"new", b"x", get_any, 0, |old| seen
            .push(old.map(<[u8]>::to_vec))),
        Ok(true)
    );
    assert_eq!(seen, [Some(b"2".to_vec()), None]);
    // A versioned key is present for NX and XX, and no value for GET.
    insert_bounded(&mut s, "v", "x", bounded(1, 2));
    assert_eq!(s.set_with(b"v", b"p", nx, 0, |_| {}), Ok(false));
    assert_eq!(
        s.set_with(b"v", b"p", get_any, 0, |_| unreachable!()),
        Err(StoreError::WrongType)
    );
    assert!(
        s.lookup(b"v", ts(1), ts(1), false).is_ok(),
        "still versioned"
    );
    assert_eq!(s.set_with(b"v", b"p", xx, 0, |_| {}), Ok(true));
    assert_eq!(get(&mut s, b"v", 0), Some(b"p".to_vec()));
    // An expired value is absent for NX, and GET does not see it.
    set_at(&mut s, b"e", b"old", 10, 0);
    let mut seen = None;
    let get_nx = SetOptions { get: true, ..nx };
    assert_eq!(
        s.set_with(b"e", b"new", get_nx, 11, |old| seen = Some(old.is_none())),
        Ok(true)
    );
    assert_eq!(seen, Some(true));
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn set_drops_the_deadline_and_keepttl_keeps_it() {
    let mut s = store();
    set_at(&mut s, b"k", b"1", 100, 0);
    let keep = SetOptions {
        expiry: SetExpiry::Keep,
        ..SetOptions::default()
    };
    assert_eq!(s.set_with(b"k", b"2", keep, 1, |_| {}), Ok(true));
    assert_eq!(s.expiry(b"k", 1), KeyExpiry::At(100));
    assert_eq!(
        s.set_with(b"k", b"3", SetOptions::default(), 1, |_| {}),
        Ok(true)
    );
    assert_eq!(s.expiry(b"k", 1), KeyExpiry::Never);
    assert_eq!(s.set_with(b"k", b"4", keep, 1, |_| {}), Ok(true));
    assert_eq!(s.expiry(b"k", 1), KeyExpiry::Never, "nothing to keep");
    // A deadline already past stores nothing: the key expired at once.
    assert_eq!(s.set_with(b"k", b"5", at(1), 1, |_| {}), Ok(true));
    assert_eq!(s.expiry(b"k", 1), KeyExpiry::Absent);
    assert_eq!(s.stats().plain_expired, 1);
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn expire_conditions_follow_redis() {
    let nx = ExpireCondition {
        if_none: true,
        ..Default::default()
    };
    let xx = ExpireCondition {
        if_some: true,
        ..Default::default()
    };
    let gt = ExpireCondition {
        if_later: true,
        ..Default::default()
    };
    let lt = ExpireCondition {
        if_earlier: true,
        ..Default::default()
    };
    let any = ExpireCondition::default();
    // (current deadline, condition, new deadline, applied)
    let cases = [
        (None, any, 50, true),
        (Some(40), any, 50, true),
        (None, nx, 50, true),
        (Some(40), nx, 50, false),
        (None, xx, 50, false),
        (Some(40), xx, 50, true),
        (None, gt, 50, false),
        (Some(40), gt, 50, true),
        (Some(50), gt, 50, false),
        (None, lt, 50, true),
        (Some(60), lt, 50, true),
        (Some(50), lt, 50, false),
        (
            Some(40),
            ExpireCondition {
                if_some: true,
                if_later: true,
                ..Default::default()
            },
            50,
            true,
        ),
        (
            None,
            ExpireCondition {
                if_some: true,
                if_earlier: true,
                ..Default::default()
            },
            50,
            false,
        ),
    ];
    for (current, condition, deadline, applied) in cases {
        let mut s = store();
        match current {
            Some(current) => set_at(&mut s, b"k", b"v", current, 0),
            None => s.set(b"k", b"v").expect("fits"),
        }
        let expected = if applied {
            KeyExpiry::At(deadline)
        } else {
            s.expiry(b"k", 0)
        };
        assert_eq!(
            s.expire(b"k", deadline, 0, condition),
            Ok(applied),
            "{current:?} {condition:?}"
        );
        assert_eq!(s.expiry(b"k", 0), expected);
        assert_eq!(get(&mut s, b"k", 0), Some(b"v".to_vec()));
    }
}

#[test]
fn expire_in_the_past_deletes_and_versioned_keys_refuse_a_deadline() {
    let mut s = store();
    s.set(b"k", b"v").expect("fits");
    assert_eq!(
        s.expire(b"missing", 10, 5, ExpireCondition::default()),
        Ok(false)
    );
    assert_eq!(s.expire(b"k", 5, 5, ExpireCondition::default()), Ok(true));
    assert!(!s.contains(b"k"));
    insert_bounded(&mut s, "v", "x", bounded(1, 2));
    assert_eq!(
        s.expire(b"v", 10, 5, ExpireCondition::default()),
        Err(StoreError::WrongType)
    );
    assert_eq!(s.expiry(b"v", 5), KeyExpiry::Never);
    assert!(!s.persist(b"v", 5));
    assert_eq!(s.expiry(b"missing", 5), KeyExpiry::Absent);
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn persist_removes_the_deadline_and_keeps_the_value() {
    let mut s = store();
    set_at(&mut s, b"k", b"v", 10, 0);
    assert!(s.persist(b"k", 5));
    assert!(!s.persist(b"k", 5));
    assert_eq!(s.expiry(b"k", 50), KeyExpiry::Never);
    assert_eq!(s.get(b"k", no_clock), Ok(Some(&b"v"[..])));
    assert_eq!(s.expire_due(50, 100), 1, "its record is dead");
    assert_eq!(get(&mut s, b"k", 50), Some(b"v".to_vec()));
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn update_keeps_the_expiry_and_refuses_versioned_keys() {
    let mut s = store();
    set_at(&mut s, b"n", b"1", 100, 0);
    let double = |old: Option<&[u8]>| old.map(|v| [v, v].concat());
    assert_eq!(s.update(b"n", 1, double), Ok(true));
    assert_eq!(get(&mut s, b"n", 1), Some(b"11".to_vec()));
    assert_eq!(s.expiry(b"n", 1), KeyExpiry::At(100));
    assert_eq!(s.update(b"missing", 1, double), Ok(false));
    assert!(!s.contains(b"missing"));
    assert_eq!(
        s.update(b"new", 1, |old| old.map_or(Some(b"0".to_vec()), |_| None)),
        Ok(true)
    );
    assert_eq!(s.expiry(b"new", 1), KeyExpiry::Never);
    // After its deadline the key is absent to the update too.
    assert_eq!(
        s.update(b"n", 101, |old| Some(old.unwrap_or(b"none").to_vec())),
        Ok(true)
    );
    assert_eq!(
        (get(&mut s, b"n", 101), s.expiry(b"n", 101)),
        (Some(b"none".to_vec()), KeyExpiry::Never)
    );
    insert_bounded(&mut s, "v", "x", bounded(1, 2));
    assert_eq!(
        s.update(b"v", 1, |_| unreachable!()),
        Err(StoreError::WrongType)
    );
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn the_sweep_removes_due_keys_within_its_budget() {
    let mut s = store();
    for i in 0..10u64 {
        set_at(&mut s, format!("k{i}").as_bytes(), b"v", 100 + i, 0);
    }
    s.set(b"forever", b"v").expect("fits");
    assert_eq!(
        s.expire_due(100, 100),
        0,
        "nothing is due before its deadline"
    );
    assert_eq!(s.expire_due(105, 3), 3, "the budget bounds the work");
    assert_eq!(s.expire_due(105, 100), 2);
    assert_eq!((s.gauges().keys, s.gauges().plain_expiring), (6, 5));
    assert_eq!(s.expire_due(1_000, 100), 5);
    assert_eq!((s.gauges().keys, s.stats().plain_expired), (1, 10));
    assert_eq!(s.memory().intervals, 0, "no record is left");
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn setting_deadlines_again_and_again_keeps_the_queue_bounded() {
    let mut s = store();
    for round in 0..1_000u64 {
        set_at(&mut s, b"a", b"v", 10_000 + round, round);
        let applied = s.expire(b"b", 20_000 + round, round, ExpireCondition::default());
        assert_eq!(applied, Ok(round > 0));
        if round == 0 {
            s.set(b"b", b"v").expect("fits");
        }
    }
    assert!(
        s.expiry.len() <= 2 * 2 + 64 + 1,
        "{} records",
        s.expiry.len()
    );
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn eviction_takes_expired_keys_before_live_ones() {
    let mut s = Store::new(StoreConfig {
        max_memory: 64 << 10,
        ..StoreConfig::default()
    });
    for i in 0..100 {
        set_at(&mut s, format!("brief{i}").as_bytes(), &[0; 200], 1_000, 0);
        s.set(format!("live{i}").as_bytes(), &[0; 200])
            .expect("fits");
    }
    assert_eq!(s.stats().evictions, 0);
    // Past the deadline, new values push the expired ones out and leave the live ones.
    for i in 0..100 {
        let key = format!("new{i}");
        assert_eq!(
            s.set_with(
                key.as_bytes(),
                &[0; 200],
                SetOptions::default(),
                2_000,
                |_| {}
            ),
            Ok(true)
        );
    }
    s.verify_invariants().expect("invariants hold");
    let brief_left = (0..100)
        .filter(|i| s.contains(format!("brief{i}").as_bytes()))
        .count() as u64;
    assert!(s.stats().plain_expired > 0);
    assert_eq!(s.stats().plain_expired + brief_left, 100);
    assert_eq!(s.stats().evictions, 0, "no live key was evicted");
    assert!((0..100).all(|i| s.contains(format!("live{i}").as_bytes())));
}

#[test]
fn clear_plain_leaves_versioned_entries() {
    let mut s = store();
    commit(&mut s, 1, &[]);
    insert_at(&mut s, "v", "x", 1, &["t:id=1"]);
    set_at(&mut s, b"p", b"v", 100, 0);
    s.set(b"q", b"v").expect("fits");
    s.clear_plain();
    assert_eq!((s.gauges().keys, s.gauges().plain_expiring), (1, 0));
    assert!(hit(&mut s, "v", 1, 1).open);
    assert_eq!(s.get(b"p", no_clock), Ok(None));
    s.verify_invariants().expect("invariants hold");
}

/// One step of the expiry model test.
#[derive(Clone, Debug)]
enum Op {
    Set { key: u8, ttl: Option<u64> },
    Expire { key: u8, ttl: u64 },
    Persist { key: u8 },
    Get { key: u8 },
    Remove { key: u8 },
    Sweep { budget: usize },
    Wait { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    prop_oneof![
        (key.clone(), proptest::option::of(0u64..20)).prop_map(|(key, ttl)| Op::Set { key, ttl }),
        (key.clone(), 0u64..20).prop_map(|(key, ttl)| Op::Expire { key, ttl }),
        key.clone().prop_map(|key| Op::Persist { key }),
        key.clone().prop_map(|key| Op::Get { key }),
        key.prop_map(|key| Op::Remove { key }),
        (0usize..4).prop_map(|budget| Op::Sweep { budget }),
        (0u64..8).prop_map(|ms| Op::Wait { ms }),
    ]
}

proptest! {
    /// Against a map of values and deadlines: every read agrees, whatever removed an expired
    /// key (access, the sweep, or nothing yet), and the invariants hold after every step.
    #[test]
    fn expiry_agrees_with_a_model(ops in proptest::collection::vec(op(), 1..200)) {
        let mut s = store();
        let mut model: HashMap<u8, (u64, Option<u64>)> = HashMap::new();
        let mut now = 1_000u64;
        for (step, op) in ops.into_iter().enumerate() {
            let value = step as u64;
            // Expired model entries are gone, as every read must see.
            model.retain(|_, (_, deadline)| deadline.is_none_or(|d| d >= now));
            match op {
                Op::Set { key, ttl } => {
                    let options = ttl.map_or(SetOptions::default(), |ttl| at(now + ttl));
                    prop_assert_eq!(s.set_with(&[key], &value.to_le_bytes(), options, now, |_| {}), Ok(true));
                    match ttl {
                        Some(0) => { model.remove(&key); }
                        _ => { model.insert(key, (value, ttl.map(|ttl| now + ttl))); }
                    }
                }
                Op::Expire { key, ttl } => {
                    let applied = s.expire(&[key], now + ttl, now, ExpireCondition::default());
                    prop_assert_eq!(applied, Ok(model.contains_key(&key)));
                    if ttl == 0 {
                        model.remove(&key);
                    } else if let Some(entry) = model.get_mut(&key) {
                        entry.1 = Some(now + ttl);
                    }
                }
                Op::Persist { key } => {
                    let had = model.get_mut(&key).and_then(|entry| entry.1.take()).is_some();
                    prop_assert_eq!(s.persist(&[key], now), had);
                }
                Op::Get { key } => {
                    let expected = model.get(&key).map(|(value, _)| value.to_le_bytes().to_vec());
                    prop_assert_eq!(s.get(&[key], || now).map(|v| v.map(<[u8]>::to_vec)), Ok(expected));
                    let expiry = match model.get(&key) {
                        None => KeyExpiry::Absent,
                        Some((_, None)) => KeyExpiry::Never,
                        Some((_, Some(deadline))) => KeyExpiry::At(*deadline),
                    };
                    prop_assert_eq!(s.expiry(&[key], now), expiry);
                }
                Op::Remove { key } => {
                    prop_assert_eq!(s.remove(&[key], now), model.remove(&key).is_some());
                }
                Op::Sweep { budget } => {
                    s.expire_due(now, budget);
                }
                Op::Wait { ms } => now += ms,
            }
            prop_assert_eq!(s.verify_invariants(), Ok(()));
            let held = (0..6u8).filter(|key| s.contains(&[*key])).count();
            prop_assert!(held >= model.len(), "a live key went missing");
        }
    }
}

#[test]
fn each_expiry_record_takes_its_own_key_among_many_with_one_deadline() {
    // The hash table compares 7 bits of a hash before the item: with thousands of keys due
    // at one deadline, a record matched by deadline alone would take another key and leave
    // its own key without a record.
    let mut s = Store::new(StoreConfig {
        max_memory: 64 << 20,
        ..StoreConfig::default()
    });
    for i in 0..4_000 {
        set_at(&mut s, format!("k{i}").as_bytes(), b"v", 1_000, 0);
    }
    let mut taken = 0;
    while s.expire_due(2_000, 1) == 1 {
        taken += 1;
        if taken % 97 == 0 {
            s.verify_invariants().expect("invariants hold");
        }
    }
    s.verify_invariants().expect("invariants hold");
    assert_eq!(s.stats().plain_expired, 4_000);
    assert_eq!(s.gauges().keys, 0);
}

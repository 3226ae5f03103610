//! The bucket table (versioned keys and plain items live in one each): every item is found by
//! its key in its own bucket through any sequence of inserts and removals, positions hold
//! their items until the table changes, and eviction's walk from any bucket reaches an item.

use super::small_key;
use crate::bucket::{BucketTable, Keyed};
use crate::plain::PlainItem;
use proptest::prelude::*;
use std::collections::HashMap;

type Table = BucketTable<PlainItem>;

fn item(key: &[u8], value: &[u8]) -> PlainItem {
    PlainItem::new(key, value, 0)
}

#[test]
fn position_or_insert_with_finds_or_adds_without_making_twice() {
    let mut table = Table::default();
    let (a, unused) = table.position_or_insert_with(b"a", "1", |v| item(b"a", v.as_bytes()));
    assert_eq!(unused, None);
    let found = table.position_or_insert_with(b"a", "3", |_| unreachable!("a is present"));
    assert_eq!(found, (a, Some("3")));
    let (b, unused) = table.position_or_insert_with(b"b", "2", |v| item(b"b", v.as_bytes()));
    assert_eq!(unused, None);
    if let Some(item) = table.item_at_mut(b) {
        item.set_stamp(7);
    }
    assert_eq!(
        table.get(b"b").map(|i| (i.value(), i.stamp())),
        Some((&b"2"[..], 7))
    );
    assert!(table.consistent());
}

#[test]
fn the_position_returned_holds_the_item_through_growth() {
    // Thousands of new keys make the table grow many times, moving every item.
    let mut table = Table::default();
    for i in 0..5000usize {
        let key = i.to_le_bytes();
        let (position, unused) = table.position_or_insert_with(&key, (), |()| item(&key, b""));
        assert!(unused.is_none());
        assert_eq!(table.item_at(position).map(Keyed::key), Some(&key[..]));
    }
    assert!(table.consistent());
    for i in 0..5000usize {
        let key = i.to_le_bytes();
        let (position, unused) =
            table.position_or_insert_with(&key, (), |()| unreachable!("present"));
        assert!(unused.is_some());
        assert_eq!(table.position(&key), Some(position));
    }
}

#[test]
fn a_sparse_table_shrinks_and_every_item_stays_reachable() {
    let mut table = Table::default();
    for i in 0..4096usize {
        table.position_or_insert_with(&i.to_le_bytes(), (), |()| item(&i.to_le_bytes(), b""));
    }
    let grown = table.positions();
    for i in 10..4096usize {
        assert!(table.remove(&i.to_le_bytes()).is_some());
    }
    assert!(table.positions() < grown, "a sparse table shrinks");
    assert!(table.consistent());
    let mut reached: Vec<_> = (0..table.positions())
        .filter_map(|start| table.occupied_from(start))
        .filter_map(|position| table.item_at(position).map(|i| i.key().to_vec()))
        .collect();
    reached.sort();
    reached.dedup();
    assert_eq!(reached.len(), 10, "every item is reached from some bucket");
}

#[test]
fn an_empty_table_has_no_item_anywhere() {
    let mut table = Table::default();
    assert_eq!(table.occupied_from(3), None);
    assert_eq!(table.position(b"a"), None);
    table.position_or_insert_with(b"a", (), |()| item(b"a", b""));
    assert!(table.remove(b"a").is_some());
    assert_eq!((table.occupied_from(0), table.len()), (None, 0));
    assert!(table.get(b"a").is_none() && table.remove(b"a").is_none());
}

/// One step of a table's life.
#[derive(Clone, Debug)]
enum Op {
    /// `position_or_insert_with`, then a stamp through `item_at_mut` (versioned inserts).
    FindOrInsert(u8, Vec<u8>, u32),
    /// `remove`, then `insert_new` (plain `set`).
    Replace(u8, Vec<u8>),
    Remove(u8),
    /// `remove_at` of bucket `position` (eviction), taken modulo the buckets.
    RemoveAt(usize),
    Touch(u8, u32),
    /// Eviction's walk from bucket `start` (taken modulo the buckets): it reaches an item
    /// whenever there is one.
    Walk(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<u8>(), prop::collection::vec(any::<u8>(), 0..40), stamp())
            .prop_map(|(k, v, r)| Op::FindOrInsert(k, v, r)),
        2 => (any::<u8>(), prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(k, v)| Op::Replace(k, v)),
        2 => any::<u8>().prop_map(Op::Remove),
        1 => any::<usize>().prop_map(Op::RemoveAt),
        1 => (any::<u8>(), stamp()).prop_map(|(k, r)| Op::Touch(k, r)),
        1 => any::<usize>().prop_map(Op::Walk),
    ]
}

/// A plain item's stamp: three bytes.
fn stamp() -> impl Strategy<Value = u32> {
    0u32..1 << 24
}

/// Applies `op` to the table and to a map from key to (value, stamp).
fn apply(table: &mut Table, model: &mut HashMap<Vec<u8>, (Vec<u8>, u32)>, op: Op) {
    match op {
        Op::FindOrInsert(k, value, stamp) => {
            let key = small_key(k);
            let (position, unused) =
                table.position_or_insert_with(&key, (), |()| item(&key, &value));
            assert_eq!(unused.is_none(), !model.contains_key(&key));
            let entry = model.entry(key.clone()).or_insert((value, 0));
            let found = table.item_at_mut(position).expect("in its bucket");
            assert_eq!((found.key(), found.value()), (&key[..], &entry.0[..]));
            found.set_stamp(stamp);
            entry.1 = stamp;
        }
        Op::Replace(k, value) => {
            let key = small_key(k);
            let removed = table.remove(&key).map(|i| (i.value().to_vec(), i.stamp()));
            assert_eq!(removed, model.remove(&key));
            table.insert_new(item(&key, &value));
            model.insert(key, (value, 0));
        }
        Op::Remove(k) => {
            let removed = table
                .remove(&small_key(k))
                .map(|i| (i.value().to_vec(), i.stamp()));
            assert_eq!(removed, model.remove(&small_key(k)));
        }
        Op::RemoveAt(start) => {
            let position = start % table.positions().max(1);
            let expected = table.item_at(position).map(|i| i.key().to_vec());
            let removed = table.remove_at(position).map(|i| i.key().to_vec());
            assert_eq!(removed, expected);
            if let Some(key) = removed {
                model.remove(&key);
            }
        }
        Op::Touch(k, stamp) => {
            if let Some(item) = table.get_mut(&small_key(k)) {
                item.set_stamp(stamp);
            }
            if let Some(entry) = model.get_mut(&small_key(k)) {
                entry.1 = stamp;
            }
        }
        Op::Walk(start) => {
            let reached = table
                .occupied_from(start)
                .and_then(|position| table.item_at(position))
                .map(|i| i.key().to_vec());
            match reached {
                Some(key) => assert!(model.contains_key(&key)),
                None => assert!(model.is_empty()),
            }
        }
    }
}

proptest! {
    #[test]
    fn bucket_table_agrees_with_a_hash_map(ops in prop::collection::vec(op(), 1..300)) {
        let mut table = Table::default();
        let mut model = HashMap::new();
        for op in ops {
            apply(&mut table, &mut model, op);
            prop_assert!(table.consistent());
            prop_assert_eq!(table.len(), model.len());
            prop_assert_eq!(table.iter().count(), model.len());
        }
        for (key, (value, stamp)) in &model {
            let item = table.get(key).expect("present");
            prop_assert_eq!((item.value(), item.stamp()), (&value[..], *stamp));
        }
    }
}

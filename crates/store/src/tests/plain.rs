//! The plain table: items hold key and value in one allocation, and the table finds each
//! item at its position in the dense list through any sequence of inserts and removals.

use super::small_key;
use crate::dense::Keyed;
use crate::plain::{prefix_len, PlainItem, PlainTable};
use proptest::prelude::*;
use std::collections::HashMap;

#[test]
fn an_item_gives_back_its_key_and_value() {
    // Items of 64 KiB and more keep their length outside the pointer: both sides of that.
    let around_the_thin_limit = [(16, 0xffff - 18), (16, 0xffff - 17), (16, 1 << 20)];
    let small = [(0, 0), (1, 0), (0, 5), (16, 100), (127, 3), (128, 3)];
    for (key_len, value_len) in small.into_iter().chain(around_the_thin_limit) {
        let key: Vec<u8> = (0..key_len).map(|i| i as u8).collect();
        let value: Vec<u8> = (0..value_len).map(|i| (i * 7) as u8).collect();
        let item = PlainItem::new(&key, &value, 9);
        assert_eq!(item.split(), (&key[..], &value[..]));
        assert_eq!(
            (item.key(), item.value(), item.recency),
            (&key[..], &value[..], 9)
        );
    }
}

#[test]
fn long_keys_take_longer_length_prefixes() {
    let lengths = [
        (0, 1),
        (127, 1),
        (128, 2),
        (16_383, 2),
        (16_384, 3),
        (70_000, 3),
    ];
    for (len, prefix) in lengths {
        assert_eq!(prefix_len(len), prefix, "prefix of {len}");
        let key = vec![b'k'; len];
        let item = PlainItem::new(&key, b"value", 0);
        assert_eq!(item.key().len(), len);
        assert_eq!(item.value(), b"value");
    }
}

#[test]
fn a_key_that_looks_like_a_prefix_is_still_the_key() {
    // Key bytes with the high bit set must not be read as more of the length prefix.
    let key = [0x80, 0xff, 0x01];
    let item = PlainItem::new(&key, &[0x80], 0);
    assert_eq!(item.split(), (&key[..], &[0x80][..]));
}

#[test]
fn removal_moves_the_last_item_into_the_hole() {
    let mut table = PlainTable::default();
    for key in [b"a", b"b", b"c"] {
        table.insert_new(PlainItem::new(key, key, 0));
    }
    assert_eq!(
        table.remove(b"a").map(|i| i.value().to_vec()),
        Some(b"a".to_vec())
    );
    assert_eq!(table.position(b"c"), Some(0));
    assert_eq!(table.position(b"b"), Some(1));
    assert_eq!(table.position(b"a"), None);
    assert!(table.consistent());
}

/// One step of a table's life.
#[derive(Clone, Debug)]
enum Op {
    Insert(u8, Vec<u8>),
    Remove(u8),
    RemoveAt(usize),
    Touch(u8, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => any::<u8>().prop_map(Op::Remove),
        1 => (0usize..300).prop_map(Op::RemoveAt),
        1 => (any::<u8>(), any::<u64>()).prop_map(|(k, r)| Op::Touch(k, r)),
    ]
}

/// Applies `op` to the table and to a map from key to (value, recency).
fn apply(table: &mut PlainTable, model: &mut HashMap<Vec<u8>, (Vec<u8>, u64)>, op: Op) {
    match op {
        Op::Insert(k, value) => {
            let key = small_key(k);
            if let Some(old) = table.remove(&key) {
                assert_eq!(
                    model.remove(&key).map(|(v, _)| v),
                    Some(old.value().to_vec())
                );
            }
            table.insert_new(PlainItem::new(&key, &value, 0));
            model.insert(key, (value, 0));
        }
        Op::Remove(k) => {
            let removed = table
                .remove(&small_key(k))
                .map(|i| (i.value().to_vec(), i.recency));
            assert_eq!(removed, model.remove(&small_key(k)));
        }
        Op::RemoveAt(position) => {
            let expected = table.item_at(position).map(|i| i.key().to_vec());
            let removed = table.remove_at(position).map(|i| i.key().to_vec());
            assert_eq!(removed, expected);
            if let Some(key) = removed {
                model.remove(&key);
            }
        }
        Op::Touch(k, recency) => {
            if let Some(item) = table.get_mut(&small_key(k)) {
                item.recency = recency;
            }
            if let Some(entry) = model.get_mut(&small_key(k)) {
                entry.1 = recency;
            }
        }
    }
}

proptest! {
    #[test]
    fn plain_table_agrees_with_a_hash_map(ops in prop::collection::vec(op(), 1..300)) {
        let mut table = PlainTable::default();
        let mut model = HashMap::new();
        for op in ops {
            apply(&mut table, &mut model, op);
            prop_assert!(table.consistent());
            prop_assert_eq!(table.len(), model.len());
        }
        for (key, (value, recency)) in &model {
            let position = table.position(key).expect("present");
            let item = table.item_at(position).expect("in the list");
            prop_assert_eq!((item.value(), item.recency), (&value[..], *recency));
        }
    }

    #[test]
    fn plain_table_survives_growth_and_shrinking(count in 100usize..2000, keep in 0usize..50) {
        let mut table = PlainTable::default();
        for i in 0..count {
            table.insert_new(PlainItem::new(&i.to_le_bytes(), &[1; 3], i as u64));
        }
        for i in keep..count {
            prop_assert!(table.remove(&i.to_le_bytes()).is_some());
        }
        prop_assert!(table.consistent());
        for i in 0..keep.min(count) {
            let position = table.position(&i.to_le_bytes()).expect("kept");
            prop_assert_eq!(table.item_at(position).map(|i| i.recency), Some(i as u64));
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_plain_item_takes_two_words_in_its_list() {
    // The thin pointer and the recency: what `PLAIN_ITEM_OVERHEAD` charges per list slot.
    assert_eq!(std::mem::size_of::<PlainItem>(), 16);
}

//! Plain items hold stamp, key and value in one allocation, a stamp tells the tick of its use
//! across its wrapping around, and the plain table takes out the item asked for. (The table
//! against a `HashMap` is in `bucket.rs`.)

use crate::bucket::Keyed;
use crate::plain::{prefix_len, recency_of, stamp_at, PlainItem, PlainTable};

#[test]
fn an_item_gives_back_its_key_and_value() {
    // Items of 64 KiB and more keep their length outside the pointer: both sides of that.
    let around_the_thin_limit = [(16, 0xffff - 18), (16, 0xffff - 17), (16, 1 << 20)];
    let small = [(0, 0), (1, 0), (0, 5), (16, 100), (127, 3), (128, 3)];
    for (key_len, value_len) in small.into_iter().chain(around_the_thin_limit) {
        let key: Vec<u8> = (0..key_len).map(|i| i as u8).collect();
        let value: Vec<u8> = (0..value_len).map(|i| (i * 7) as u8).collect();
        let mut item = PlainItem::new(&key, &value, 9);
        assert_eq!(item.split(), (&key[..], &value[..]));
        assert_eq!(
            (item.key(), item.value(), item.stamp()),
            (&key[..], &value[..], 9)
        );
        // A stamp uses three bytes, and changing it leaves key and value alone.
        item.set_stamp(0x00ab_cdef);
        assert_eq!(
            (item.key(), item.value(), item.stamp()),
            (&key[..], &value[..], 0x00ab_cdef)
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
fn a_stamp_tells_the_tick_of_its_use_to_within_a_step() {
    // Steps are 256 ticks; a stamp's 24 bits span 2^32 ticks before they wrap.
    let (step, span) = (1u64 << 8, 1u64 << 32);
    for used in [
        0,
        255,
        256,
        100_000,
        span - 1,
        span,
        span + 257,
        5 * span + 3,
    ] {
        for later in [0, 1, 255, 256, 100_000, span - step] {
            let recency = recency_of(stamp_at(used), used + later);
            let expected = used & !(step - 1);
            assert_eq!(
                recency, expected,
                "used at {used}, seen {later} ticks later"
            );
        }
    }
    // Older than the span, an item looks younger than it is: its age wraps around.
    assert_eq!(recency_of(stamp_at(0), span + 2 * step), span);
    let now = 2 * step;
    assert!(recency_of(stamp_at(step), now) < recency_of(stamp_at(now), now));
}

#[test]
fn an_item_taken_out_of_the_table_is_the_one_asked_for() {
    let mut table = PlainTable::default();
    for key in [b"a", b"b", b"c"] {
        table.insert_new(PlainItem::new(key, key, 0));
    }
    assert_eq!(
        table.remove(b"a").map(|i| i.value().to_vec()),
        Some(b"a".to_vec())
    );
    let c = table.position(b"c").expect("c is present");
    assert_eq!(
        table.remove_at(c).map(|i| i.value().to_vec()),
        Some(b"c".to_vec())
    );
    assert_eq!(table.position(b"a"), None);
    assert!(table.get(b"b").is_some());
    assert!(table.consistent());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_plain_item_takes_one_word_in_its_bucket() {
    // The thin pointer: what `PLAIN_ITEM_OVERHEAD` charges per bucket, with the control byte.
    assert_eq!(std::mem::size_of::<PlainItem>(), 8);
}

//! Model-based property tests: random operation sequences run against the store and against
//! the reference model in `reference/`, which keeps everything and scans linearly.
//!
//! 1. `store_agrees_with_model`: with no memory or staleness pressure, every answer agrees
//!    exactly.
//! 2. `small_memory_stays_bounded_and_sound`: with a small limit, accounted memory stays
//!    under it after every operation, and every hit is covered by claims the store accepted.
//! 3. `merging_agrees_with_model_and_stays_sound`: one key and one value, so that overlapping
//!    inserts always merge; exact agreement, and every hit covered by accepted claims.
//! 4. `stale_removal_never_removes_readable_versions`: with a short staleness limit and
//!    readers inside it, lookups agree with the model wherever the model's answer is readable.
//! 5. `sharded_stores_agree_with_model` and `sharded_small_memory_stays_bounded_and_sound`:
//!    1 and 2 for three shards sharing one history, as a node runs them.
//!
//! Some generated commits carry the global tag `*`: the model bounds every open version at
//! them, tagged or not, and counts them as matching every tag set, the empty one too. Most
//! generated tags name a column set over three bits (the rest every column), so that tags of
//! one site both meet and miss; the model matches them with `InvalidationTag::matches`.

mod harness;
mod reference;

use harness::{Harness, Mode, Op, TagSpec, GLOBAL};
use proptest::collection::vec;
use proptest::prelude::*;
use txcache_store::StoreConfig;

/// A tag of a read or a commit: sometimes every column, mostly a set over three bits, so that
/// tags of one site both meet and miss.
fn tag_spec() -> impl Strategy<Value = TagSpec> {
    (
        0..2u8,
        prop_oneof![3 => (0..2u8).prop_map(Some), 1 => Just(None)],
        prop_oneof![1 => Just(0u8), 2 => 1..8u8],
    )
}

/// A tag of a commit: now and then the global tag `*`, which bounds every open version.
fn commit_tag_spec() -> impl Strategy<Value = TagSpec> {
    prop_oneof![12 => tag_spec(), 1 => Just(GLOBAL)]
}

/// Operations over `keys` versioned keys and `values` distinct values.
fn op_over(keys: u8, values: u8) -> impl Strategy<Value = Op> {
    let insert = (
        0..keys,
        0..values,
        -8..3i8,
        proptest::option::weighted(0.6, 1..8u8),
        proptest::option::weighted(0.8, -6..4i8),
        vec(tag_spec(), 0..3),
    )
        .prop_map(|(key, value, lo, len, snapshot, tags)| Op::Insert {
            key,
            value,
            lo,
            len,
            snapshot,
            tags,
        });
    let lookup =
        (0..keys + 1, -8..2i8, 0..8u8, any::<bool>()).prop_map(|(key, lo, len, with_tags)| {
            Op::Lookup {
                key,
                lo,
                len,
                with_tags,
            }
        });
    prop_oneof![
        8 => insert,
        8 => lookup,
        5 => (1..4u8, 0..8u8, vec(commit_tag_spec(), 0..3)).prop_map(|(gap, dt, tags)| Op::Invalidate { gap, dt, tags }),
        1 => (0..4u8, vec(commit_tag_spec(), 0..2)).prop_map(|(back, tags)| Op::Duplicate { back, tags }),
        2 => (0..3u8, 0..8u8).prop_map(|(gap, dt)| Op::Heartbeat { gap, dt }),
        1 => (-2..4i8, 0..8u8).prop_map(|(gap, dt)| Op::Reset { gap, dt }),
        1 => (0..7u8).prop_map(|key| Op::Remove { key }),
        1 => (0..7u8, 0..3u8).prop_map(|(key, value)| Op::Set { key, value }),
        1 => (0..7u8).prop_map(|key| Op::Get { key }),
        1 => (0..16u8).prop_map(|step| Op::Resize { step }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    op_over(4, 3)
}

/// `default` cases (fast and stable); `PROPTEST_CASES` runs more for a deeper search.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn store_agrees_with_model(ops in vec(op(), 1..80)) {
        let mut h = Harness::new(Mode::Exact, StoreConfig { max_memory: 1 << 30, max_staleness_micros: u64::MAX });
        for op in &ops {
            h.run(op)?;
        }
    }

    #[test]
    fn small_memory_stays_bounded_and_sound(ops in vec(op(), 1..300), max_memory in 1500usize..30_000) {
        let mut h = Harness::new(Mode::Memory, StoreConfig { max_memory, max_staleness_micros: u64::MAX });
        for op in &ops {
            h.run(op)?;
        }
    }

    #[test]
    fn sharded_stores_agree_with_model(ops in vec(op(), 1..80)) {
        let mut h = Harness::sharded(Mode::Exact, StoreConfig { max_memory: 1 << 30, max_staleness_micros: u64::MAX }, 3);
        for op in &ops {
            h.run(op)?;
        }
    }

    #[test]
    fn sharded_small_memory_stays_bounded_and_sound(ops in vec(op(), 1..300), max_memory in 1500usize..30_000) {
        let mut h = Harness::sharded(Mode::Memory, StoreConfig { max_memory, max_staleness_micros: u64::MAX }, 3);
        for op in &ops {
            h.run(op)?;
        }
    }

    #[test]
    fn stale_removal_never_removes_readable_versions(ops in vec(op(), 1..120), max_staleness in 1u64..30) {
        let mut h = Harness::new(Mode::Staleness, StoreConfig { max_memory: 1 << 30, max_staleness_micros: max_staleness });
        for op in &ops {
            h.run(op)?;
        }
    }
}

proptest! {
    // Cheap cases, and the rare interleavings that break unsound merge rules need many.
    #![proptest_config(config(1024))]

    /// One key, one value: every overlap merges, so the merge rules meet every stream event.
    #[test]
    fn merging_agrees_with_model_and_stays_sound(ops in vec(op_over(1, 1), 1..80)) {
        let mut h = Harness::new(Mode::Exact, StoreConfig { max_memory: 1 << 30, max_staleness_micros: u64::MAX });
        for op in &ops {
            h.run(op)?;
        }
    }
}

/// The scenario behind the merge rule for tags, run through every check of the harness: an
/// open version from a snapshot ahead of `N`, merged with an equal open one from below, then
/// a commit between them that changes only the lower one's rows.
#[test]
fn merged_open_versions_stay_sound_when_the_lower_one_is_invalidated() {
    let ops = [
        Op::Invalidate {
            gap: 10,
            dt: 0,
            tags: vec![],
        },
        Op::Insert {
            key: 0,
            value: 0,
            lo: 0,
            len: None,
            snapshot: Some(3),
            tags: vec![(0, Some(1), 0)],
        },
        Op::Insert {
            key: 0,
            value: 0,
            lo: -5,
            len: None,
            snapshot: Some(0),
            tags: vec![(0, Some(2), 0)],
        },
        Op::Invalidate {
            gap: 1,
            dt: 0,
            tags: vec![(0, Some(2), 0)],
        },
        Op::Lookup {
            key: 0,
            lo: -5,
            len: 5,
            with_tags: false,
        },
    ];
    for mode in [Mode::Exact, Mode::Memory, Mode::Staleness] {
        let mut h = Harness::new(
            mode,
            StoreConfig {
                max_memory: 1 << 20,
                max_staleness_micros: u64::MAX,
            },
        );
        for op in &ops {
            h.run(op).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        }
    }
}

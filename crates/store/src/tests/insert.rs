use super::*;
use crate::StoreError;

/// History: commits 10 (t:id=1), 20 (t:id=2), 30 (t wildcard), 40 (u:id=1); N = 40, H = 10.
fn with_history() -> Store {
    let mut s = store();
    commit(&mut s, 10, &["t:id=1"]);
    commit(&mut s, 20, &["t:id=2"]);
    commit(&mut s, 30, &["t"]);
    commit(&mut s, 40, &["u:id=1"]);
    s
}

fn outcome_interval(outcome: InsertOutcome) -> ValidityInterval {
    match outcome {
        InsertOutcome::Inserted(i) | InsertOutcome::Extended(i) => i,
        other => panic!("expected a stored version, got {other:?}"),
    }
}

#[test]
fn snapshot_above_n_is_open_from_the_snapshot() {
    let mut s = with_history();
    assert_eq!(
        insert_at(&mut s, "k", "v", 45, &["t:id=1"]),
        InsertOutcome::Inserted(open(45))
    );
}

#[test]
fn insert_before_any_message_is_valid_only_at_snapshot() {
    let mut s = store();
    assert_eq!(
        insert_at(&mut s, "k", "v", 0, &["t:id=1"]),
        InsertOutcome::Inserted(bounded(0, 1))
    );
    assert_eq!(
        insert_at(&mut s, "j", "v", 7, &["t:id=1"]),
        InsertOutcome::Inserted(open(7))
    );
}

#[test]
fn insert_before_horizon_is_valid_only_at_snapshot() {
    let mut s = with_history();
    assert_eq!(s.horizon(), Some(ts(10)));
    assert_eq!(
        insert_at(&mut s, "k", "v", 9, &["u:id=9"]),
        InsertOutcome::Inserted(bounded(9, 10))
    );
}

#[test]
fn lo_is_the_latest_matching_commit_at_or_before_the_snapshot() {
    let mut s = with_history();
    assert_eq!(
        outcome_interval(insert_at(&mut s, "a", "v", 25, &["t:id=2"])),
        bounded(20, 30)
    );
    assert_eq!(
        outcome_interval(insert_at(&mut s, "b", "v", 20, &["t:id=2"])),
        bounded(20, 30)
    );
    assert_eq!(
        outcome_interval(insert_at(&mut s, "c", "v", 40, &["t:id=2"])),
        open(30)
    );
}

#[test]
fn lo_is_bounded_below_by_the_horizon() {
    let mut s = with_history();
    assert_eq!(
        outcome_interval(insert_at(&mut s, "k", "v", 15, &["u:id=2"])),
        open(10)
    );
}

#[test]
fn hi_is_the_first_matching_commit_after_the_snapshot() {
    let mut s = with_history();
    assert_eq!(
        outcome_interval(insert_at(&mut s, "a", "v", 12, &["t:id=1"])),
        bounded(10, 30)
    );
    assert_eq!(
        outcome_interval(insert_at(&mut s, "b", "v", 12, &["u:id=1", "t:id=5"])),
        bounded(10, 30)
    );
    assert_eq!(
        outcome_interval(insert_at(&mut s, "c", "v", 35, &["u:id=2"])),
        open(10)
    );
}

#[test]
fn wildcard_insert_tag_matches_every_commit_of_its_table() {
    let mut s = with_history();
    assert_eq!(
        outcome_interval(insert_at(&mut s, "k", "v", 15, &["t"])),
        bounded(10, 20)
    );
    assert_eq!(
        outcome_interval(insert_at(&mut s, "j", "v", 15, &["t:id=9"])),
        bounded(10, 30)
    );
}

#[test]
fn empty_tag_set_depends_on_nothing() {
    let mut s = with_history();
    assert_eq!(
        insert_at(&mut s, "k", "v", 25, &[]),
        InsertOutcome::Inserted(open(10))
    );
    commit(&mut s, 50, &["t"]);
    assert!(hit(&mut s, "k", 50, 50).open);
}

#[test]
fn an_insert_from_before_a_global_commit_ends_at_it() {
    let mut s = with_history();
    commit(&mut s, 50, &["*"]);
    for (key, list, lo) in [
        ("empty", &[][..], 10),
        ("fine", &["t:id=1"][..], 30),
        ("other", &["v:id=1"][..], 10),
    ] {
        assert_eq!(
            insert_at(&mut s, key, "v", 45, list),
            InsertOutcome::Inserted(bounded(lo, 50)),
            "{key}"
        );
    }
}

#[test]
fn an_insert_from_after_a_global_commit_starts_at_it() {
    let mut s = with_history();
    commit(&mut s, 50, &["*"]);
    s.heartbeat(ts(60), WallClock(60));
    for (key, list) in [("empty", &[][..]), ("fine", &["u:id=1"][..])] {
        assert_eq!(
            insert_at(&mut s, key, "v", 55, list),
            InsertOutcome::Inserted(open(50)),
            "{key}"
        );
    }
    // A matching commit after the global one still moves lo up.
    commit(&mut s, 70, &["u:id=1"]);
    assert_eq!(
        insert_at(&mut s, "later", "v", 70, &["u:id=1"]),
        InsertOutcome::Inserted(open(70))
    );
}

#[test]
fn an_insert_without_a_snapshot_ignores_global_commits() {
    let mut s = with_history();
    commit(&mut s, 50, &["*"]);
    assert_eq!(
        insert_bounded(&mut s, "k", "v", bounded(45, 55)),
        InsertOutcome::Inserted(bounded(45, 55))
    );
}

#[test]
fn request_interval_bounds_the_result() {
    let mut s = with_history();
    let request = InsertRequest {
        interval: bounded(22, 27),
        snapshot: Some(ts(25)),
        tags: tags(&["t:id=2"]),
    };
    let outcome = s.insert(b"k", b"v", request);
    assert_eq!(outcome, Ok(InsertOutcome::Inserted(bounded(22, 27))));
    let request = InsertRequest {
        interval: open(35),
        snapshot: Some(ts(36)),
        tags: tags(&["t:id=2"]),
    };
    assert_eq!(
        s.insert(b"j", b"v", request),
        Ok(InsertOutcome::Inserted(open(35)))
    );
}

#[test]
fn snapshot_outside_the_cache_interval_stores_nothing() {
    let mut s = with_history();
    let request = InsertRequest {
        interval: bounded(1, 10),
        snapshot: Some(ts(25)),
        tags: tags(&["t:id=2"]),
    };
    assert!(matches!(
        s.insert(b"k", b"v", request),
        Err(StoreError::SnapshotOutsideInterval { .. })
    ));
    assert!(!s.contains(b"k"));
}

#[test]
fn open_interval_without_snapshot_is_refused() {
    let mut s = store();
    let request = InsertRequest {
        interval: open(3),
        snapshot: None,
        tags: vec![],
    };
    assert_eq!(
        s.insert(b"k", b"", request),
        Err(StoreError::OpenWithoutSnapshot)
    );
}

#[test]
fn extension_merges_equal_bytes() {
    let mut s = store();
    insert_bounded(&mut s, "k", "v", bounded(1, 5));
    insert_bounded(&mut s, "k", "v", bounded(8, 12));
    assert_eq!(
        insert_bounded(&mut s, "k", "v", bounded(4, 9)),
        InsertOutcome::Extended(bounded(1, 12))
    );
    assert_eq!(s.gauges().versions, 1);
    // Touching is not overlapping: no merge.
    assert_eq!(
        insert_bounded(&mut s, "k", "v", bounded(12, 14)),
        InsertOutcome::Inserted(bounded(12, 14))
    );
    assert_eq!(s.stats().extensions, 1);
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn extension_keeps_the_existing_open_versions_tags() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "k", "v", 10, &["t:id=1"]);
    assert_eq!(
        insert_at(&mut s, "k", "v", 10, &["t:id=2"]),
        InsertOutcome::Extended(open(10))
    );
    assert_eq!(hit(&mut s, "k", 10, 10).tags, Some(tags(&["t:id=1"])));
    commit(&mut s, 11, &["t:id=2"]);
    assert!(hit(&mut s, "k", 11, 11).open);
}

#[test]
fn extension_takes_the_tags_of_the_open_version_with_the_lowest_lo() {
    // Existing open [15, ∞) from a snapshot ahead of N; the new open [10, ∞) covers below it.
    // Keeping the existing tags would let a commit at 12 that changes the new value's rows
    // leave [12, 15) claimed valid by neither computation.
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "k", "v", 15, &["t:id=1"]);
    assert_eq!(
        insert_at(&mut s, "k", "v", 10, &["t:id=2"]),
        InsertOutcome::Extended(open(10))
    );
    assert_eq!(hit(&mut s, "k", 10, 10).tags, Some(tags(&["t:id=2"])));
    commit(&mut s, 12, &["t:id=2"]);
    assert_eq!(
        answer(&mut s, "k", 0, 100),
        Ok(("v".into(), bounded(10, 12)))
    );
}

#[test]
fn extension_of_a_bounded_version_by_an_open_one_registers_the_new_tags() {
    let mut s = with_history();
    insert_bounded(&mut s, "k", "v", bounded(5, 45));
    assert_eq!(
        insert_at(&mut s, "k", "v", 44, &["u:id=2"]),
        InsertOutcome::Extended(open(5))
    );
    commit(&mut s, 50, &["u:id=2"]);
    assert_eq!(
        answer(&mut s, "k", 0, 100),
        Ok(("v".into(), bounded(5, 50)))
    );
}

#[test]
fn nondeterminism_keeps_existing() {
    let mut s = store();
    insert_bounded(&mut s, "k", "old", bounded(1, 10));
    assert_eq!(
        insert_bounded(&mut s, "k", "new", bounded(5, 15)),
        InsertOutcome::Nondeterministic
    );
    assert_eq!(
        answer(&mut s, "k", 0, 100),
        Ok(("old".into(), bounded(1, 10)))
    );
    assert_eq!(s.stats().nondeterminism_warnings, 1);
    // An open version holds through N: a different value known there contradicts it.
    commit(&mut s, 20, &[]);
    insert_at(&mut s, "j", "a", 20, &["t:id=1"]);
    s.heartbeat(ts(150), WallClock(150));
    assert_eq!(
        insert_bounded(&mut s, "j", "b", bounded(100, 101)),
        InsertOutcome::Nondeterministic
    );
}

#[test]
fn different_values_beyond_n_keep_what_is_known_of_each() {
    // The node is behind the pins: two values computed at snapshots 30 and 40 (> N = 20)
    // differ, which proves a commit in (30, 40] it has not applied yet. Not nondeterminism:
    // each keeps what the node knows of it.
    let mut s = store();
    commit(&mut s, 20, &[]);
    insert_at(&mut s, "k", "old", 30, &["t:id=1"]);
    assert_eq!(
        insert_at(&mut s, "k", "new", 40, &["t:id=1"]),
        InsertOutcome::Inserted(open(40))
    );
    assert_eq!(s.stats().nondeterminism_warnings, 0);
    assert_eq!(
        answer(&mut s, "k", 30, 30),
        Ok(("old".into(), bounded(30, 31)))
    );
    assert_eq!(
        answer(&mut s, "k", 40, 40),
        Ok(("new".into(), bounded(40, 41)))
    );
    // The older one left the tag index: the commit that changed it truncates only the new.
    commit(&mut s, 35, &["t:id=1"]);
    assert_eq!(
        answer(&mut s, "k", 30, 30),
        Ok(("old".into(), bounded(30, 31)))
    );
    // And a value computed earlier than the stored open one, also beyond N, is kept only
    // through N.
    let mut s = store();
    commit(&mut s, 20, &[]);
    insert_at(&mut s, "j", "later", 40, &["t:id=1"]);
    assert_eq!(
        insert_at(&mut s, "j", "earlier", 30, &["t:id=1"]),
        InsertOutcome::Inserted(bounded(30, 31))
    );
    assert_eq!(
        answer(&mut s, "j", 40, 40),
        Ok(("later".into(), bounded(40, 41)))
    );
}

#[test]
fn too_large_item_is_refused_and_changes_nothing() {
    let mut s = Store::new(StoreConfig {
        max_memory: 1000,
        ..StoreConfig::default()
    });
    insert_bounded(&mut s, "small", "v", bounded(1, 2));
    let request = InsertRequest {
        interval: bounded(1, 2),
        snapshot: None,
        tags: vec![],
    };
    let result = s.insert(b"k", &[0; 1000], request);
    assert!(matches!(result, Err(StoreError::TooLarge { limit: 1000, size }) if size > 1000));
    assert!(s.contains(b"small"));
    assert!(matches!(
        s.set(b"k", &[0; 1000]),
        Err(StoreError::TooLarge { .. })
    ));
}

fn insert_request(
    store: &mut Store,
    key: &str,
    interval: ValidityInterval,
    s: u64,
    list: &[&str],
) -> Result<InsertOutcome, StoreError> {
    let request = InsertRequest {
        interval,
        snapshot: Some(ts(s)),
        tags: tags(list),
    };
    store.insert(key.as_bytes(), b"v", request)
}

/// Regression: a bounded cache-read interval reaching past N, with an open database side,
/// used to be stored unregistered over commits the node had not seen.
#[test]
fn bounded_insert_past_n_claims_only_what_the_node_has_seen() {
    let mut s = with_history();
    let stored = insert_request(&mut s, "k", bounded(35, 200), 38, &["u:id=2"]).unwrap();
    assert_eq!(stored, InsertOutcome::Inserted(bounded(35, 41)));
    commit(&mut s, 150, &["u:id=2"]);
    assert!(matches!(lookup(&mut s, "k", 160, 160), Lookup::Miss(_)));
    // Snapshot above N: only the snapshot itself is known.
    let stored = insert_request(&mut s, "j", bounded(155, 500), 160, &["u:id=2"]).unwrap();
    assert_eq!(stored, InsertOutcome::Inserted(bounded(160, 161)));
}

/// Regression: with lo above the snapshot, a commit in (s, lo] changed the value but was
/// ignored as "at or before lo". Such inserts are refused.
#[test]
fn snapshot_outside_the_request_interval_is_refused() {
    let mut s = with_history();
    let refused = insert_request(&mut s, "k", open(45), 42, &["t:id=1"]);
    assert!(matches!(
        refused,
        Err(StoreError::SnapshotOutsideInterval { .. })
    ));
    let refused = insert_request(&mut s, "k", bounded(10, 20), 25, &["t:id=1"]);
    assert!(matches!(
        refused,
        Err(StoreError::SnapshotOutsideInterval { .. })
    ));
}

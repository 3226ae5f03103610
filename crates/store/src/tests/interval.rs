use super::*;

/// History: commits 10 (t:id=1), 20 (t:id=2), 30 (t wildcard), 40 (u:id=1); N = 40, H = 10.
fn with_history() -> Store {
    let mut s = store();
    commit(&mut s, 10, &["t:id=1"]);
    commit(&mut s, 20, &["t:id=2"]);
    commit(&mut s, 30, &["t"]);
    commit(&mut s, 40, &["u:id=1"]);
    s
}

/// The database interval of snapshot `at` and `list`, and its effective form.
fn database(store: &Store, at: u64, list: &[&str]) -> (ValidityInterval, ValidityInterval) {
    let interval = store
        .database_interval(ts(at), &tags(list))
        .expect("a wire snapshot has an interval");
    let effective = store.effective(&interval).expect("non-empty");
    (interval, effective)
}

#[test]
fn no_later_matching_commit_is_open_and_valid_through_n() {
    let s = with_history();
    assert_eq!(database(&s, 35, &["t:id=2"]), (open(30), bounded(30, 41)));
}

#[test]
fn a_later_matching_commit_bounds_the_interval() {
    let s = with_history();
    assert_eq!(
        database(&s, 15, &["t:id=2"]),
        (bounded(10, 20), bounded(10, 20))
    );
    assert_eq!(
        database(&s, 25, &["u:id=1", "t:id=1"]),
        (bounded(10, 30), bounded(10, 30))
    );
}

#[test]
fn lo_is_the_latest_matching_commit_at_or_before_the_snapshot() {
    let s = with_history();
    assert_eq!(database(&s, 25, &["t:id=2"]).0, bounded(20, 30));
    assert_eq!(database(&s, 20, &["t:id=2"]).0, bounded(20, 30));
    assert_eq!(database(&s, 40, &["u:id=1"]).0, open(40));
    // Never below the horizon.
    assert_eq!(database(&s, 15, &["v:id=1"]).0, open(10));
}

#[test]
fn snapshot_older_than_the_horizon_is_valid_only_at_the_snapshot() {
    let s = with_history();
    assert_eq!(
        database(&s, 9, &["u:id=9"]),
        (bounded(9, 10), bounded(9, 10))
    );
    let empty = store();
    assert_eq!(
        database(&empty, 0, &["t:id=1"]),
        (bounded(0, 1), bounded(0, 1))
    );
}

#[test]
fn snapshot_above_n_is_open_from_the_snapshot_and_valid_at_it_alone() {
    let s = with_history();
    assert_eq!(database(&s, 45, &["t:id=1"]), (open(45), bounded(45, 46)));
    // No message yet: N = 0.
    assert_eq!(database(&store(), 7, &[]), (open(7), bounded(7, 8)));
}

#[test]
fn wildcard_tags_match_every_commit_of_their_table() {
    let s = with_history();
    // The query's wildcard matches the fine commits of its table.
    assert_eq!(database(&s, 25, &["t"]).0, bounded(20, 30));
    assert_eq!(database(&s, 35, &["u"]), (bounded(10, 40), bounded(10, 40)));
    // A wildcard commit matches every fine tag of its table.
    assert_eq!(database(&s, 25, &["t:id=5"]).0, bounded(10, 30));
    assert_eq!(database(&s, 35, &["t:id=5"]).0, open(30));
}

#[test]
fn no_tags_depend_on_nothing() {
    let s = with_history();
    assert_eq!(database(&s, 25, &[]), (open(10), bounded(10, 41)));
}

#[test]
fn a_global_commit_bounds_every_database_interval() {
    let mut s = with_history();
    commit(&mut s, 50, &["*"]);
    s.heartbeat(ts(60), WallClock(60));
    assert_eq!(database(&s, 45, &[]), (bounded(10, 50), bounded(10, 50)));
    assert_eq!(database(&s, 45, &["u:id=1"]).0, bounded(40, 50));
    assert_eq!(database(&s, 50, &[]), (open(50), bounded(50, 61)));
    assert_eq!(database(&s, 55, &["t:id=1", "v"]).0, open(50));
    // Once trimmed, the horizon bounds lo instead.
    for _ in 0..5 {
        s.history.write().pop_oldest();
    }
    assert_eq!(s.horizon(), Some(ts(50)));
    assert_eq!(database(&s, 55, &[]).0, open(50));
    assert_eq!(database(&s, 45, &[]).0, bounded(45, 46));
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn trimming_moves_lo_up_to_the_new_horizon() {
    let s = with_history();
    s.history.write().pop_oldest();
    assert_eq!(s.horizon(), Some(ts(10)));
    s.history.write().pop_oldest();
    assert_eq!(s.horizon(), Some(ts(20)));
    assert_eq!(database(&s, 25, &["t:id=1"]).0, bounded(20, 30));
    assert_eq!(database(&s, 15, &["t:id=1"]).0, bounded(15, 16));
}

#[test]
fn computing_the_interval_stores_nothing() {
    let s = with_history();
    let (memory, stats) = (s.memory(), s.stats().clone());
    database(&s, 25, &["t:id=2", "u"]);
    assert_eq!((s.memory(), s.stats()), (memory, &stats));
    assert_eq!(s.gauges().keys, 0);
}

#[test]
fn inserts_store_exactly_the_database_interval() {
    let mut s = with_history();
    // A global commit among them: before it, at it, after it and above N.
    commit(&mut s, 45, &["*"]);
    let tag_sets: [&[&str]; 6] = [
        &[],
        &["t:id=1"],
        &["t:id=2"],
        &["t"],
        &["u:id=1", "t:id=9"],
        &["v"],
    ];
    for at in 0..50 {
        for (i, list) in tag_sets.iter().enumerate() {
            let (interval, _) = database(&s, at, list);
            assert_eq!(
                insert_at(&mut s, &format!("k{at}/{i}"), "v", at, list),
                InsertOutcome::Inserted(interval),
                "snapshot {at}, tags {list:?}"
            );
        }
    }
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn commits_whose_columns_miss_the_tags_bound_nothing() {
    let mut s = store();
    commit(&mut s, 10, &["t#1:id=1"]);
    commit(&mut s, 20, &["t#20:id=1"]);
    commit(&mut s, 30, &["t#20"]);
    commit(&mut s, 40, &["t#8:id=1"]);
    s.heartbeat(ts(50), WallClock(50));
    assert_eq!(database(&s, 25, &["t#9:id=1"]).0, bounded(10, 40));
    assert_eq!(database(&s, 25, &["t#20:id=1"]).0, bounded(20, 30));
    assert_eq!(database(&s, 45, &["t#20:id=1"]).0, open(30));
    assert_eq!(database(&s, 35, &["t#9"]).0, bounded(10, 40));
    // Without columns, every commit of the site or table, as before.
    assert_eq!(database(&s, 25, &["t:id=1"]).0, bounded(20, 30));
}

#[test]
fn past_the_scan_limit_of_missing_commits_the_interval_only_shrinks() {
    // The history scans 1024 entries past its binary search for a commit whose columns meet.
    let mut s = store();
    commit(&mut s, 1, &["t#1:id=1"]);
    for at in 2..=1500 {
        commit(&mut s, at, &["t#20:id=1"]);
    }
    // The truth is [1, ∞) for every snapshot. Past the limit the nearest commit bounds lo
    // (a snapshot far from 1) or hi (a snapshot far from the end).
    assert_eq!(database(&s, 1500, &["t#9:id=1"]).0, open(1500));
    assert_eq!(database(&s, 1200, &["t#9:id=1"]).0, open(1200));
    assert_eq!(database(&s, 30, &["t#9:id=1"]).0, bounded(1, 31));
    assert_eq!(database(&s, 1000, &["t#9:id=1"]).0, open(1));
    assert_eq!(database(&s, 1500, &["t#20:id=1"]).0, open(1500));
    s.verify_invariants().expect("invariants hold");
}

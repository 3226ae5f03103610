use super::*;

#[test]
fn commit_at_lo_never_truncates() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "at", "v", 20, &["t:id=1"]);
    insert_at(&mut s, "above", "v", 25, &["t:id=1"]);
    commit(&mut s, 20, &["t:id=1"]);
    assert!(hit(&mut s, "at", 20, 20).open);
    assert!(hit(&mut s, "above", 25, 25).open);
    commit(&mut s, 26, &["t:id=1"]);
    assert_eq!(
        answer(&mut s, "at", 0, 100),
        Ok(("v".into(), bounded(20, 26)))
    );
    assert_eq!(
        answer(&mut s, "above", 0, 100),
        Ok(("v".into(), bounded(25, 26)))
    );
}

#[test]
fn invalidation_truncates_only_matching_open_versions() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "one", "v", 10, &["t:id=1"]);
    insert_at(&mut s, "two", "v", 10, &["t:id=2"]);
    insert_at(&mut s, "other", "v", 10, &["u:id=1"]);
    commit(&mut s, 15, &["t:id=1"]);
    assert!(!hit(&mut s, "one", 10, 10).open);
    assert!(hit(&mut s, "two", 10, 10).open && hit(&mut s, "other", 10, 10).open);
    assert_eq!(s.stats().versions_truncated, 1);
    assert_eq!(s.gauges().open_versions, 2);
    assert_eq!(
        s.gauges().open_version_tags,
        2,
        "the closed version dropped its tag"
    );
}

#[test]
fn fine_invalidation_truncates_a_version_registered_under_the_wildcard() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "k", "v", 10, &["t"]);
    commit(&mut s, 15, &["t:id=7"]);
    assert_eq!(hit(&mut s, "k", 10, 10).interval, bounded(10, 15));
}

#[test]
fn wildcard_invalidation_truncates_every_open_version_of_table() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "fine", "v", 10, &["t:id=1"]);
    insert_at(&mut s, "other_column", "v", 10, &["t:name=x"]);
    insert_at(&mut s, "wild", "v", 10, &["t"]);
    insert_at(&mut s, "other_table", "v", 10, &["u:id=1"]);
    commit(&mut s, 15, &["t"]);
    for key in ["fine", "other_column", "wild"] {
        assert_eq!(hit(&mut s, key, 10, 10).interval, bounded(10, 15), "{key}");
    }
    assert!(hit(&mut s, "other_table", 10, 10).open);
}

#[test]
fn duplicate_invalidation_is_ignored() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "k", "v", 12, &["t:id=1"]);
    assert!(!commit(&mut s, 10, &["t:id=1"]));
    assert!(!commit(&mut s, 5, &["t:id=1"]));
    assert!(hit(&mut s, "k", 12, 12).open);
    assert_eq!(
        (s.last_applied(), s.stats().invalidations_duplicate),
        (ts(10), 2)
    );
}

#[test]
fn heartbeat_advances_n_and_starts_the_history() {
    let mut s = store();
    assert_eq!((s.last_applied(), s.horizon()), (Timestamp::ZERO, None));
    assert!(s.heartbeat(ts(7), WallClock(70)));
    assert_eq!((s.last_applied(), s.horizon()), (ts(7), Some(ts(7))));
    assert!(!s.heartbeat(ts(7), WallClock(80)));
    assert!(s.heartbeat(ts(9), WallClock(90)));
    assert_eq!(
        (s.last_applied(), s.horizon(), s.latest_commit_time()),
        (ts(9), Some(ts(7)), WallClock(90))
    );
    assert_eq!(
        insert_at(&mut s, "k", "v", 8, &["t:id=1"]),
        InsertOutcome::Inserted(open(7))
    );
}

#[test]
fn reset_bounds_open_versions_at_n() {
    let mut s = store();
    commit(&mut s, 5, &[]);
    commit(&mut s, 10, &[]);
    assert_eq!(
        insert_at(&mut s, "below", "v", 8, &["t:id=1"]),
        InsertOutcome::Inserted(open(5))
    );
    assert_eq!(
        insert_at(&mut s, "above", "v", 14, &["t:id=1"]),
        InsertOutcome::Inserted(open(14))
    );
    s.reset(ts(20), WallClock(20));
    assert_eq!(
        answer(&mut s, "below", 0, 100),
        Ok(("v".into(), bounded(5, 11)))
    );
    assert_eq!(
        answer(&mut s, "above", 0, 100),
        Ok(("v".into(), bounded(14, 15)))
    );
    assert_eq!(s.gauges().open_versions, 0);
    assert_eq!(s.gauges().open_version_tags, 0);
    commit(&mut s, 21, &["t:id=1"]);
    assert_eq!(s.stats().versions_truncated, 0);
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn reset_forgets_the_history_and_moves_the_horizon_to_n() {
    let mut s = store();
    commit(&mut s, 10, &["t:id=1"]);
    s.reset(ts(20), WallClock(20));
    assert_eq!((s.last_applied(), s.horizon()), (ts(20), Some(ts(20))));
    assert_eq!(
        insert_at(&mut s, "k", "v", 15, &["t:id=2"]),
        InsertOutcome::Inserted(bounded(15, 16))
    );
    assert_eq!(
        insert_at(&mut s, "j", "v", 20, &["t:id=2"]),
        InsertOutcome::Inserted(open(20))
    );
    s.reset(ts(5), WallClock(30));
    assert_eq!(s.last_applied(), ts(20), "a reset never moves N back");
}

#[test]
fn rewind_drops_versioned_keys_and_moves_n_back() {
    let mut s = store();
    commit(&mut s, 10, &["t:id=1"]);
    insert_at(&mut s, "open", "v", 10, &["t:id=1"]);
    insert_at(&mut s, "bounded", "v", 10, &["t:id=2"]);
    commit(&mut s, 20, &["t:id=2"]);
    s.set(b"plain", b"p").expect("fits");
    s.rewind(ts(15), WallClock(30));
    assert_eq!((s.last_applied(), s.horizon()), (ts(15), Some(ts(15))));
    assert_eq!(answer(&mut s, "open", 0, 100), Err(MissKind::Compulsory));
    assert_eq!(answer(&mut s, "bounded", 0, 100), Err(MissKind::Compulsory));
    assert_eq!(
        s.get(b"plain", || 0),
        Ok(Some(&b"p"[..])),
        "plain values carry no database time"
    );
    assert_eq!((s.gauges().versions, s.stats().rewinds), (0, 1));
    // The stream goes on from the new position: 16 is applied, not taken for a duplicate.
    assert!(commit(&mut s, 16, &["t:id=1"]));
    assert_eq!(
        insert_at(&mut s, "open", "v", 16, &["t:id=1"]),
        InsertOutcome::Inserted(open(16))
    );
    s.verify_invariants().expect("invariants hold");
    // A rewind that is no rewind (at or past N) changes nothing.
    s.rewind(ts(16), WallClock(40));
    assert_eq!((s.last_applied(), s.stats().rewinds), (ts(16), 1));
    assert!(hit(&mut s, "open", 16, 16).open);
}

#[test]
fn a_rewind_reaches_every_shard_sharing_the_history() {
    let history = std::sync::Arc::new(crate::SharedHistory::new(2));
    let mut shards: Vec<Store> = (0..2)
        .map(|_| Store::with_history(StoreConfig::default(), history.clone()))
        .collect();
    // As a node applies the stream: each message to every shard before the next.
    let messages: [&dyn Fn(&mut Store); 4] = [
        &|shard| assert!(commit(shard, 10, &["t:id=1"])),
        &|shard| assert!(commit(shard, 20, &["t:id=1"])),
        &|shard| shard.rewind(ts(12), WallClock(30)),
        &|shard| assert!(commit(shard, 13, &["t:id=1"])),
    ];
    for message in messages {
        for shard in &mut shards {
            message(shard);
        }
    }
    for shard in &mut shards {
        assert_eq!(
            (shard.last_applied(), shard.horizon()),
            (ts(13), Some(ts(12)))
        );
        shard.verify_invariants().expect("invariants hold");
    }
    assert_eq!(
        insert_at(&mut shards[1], "k", "v", 12, &["t:id=1"]),
        InsertOutcome::Inserted(bounded(12, 13)),
        "the commit at 13 was recorded once and is seen by both"
    );
}

#[test]
fn history_older_than_the_staleness_limit_is_trimmed() {
    let mut s = Store::new(StoreConfig {
        max_staleness_micros: 100,
        ..StoreConfig::default()
    });
    commit_at(&mut s, 10, 1000, &["t:id=1"]);
    commit_at(&mut s, 20, 1050, &["t:id=2"]);
    commit_at(&mut s, 30, 1120, &["u:id=1"]);
    assert_eq!(s.horizon(), Some(ts(10)));
    assert_eq!(
        insert_at(&mut s, "k", "v", 25, &["u:id=1"]),
        InsertOutcome::Inserted(bounded(10, 30))
    );
    s.heartbeat(ts(31), WallClock(1151));
    assert_eq!(s.horizon(), Some(ts(20)));
    assert_eq!(
        insert_at(&mut s, "j", "v", 15, &["u:id=1"]),
        InsertOutcome::Inserted(bounded(15, 16))
    );
}

#[test]
fn history_is_capped_at_an_eighth_of_memory() {
    let mut s = Store::new(StoreConfig {
        max_memory: 64 << 10,
        ..StoreConfig::default()
    });
    for i in 1..=2000 {
        commit(&mut s, i, &["public.items:id=123456", "public.users:id=42"]);
        assert!(s.memory().history <= (64 << 10) / 8);
    }
    assert!(s.horizon() > Some(ts(1)));
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn stale_bounded_versions_are_removed_eagerly() {
    let mut s = Store::new(StoreConfig {
        max_staleness_micros: 100,
        ..StoreConfig::default()
    });
    commit_at(&mut s, 10, 1000, &[]);
    insert_at(&mut s, "k", "v", 10, &["t:id=1"]);
    commit_at(&mut s, 20, 1010, &["t:id=1"]);
    s.heartbeat(ts(21), WallClock(1110));
    assert!(
        s.contains(b"k"),
        "the commit that bounded it is exactly 100 µs old"
    );
    s.heartbeat(ts(22), WallClock(1111));
    assert!(!s.contains(b"k"));
    assert_eq!(s.stats().stale_removals, 1);
    assert_eq!(answer(&mut s, "k", 10, 15), Err(MissKind::Staleness));
}

#[test]
fn version_ending_after_every_known_commit_waits_for_a_later_commit() {
    let mut s = Store::new(StoreConfig {
        max_staleness_micros: 100,
        ..StoreConfig::default()
    });
    commit_at(&mut s, 10, 1000, &[]);
    // Bounded by cache reads at 15: no commit at or after 15 is known, so readers at 14 may
    // still be current however much time passes.
    insert_bounded(&mut s, "k", "v", bounded(5, 15));
    s.heartbeat(ts(12), WallClock(5000));
    assert!(s.contains(b"k"));
    commit_at(&mut s, 16, 5001, &[]);
    s.heartbeat(ts(17), WallClock(5101));
    assert!(s.contains(b"k"));
    s.heartbeat(ts(18), WallClock(5102));
    assert!(!s.contains(b"k"));
}

#[test]
fn inserted_bounded_version_uses_the_commit_time_of_its_end() {
    let mut s = Store::new(StoreConfig {
        max_staleness_micros: 100,
        ..StoreConfig::default()
    });
    commit_at(&mut s, 10, 1000, &["t:id=1"]);
    commit_at(&mut s, 20, 1050, &["t:id=1"]);
    assert_eq!(
        insert_at(&mut s, "k", "v", 12, &["t:id=1"]),
        InsertOutcome::Inserted(bounded(10, 20))
    );
    s.heartbeat(ts(21), WallClock(1150));
    assert!(s.contains(b"k"));
    s.heartbeat(ts(22), WallClock(1151));
    assert!(!s.contains(b"k"));
}

#[test]
fn a_global_commit_bounds_every_open_version_tagged_or_not() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "untagged", "v", 10, &[]);
    insert_at(&mut s, "fine", "v", 10, &["t:id=1"]);
    insert_at(&mut s, "wild", "v", 10, &["u"]);
    // Ahead of N: open from its snapshot, which the commit at 20 is visible in.
    insert_at(&mut s, "later", "v", 25, &[]);
    insert_bounded(&mut s, "bounded", "v", bounded(5, 15));
    s.set(b"plain", b"p").expect("fits");
    assert!(commit(&mut s, 20, &["*"]));
    for key in ["untagged", "fine", "wild"] {
        assert_eq!(
            answer(&mut s, key, 0, 100),
            Ok(("v".into(), bounded(10, 20))),
            "{key}"
        );
    }
    assert!(hit(&mut s, "later", 25, 25).open);
    assert_eq!(hit(&mut s, "bounded", 5, 5).interval, bounded(5, 15));
    assert_eq!(s.get(b"plain", || 0), Ok(Some(&b"p"[..])));
    assert_eq!(s.stats().versions_truncated, 3);
    assert_eq!(
        (s.gauges().open_versions, s.gauges().open_version_tags),
        (1, 0)
    );
    // The global tag among others bounds everything just the same.
    assert!(commit(&mut s, 30, &["t:id=9", "*"]));
    assert_eq!(hit(&mut s, "later", 25, 25).interval, bounded(25, 30));
    assert_eq!(s.gauges().open_versions, 0);
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn a_global_commit_is_recorded_in_the_history() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    commit(&mut s, 20, &["*"]);
    commit(&mut s, 30, &["t:id=1"]);
    assert_eq!(
        insert_at(&mut s, "before", "v", 15, &[]),
        InsertOutcome::Inserted(bounded(10, 20))
    );
    assert_eq!(
        insert_at(&mut s, "after", "v", 25, &["u:id=1"]),
        InsertOutcome::Inserted(open(20))
    );
    s.verify_invariants().expect("invariants hold");
}

#[test]
fn a_repeated_global_commit_changes_nothing() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    assert!(commit(&mut s, 20, &["*"]));
    insert_at(&mut s, "k", "v", 20, &[]);
    let (memory, truncated) = (s.memory(), s.stats().versions_truncated);
    assert!(!commit(&mut s, 20, &["*"]));
    assert!(!commit(&mut s, 15, &["*"]));
    assert!(hit(&mut s, "k", 20, 20).open);
    assert_eq!(
        (s.memory(), s.stats().versions_truncated),
        (memory, truncated)
    );
    assert_eq!(s.stats().invalidations_duplicate, 2);
}

#[test]
fn a_global_commit_reaches_every_shard_and_is_recorded_once() {
    let history = std::sync::Arc::new(crate::SharedHistory::new(2));
    let mut shards: Vec<Store> = (0..2)
        .map(|_| Store::with_history(StoreConfig::default(), history.clone()))
        .collect();
    for (i, shard) in shards.iter_mut().enumerate() {
        assert!(commit(shard, 10, &[]));
        insert_at(shard, &format!("k{i}"), "v", 10, &[]);
    }
    assert!(commit(&mut shards[0], 20, &["*"]));
    let bytes = history.read().bytes();
    // Shard 1 has not applied it yet, but an insert there already sees it in the history.
    assert_eq!(
        insert_at(&mut shards[1], "early", "v", 10, &[]),
        InsertOutcome::Inserted(bounded(10, 20))
    );
    assert!(commit(&mut shards[1], 20, &["*"]));
    assert_eq!(history.read().bytes(), bytes, "recorded once");
    for (i, shard) in shards.iter_mut().enumerate() {
        assert!(!commit(shard, 20, &["*"]), "a repeat is a duplicate");
        assert_eq!(
            hit(shard, &format!("k{i}"), 10, 10).interval,
            bounded(10, 20)
        );
        assert_eq!(shard.gauges().open_versions, 0);
        shard.verify_invariants().expect("invariants hold");
    }
}

#[test]
fn an_update_truncates_only_open_versions_depending_on_a_column_it_changed() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    // Bits 0 and 3 (rows and a column) against the update's bit 5.
    insert_at(&mut s, "other_columns", "v", 10, &["t#9:id=1"]);
    insert_at(&mut s, "same_column", "v", 10, &["t#20:id=1"]);
    insert_at(&mut s, "every_column", "v", 10, &["t:id=1"]);
    insert_at(&mut s, "wildcard", "v", 10, &["t#9"]);
    insert_at(&mut s, "one_site_twice", "v", 10, &["t#1:id=1", "t#8:id=1"]);
    insert_at(
        &mut s,
        "one_site_union",
        "v",
        10,
        &["t#1:id=1", "t#20:id=1"],
    );
    commit(&mut s, 15, &["t#20:id=1"]);
    for key in ["other_columns", "wildcard", "one_site_twice"] {
        assert!(hit(&mut s, key, 10, 10).open, "{key}");
    }
    for key in ["same_column", "every_column", "one_site_union"] {
        assert_eq!(hit(&mut s, key, 10, 10).interval, bounded(10, 15), "{key}");
    }
    assert_eq!(s.stats().versions_truncated, 3);
    // An insert or delete changes which rows exist (bit 0): every read of the rows meets it.
    commit(&mut s, 20, &["t#1"]);
    for key in ["other_columns", "wildcard", "one_site_twice"] {
        assert_eq!(hit(&mut s, key, 10, 10).interval, bounded(10, 20), "{key}");
    }
    assert_eq!(s.gauges().open_versions, 0);
    s.verify_invariants().expect("invariants hold");
}

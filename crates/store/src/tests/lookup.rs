use super::*;
use crate::StoreError;

#[test]
fn open_version_counts_as_valid_through_n() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    assert_eq!(
        insert_at(&mut s, "k", "v", 10, &["t:id=1"]),
        InsertOutcome::Inserted(open(10))
    );
    assert_eq!(hit(&mut s, "k", 0, 100).interval, bounded(10, 11));
    commit(&mut s, 20, &["t:id=2"]);
    let h = hit(&mut s, "k", 15, 15);
    assert_eq!((h.interval, h.open), (bounded(10, 21), true));
    // Known valid through N = 20 only: a range starting at 21 finds it too old.
    assert_eq!(answer(&mut s, "k", 21, 30), Err(MissKind::Staleness));
}

#[test]
fn open_version_above_n_is_valid_at_its_lo_only() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "k", "v", 15, &["t:id=1"]);
    assert_eq!(hit(&mut s, "k", 0, 100).interval, bounded(15, 16));
    assert_eq!(answer(&mut s, "k", 0, 14), Err(MissKind::Consistency));
}

#[test]
fn lookup_returns_the_most_recent_intersecting_version() {
    let mut s = store();
    insert_bounded(&mut s, "k", "a", bounded(1, 5));
    insert_bounded(&mut s, "k", "b", bounded(5, 9));
    insert_bounded(&mut s, "k", "c", bounded(12, 20));
    assert_eq!(
        answer(&mut s, "k", 0, 100),
        Ok(("c".into(), bounded(12, 20)))
    );
    assert_eq!(answer(&mut s, "k", 3, 11), Ok(("b".into(), bounded(5, 9))));
    assert_eq!(answer(&mut s, "k", 4, 4), Ok(("a".into(), bounded(1, 5))));
    // At the newest version's start (its shortcut) and just below it (the search).
    assert_eq!(
        answer(&mut s, "k", 0, 12),
        Ok(("c".into(), bounded(12, 20)))
    );
    assert_eq!(answer(&mut s, "k", 0, 11), Ok(("b".into(), bounded(5, 9))));
}

#[test]
fn lookup_range_is_inclusive_and_intervals_half_open() {
    let mut s = store();
    insert_bounded(&mut s, "k", "a", bounded(5, 9));
    assert!(answer(&mut s, "k", 0, 5).is_ok());
    assert!(answer(&mut s, "k", 8, 20).is_ok());
    assert_eq!(answer(&mut s, "k", 9, 20), Err(MissKind::Staleness));
    assert_eq!(answer(&mut s, "k", 0, 4), Err(MissKind::Consistency));
}

#[test]
fn tags_are_returned_for_open_versions_only_when_asked() {
    let mut s = store();
    commit(&mut s, 10, &[]);
    insert_at(&mut s, "k", "v", 10, &["t:id=2", "t:id=1", "t:id=2"]);
    assert_eq!(
        hit(&mut s, "k", 0, 20).tags,
        Some(tags(&["t:id=1", "t:id=2"]))
    );
    let Ok(Lookup::Hit(h)) = s.lookup(b"k", ts(0), ts(20), false) else {
        panic!("hit expected")
    };
    assert_eq!(h.tags, None);
    commit(&mut s, 11, &["t:id=1"]);
    let h = hit(&mut s, "k", 0, 20);
    assert_eq!((h.open, h.tags, h.interval), (false, None, bounded(10, 11)));
}

#[test]
fn empty_lookup_range_is_refused() {
    let mut s = store();
    assert_eq!(
        s.lookup(b"k", ts(5), ts(4), false),
        Err(StoreError::InvalidRange {
            lo: ts(5),
            hi: ts(4)
        })
    );
}

#[test]
fn miss_kinds_follow_the_documented_order() {
    let mut s = store();
    assert_eq!(answer(&mut s, "never", 0, 10), Err(MissKind::Compulsory));
    insert_bounded(&mut s, "k", "v", bounded(20, 30));
    // A fresh-enough version starting after the range: consistency.
    assert_eq!(answer(&mut s, "k", 0, 10), Err(MissKind::Consistency));
    // Only versions ending at or before lo: staleness.
    assert_eq!(answer(&mut s, "k", 30, 40), Err(MissKind::Staleness));
    assert_eq!(s.stats().misses_compulsory, 1);
    assert_eq!(
        (s.stats().misses_consistency, s.stats().misses_staleness),
        (1, 1)
    );
}

#[test]
fn delete_makes_the_next_miss_compulsory() {
    let mut s = Store::new(StoreConfig {
        max_memory: 32 << 10,
        ..StoreConfig::default()
    });
    let mut fillers = 0..;
    let mut fill = |s: &mut Store| {
        let i = fillers.next().expect("endless");
        insert_bounded(s, &format!("filler{i}"), "x", bounded(1, 5));
    };
    // Past the limit first: the first round of evictions also fills the ghosts' budget (five
    // ghosts here) and took six versions in one insert, which could push out the ghost of a
    // key it evicted early; after it, an insert evicts one or two.
    while s.stats().evictions < 10 {
        fill(&mut s);
    }
    insert_bounded(&mut s, "k", "v", bounded(1, 5));
    while s.contains(b"k") {
        fill(&mut s);
    }
    assert_eq!(answer(&mut s, "k", 1, 2), Err(MissKind::Capacity));
    assert!(!s.remove(b"k", 0), "only a ghost was left");
    assert_eq!(answer(&mut s, "k", 1, 2), Err(MissKind::Compulsory));
    insert_bounded(&mut s, "k", "v", bounded(1, 5));
    assert!(s.remove(b"k", 0));
    assert_eq!(answer(&mut s, "k", 1, 2), Err(MissKind::Compulsory));
}

#[test]
fn versioned_and_plain_operations_do_not_mix() {
    let mut s = store();
    s.set(b"p", b"x").expect("set");
    insert_bounded(&mut s, "v", "x", bounded(1, 2));
    assert_eq!(
        s.lookup(b"p", ts(0), ts(1), false),
        Err(StoreError::WrongType)
    );
    let request = InsertRequest {
        interval: bounded(1, 2),
        snapshot: None,
        tags: vec![],
    };
    assert_eq!(s.insert(b"p", b"", request), Err(StoreError::WrongType));
    assert_eq!(s.get(b"v", || 0), Err(StoreError::WrongType));
    s.set(b"v", b"y").expect("set overwrites a versioned key");
    assert_eq!(s.get(b"v", || 0), Ok(Some(&b"y"[..])));
    assert!(s.contains(b"p") && s.remove(b"p", 0) && !s.contains(b"p"));
    assert_eq!(s.get(b"p", || 0), Ok(None));
    let stats = s.stats();
    assert_eq!(
        (
            stats.plain_sets,
            stats.plain_hits,
            stats.plain_misses,
            stats.plain_deletes
        ),
        (2, 1, 1, 1)
    );
    s.verify_invariants().expect("invariants hold");
}

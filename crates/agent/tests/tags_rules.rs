//! Rows to invalidation tags, one test per rule of the write side (`src/tags.rs`).

use bytes::Bytes;
use txcache_agent::pgoutput::{
    ColumnValue, OldTuple, OldTupleKind, PgOutputMessage, Relation, RelationColumn, TupleData,
};
use txcache_agent::tags::{
    change_tags, changed_columns, truncate_tags, OldRows, RowChange, TagColumns,
};
use txcache_model::{ColumnSet, InvalidationTag};

/// `public.items (id, name, note)`, published with REPLICA IDENTITY FULL.
fn items() -> Relation {
    relation("public", "items", &["id", "name", "note"])
}

fn relation(schema: &str, name: &str, columns: &[&str]) -> Relation {
    let columns = columns.iter().map(|name| RelationColumn {
        name: (*name).into(),
        type_oid: 25,
        type_modifier: -1,
        flags: 1,
    });
    Relation {
        id: 1,
        schema: schema.into(),
        name: name.into(),
        replica_identity: b'f',
        columns: columns.collect(),
    }
}

/// `id` and `name` lead indexes; `note` does not.
fn tag_columns() -> TagColumns {
    TagColumns::new(["id", "name"])
}

fn t(s: &str) -> ColumnValue {
    ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row(values: Vec<ColumnValue>) -> TupleData {
    TupleData(values)
}

fn full(values: Vec<ColumnValue>) -> OldTuple {
    OldTuple {
        kind: OldTupleKind::Full,
        data: row(values),
    }
}

/// `public.items` under REPLICA IDENTITY DEFAULT with primary key `id`: rows are published
/// with only `id` flagged as the key.
fn keyed_items() -> Relation {
    let mut relation = items();
    relation.replica_identity = b'd';
    for column in &mut relation.columns {
        column.flags = u8::from(column.name == "id");
    }
    relation
}

fn key_only(values: Vec<ColumnValue>) -> OldTuple {
    OldTuple {
        kind: OldTupleKind::Key,
        data: row(values),
    }
}

/// The tags of `change`, whose relation's old rows are whole (FULL, alone in its family).
fn tags_of(relation: &Relation, columns: &TagColumns, change: RowChange<'_>) -> Vec<String> {
    tags_with(relation, columns, OldRows::Whole, change)
}

fn tags_with(
    relation: &Relation,
    columns: &TagColumns,
    old_rows: OldRows,
    change: RowChange<'_>,
) -> Vec<String> {
    let mut out = Vec::new();
    change_tags(relation, columns, old_rows, &change, &mut out).expect("a short table name");
    let columns = changed_columns(relation, old_rows, &change);
    assert!(out.iter().all(|tag| tag.columns() == columns), "{out:?}");
    // The rules of which rows are named; the columns have tests of their own below.
    out.iter()
        .map(|tag| tag.with_columns(ColumnSet::ALL).as_str().to_owned())
        .collect()
}

/// What an update of `public.items` from `old` to `new` (whole old row) changed.
fn update_changes(old: Vec<ColumnValue>, new: Vec<ColumnValue>) -> ColumnSet {
    let (old, new) = (full(old), row(new));
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    changed_columns(&items(), OldRows::Whole, &change)
}

fn set(names: &[&str]) -> ColumnSet {
    names.iter().fold(ColumnSet::VERSION, |set, name| {
        set.union(ColumnSet::column(name))
    })
}

fn tags(change: RowChange<'_>) -> Vec<String> {
    tags_of(&items(), &tag_columns(), change)
}

#[test]
fn insert_tags_new_value_of_each_tag_column() {
    let new = row(vec![t("1"), t("apple"), t("red")]);
    let tags = tags(RowChange::Insert { new: &new });
    assert_eq!(tags, ["public.items:id=1", "public.items:name=apple"]);
}

#[test]
fn update_of_indexed_column_tags_old_and_new_value() {
    let old = full(vec![t("1"), t("apple"), t("red")]);
    let new = row(vec![t("1"), t("pear"), t("red")]);
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    let expected = [
        "public.items:id=1",
        "public.items:name=apple",
        "public.items:name=pear",
    ];
    assert_eq!(tags(change), expected);
}

#[test]
fn equal_old_and_new_value_yields_one_tag() {
    let old = full(vec![t("1"), t("apple"), t("red")]);
    let new = row(vec![t("1"), t("apple"), t("green")]);
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    assert_eq!(
        tags(change),
        ["public.items:id=1", "public.items:name=apple"]
    );
}

#[test]
fn delete_tags_old_values() {
    let old = full(vec![t("7"), t("fig"), ColumnValue::Null]);
    let tags = tags(RowChange::Delete { old: &old });
    assert_eq!(tags, ["public.items:id=7", "public.items:name=fig"]);
}

#[test]
fn unchanged_toast_takes_old_value() {
    let old = full(vec![t("1"), t("long name"), t("x")]);
    let new = row(vec![t("2"), ColumnValue::UnchangedToast, t("x")]);
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    let expected = [
        "public.items:id=1",
        "public.items:id=2",
        "public.items:name=long name",
    ];
    assert_eq!(tags(change), expected);
}

#[test]
fn unchanged_toast_without_old_value_falls_back_to_wildcard() {
    let new = row(vec![t("2"), ColumnValue::UnchangedToast, t("x")]);
    let change = RowChange::Update {
        old: None,
        new: &new,
    };
    assert_eq!(tags(change), ["public.items:id=2", "public.items"]);
    let old = full(vec![t("2"), ColumnValue::UnchangedToast, t("x")]);
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    assert_eq!(tags(change), ["public.items:id=2", "public.items"]);
}

#[test]
fn null_tag_column_yields_no_fine_tag() {
    let new = row(vec![t("3"), ColumnValue::Null, t("x")]);
    assert_eq!(tags(RowChange::Insert { new: &new }), ["public.items:id=3"]);
}

#[test]
fn row_without_any_tag_yields_wildcard() {
    let new = row(vec![t("3"), t("kiwi"), t("x")]);
    let none = TagColumns::new(Vec::<String>::new());
    let tags = tags_of(&items(), &none, RowChange::Insert { new: &new });
    assert_eq!(tags, ["public.items"]);
    let all_null = row(vec![ColumnValue::Null, ColumnValue::Null, t("x")]);
    let change = RowChange::Insert { new: &all_null };
    assert_eq!(tags_of(&items(), &tag_columns(), change), ["public.items"]);
}

#[test]
fn binary_value_falls_back_to_wildcard() {
    let new = row(vec![
        t("4"),
        ColumnValue::Binary(Bytes::from_static(b"\0\x01")),
        t("x"),
    ]);
    let tags = tags(RowChange::Insert { new: &new });
    assert_eq!(tags, ["public.items:id=4", "public.items"]);
}

#[test]
fn non_utf8_text_falls_back_to_wildcard() {
    let bad = ColumnValue::Text(Bytes::from_static(b"\xff\xfe"));
    let new = row(vec![t("4"), bad, t("x")]);
    let tags = tags(RowChange::Insert { new: &new });
    assert_eq!(tags, ["public.items:id=4", "public.items"]);
}

#[test]
fn value_too_long_for_a_tag_falls_back_to_wildcard() {
    let huge = "k".repeat(InvalidationTag::MAX_LEN);
    let new = row(vec![t("5"), t(&huge), t("x")]);
    let tags = tags(RowChange::Insert { new: &new });
    assert_eq!(tags, ["public.items:id=5", "public.items"]);
}

#[test]
fn update_without_old_row_yields_wildcard_and_new_values() {
    let new = row(vec![t("6"), t("plum"), t("x")]);
    let change = RowChange::Update {
        old: None,
        new: &new,
    };
    let expected = [
        "public.items:id=6",
        "public.items:name=plum",
        "public.items",
    ];
    assert_eq!(tags(change), expected);
}

#[test]
fn key_only_old_row_leaves_non_key_tag_columns_unknown() {
    // REPLICA IDENTITY DEFAULT sends only the key; `name` reads as NULL but is not NULL.
    let old = key_only(vec![t("8"), ColumnValue::Null, ColumnValue::Null]);
    for old_rows in [OldRows::Whole, OldRows::Key, OldRows::Sent] {
        let change = RowChange::Delete { old: &old };
        let tags = tags_with(&keyed_items(), &tag_columns(), old_rows, change);
        assert_eq!(tags, ["public.items:id=8", "public.items"], "{old_rows:?}");
    }
}

#[test]
fn key_only_old_row_covering_every_tag_column_is_precise() {
    let old = key_only(vec![t("8"), ColumnValue::Null, ColumnValue::Null]);
    let id_only = TagColumns::new(["id"]);
    let change = RowChange::Delete { old: &old };
    let tags = tags_with(&keyed_items(), &id_only, OldRows::Sent, change);
    assert_eq!(tags, ["public.items:id=8"]);
}

#[test]
fn key_change_under_default_identity_tags_old_key_and_new_values() {
    // The key changed: the old key is sent, the other old values are not.
    let old = key_only(vec![t("8"), ColumnValue::Null, ColumnValue::Null]);
    let new = row(vec![t("9"), t("fig"), t("x")]);
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    let tags = tags_with(&keyed_items(), &tag_columns(), OldRows::Key, change);
    let expected = [
        "public.items:id=8",
        "public.items:id=9",
        "public.items:name=fig",
        "public.items",
    ];
    assert_eq!(tags, expected);
}

#[test]
fn update_keeping_its_key_under_default_identity_needs_the_wildcard_for_other_columns() {
    // No old row: the key is unchanged, but `name` may have been anything before.
    let new = row(vec![t("6"), t("plum"), t("x")]);
    let change = RowChange::Update {
        old: None,
        new: &new,
    };
    let tags = tags_with(&keyed_items(), &tag_columns(), OldRows::Key, change);
    let expected = [
        "public.items:id=6",
        "public.items:name=plum",
        "public.items",
    ];
    assert_eq!(tags, expected);
}

#[test]
fn update_keeping_its_key_is_precise_when_only_key_columns_are_tag_columns() {
    let new = row(vec![t("6"), t("plum"), t("x")]);
    let id_only = TagColumns::new(["id"]);
    let change = RowChange::Update {
        old: None,
        new: &new,
    };
    let tags = tags_with(&keyed_items(), &id_only, OldRows::Key, change);
    assert_eq!(tags, ["public.items:id=6"]);
}

#[test]
fn update_without_old_row_is_not_taken_as_key_unchanged_unless_the_key_is_known() {
    // A partition may have another replica identity than its root's description says.
    let new = row(vec![t("6"), t("plum"), t("x")]);
    let id_only = TagColumns::new(["id"]);
    for old_rows in [OldRows::Whole, OldRows::Sent] {
        let change = RowChange::Update {
            old: None,
            new: &new,
        };
        let tags = tags_with(&keyed_items(), &id_only, old_rows, change);
        assert_eq!(tags, ["public.items:id=6", "public.items"], "{old_rows:?}");
    }
}

#[test]
fn null_in_an_old_row_not_known_whole_is_unknown() {
    // pgoutput marks a partition's old row 'O' when its root is FULL, even when the
    // partition's own identity sent only its key: the NULL may stand for any value.
    let old = full(vec![t("7"), ColumnValue::Null, ColumnValue::Null]);
    let change = RowChange::Delete { old: &old };
    let tags = tags_with(&items(), &tag_columns(), OldRows::Sent, change);
    assert_eq!(tags, ["public.items:id=7", "public.items"]);
    let change = RowChange::Delete { old: &old };
    assert_eq!(
        tags_of(&items(), &tag_columns(), change),
        ["public.items:id=7"]
    );
}

#[test]
fn tag_column_missing_from_relation_yields_wildcard() {
    // A column list or an unpublished generated column keeps `name`'s values out of the
    // stream.
    let relation = relation("public", "items", &["id", "note"]);
    let new = row(vec![t("9"), t("x")]);
    let tags = tags_of(&relation, &tag_columns(), RowChange::Insert { new: &new });
    assert_eq!(tags, ["public.items:id=9", "public.items"]);
}

#[test]
fn row_shorter_than_relation_yields_wildcard() {
    let new = row(vec![t("9")]);
    let tags = tags(RowChange::Insert { new: &new });
    assert_eq!(tags, ["public.items:id=9", "public.items"]);
}

#[test]
fn names_with_separators_are_escaped() {
    let relation = relation("my.schema", "odd:table", &["a=b", "c"]);
    let columns = TagColumns::new(["a=b"]);
    let new = row(vec![t("v:=."), t("x")]);
    let tags = tags_of(&relation, &columns, RowChange::Insert { new: &new });
    assert_eq!(tags, ["my%2Eschema.odd%3Atable:a%3Db=v:=."]);
    assert_eq!(
        truncate_tags(&relation).expect("short").as_str(),
        "my%2Eschema.odd%3Atable"
    );
}

#[test]
fn truncate_yields_wildcard() {
    let tag = truncate_tags(&items()).expect("short");
    assert!(tag.is_wildcard());
    assert_eq!(tag.as_str(), "public.items");
}

#[test]
fn tags_of_earlier_rows_are_left_alone() {
    let new = row(vec![t("1"), t("apple"), t("x")]);
    let mut out = vec![InvalidationTag::parse("public.items:id=1").expect("a tag")];
    let change = RowChange::Insert { new: &new };
    change_tags(&items(), &tag_columns(), OldRows::Whole, &change, &mut out)
        .expect("a short table name");
    let out: Vec<_> = out.iter().map(InvalidationTag::as_str).collect();
    assert_eq!(
        out,
        [
            "public.items:id=1",
            "public.items:id=1",
            "public.items:name=apple"
        ]
    );
}

#[test]
fn table_name_too_long_for_any_tag_is_an_error() {
    let long = "t".repeat(InvalidationTag::MAX_LEN);
    let relation = relation("public", &long, &["id"]);
    let new = row(vec![t("1")]);
    let mut out = Vec::new();
    let change = RowChange::Insert { new: &new };
    assert!(change_tags(&relation, &tag_columns(), OldRows::Whole, &change, &mut out).is_err());
    assert!(out.is_empty());
    assert!(truncate_tags(&relation).is_err());
}

#[test]
fn row_changes_come_from_change_messages() {
    let new = row(vec![t("1")]);
    let insert = PgOutputMessage::Insert {
        relation_id: 3,
        new: new.clone(),
    };
    assert_eq!(
        RowChange::from_message(&insert),
        Some((3, RowChange::Insert { new: &new }))
    );
    let old = full(vec![t("1")]);
    let delete = PgOutputMessage::Delete {
        relation_id: 4,
        old: old.clone(),
    };
    assert_eq!(
        RowChange::from_message(&delete),
        Some((4, RowChange::Delete { old: &old }))
    );
    let truncate = PgOutputMessage::Truncate {
        relation_ids: vec![3],
        cascade: false,
        restart_identity: false,
    };
    assert_eq!(RowChange::from_message(&truncate), None);
}

#[test]
fn an_update_names_the_columns_whose_values_differ_and_the_row_version() {
    let changed = update_changes(
        vec![t("1"), t("apple"), t("red")],
        vec![t("1"), t("apple"), t("green")],
    );
    assert_eq!(changed, set(&["note"]));
    assert!(!changed.intersects(ColumnSet::ROWS));
    let same = update_changes(
        vec![t("1"), t("a"), ColumnValue::Null],
        vec![t("1"), t("a"), ColumnValue::Null],
    );
    assert_eq!(same, ColumnSet::VERSION);
    let from_null = update_changes(
        vec![t("1"), t("a"), ColumnValue::Null],
        vec![t("1"), t("a"), t("x")],
    );
    assert_eq!(from_null, set(&["note"]));
}

#[test]
fn the_changed_columns_are_written_into_every_tag_of_the_row() {
    let old = full(vec![t("1"), t("apple"), t("red")]);
    let new = row(vec![t("1"), t("apple"), t("green")]);
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    let mut out = Vec::new();
    change_tags(&items(), &tag_columns(), OldRows::Whole, &change, &mut out).expect("short");
    let expected = format!("public.items#{:x}:id=1", set(&["note"]).bits());
    assert_eq!(out[0].as_str(), expected);
}

#[test]
fn an_unchanged_toasted_value_is_unchanged() {
    let changed = update_changes(
        vec![t("1"), t("long"), t("red")],
        vec![t("1"), ColumnValue::UnchangedToast, t("blue")],
    );
    assert_eq!(changed, set(&["note"]));
}

#[test]
fn equal_texts_of_a_type_whose_text_may_round_count_as_changed() {
    let mut relation = items();
    relation.columns[2].type_oid = 701; // float8: extra_float_digits may round its text
    let old = full(vec![t("1"), t("a"), t("0.1")]);
    let new = row(vec![t("1"), t("a"), t("0.1")]);
    let change = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    assert_eq!(
        changed_columns(&relation, OldRows::Whole, &change),
        set(&["note"])
    );
}

#[test]
fn inserts_deletes_and_updates_without_the_whole_old_row_change_every_column() {
    let values = vec![t("1"), t("a"), t("x")];
    let (new, old, key) = (row(values.clone()), full(values.clone()), key_only(values));
    let all = |relation: &Relation, old_rows, change: RowChange<'_>| {
        changed_columns(relation, old_rows, &change) == ColumnSet::ALL
    };
    assert!(all(
        &items(),
        OldRows::Whole,
        RowChange::Insert { new: &new }
    ));
    assert!(all(
        &items(),
        OldRows::Whole,
        RowChange::Delete { old: &old }
    ));
    let no_old = RowChange::Update {
        old: None,
        new: &new,
    };
    assert!(all(&keyed_items(), OldRows::Key, no_old));
    let key_old = RowChange::Update {
        old: Some(&key),
        new: &new,
    };
    assert!(all(&keyed_items(), OldRows::Key, key_old));
    // A row marked whole but published through a root whose partitions may send keys only.
    let partition = RowChange::Update {
        old: Some(&old),
        new: &new,
    };
    assert!(all(&items(), OldRows::Sent, partition));
}

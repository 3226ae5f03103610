//! The pgoutput parser against hand-built messages: every message type, and malformed input.

mod pgoutput_encoder;

use bytes::Bytes;
use pgoutput_encoder::Buf;
use txcache_agent::pgoutput::{
    parse, Begin, ColumnValue, Commit, OldTuple, OldTupleKind, PgOutputMessage, Relation,
    RelationCache, RelationColumn, TupleData,
};

fn ok(buf: Buf) -> PgOutputMessage {
    parse(&buf.bytes()).expect("a valid message")
}

fn text(s: &str) -> ColumnValue {
    ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row(values: Vec<ColumnValue>) -> TupleData {
    TupleData(values)
}

#[test]
fn begin() {
    let msg = ok(Buf::new(b'B').u64(0x16_B374_D848).i64(-5).u32(731));
    let begin = Begin {
        final_lsn: 0x16_B374_D848,
        commit_time: -5,
        xid: 731,
    };
    assert_eq!(msg, PgOutputMessage::Begin(begin));
}

#[test]
fn commit() {
    let msg = ok(Buf::new(b'C').u8(0).u64(10).u64(20).i64(778_000_000));
    let commit = Commit {
        flags: 0,
        commit_lsn: 10,
        end_lsn: 20,
        commit_time: 778_000_000,
    };
    assert_eq!(msg, PgOutputMessage::Commit(commit));
}

#[test]
fn origin() {
    let msg = ok(Buf::new(b'O').u64(99).cstr("node_a"));
    let name = "node_a".to_owned();
    assert_eq!(
        msg,
        PgOutputMessage::Origin {
            commit_lsn: 99,
            name
        }
    );
}

#[test]
fn relation_with_columns() {
    let msg = ok(Buf::new(b'R')
        .u32(16384)
        .cstr("public")
        .cstr("items")
        .u8(b'f')
        .i16(2)
        .u8(1)
        .cstr("id")
        .u32(23)
        .i32(-1)
        .u8(0)
        .cstr("name")
        .u32(1043)
        .i32(68));
    let PgOutputMessage::Relation(rel) = msg else {
        panic!("not a relation: {msg:?}")
    };
    assert_eq!(
        (rel.id, &*rel.schema, &*rel.name),
        (16384, "public", "items")
    );
    assert_eq!(rel.replica_identity, b'f');
    let id = RelationColumn {
        name: "id".into(),
        type_oid: 23,
        type_modifier: -1,
        flags: 1,
    };
    assert_eq!(rel.columns[0], id);
    assert!(rel.columns[0].is_key() && !rel.columns[1].is_key());
    assert_eq!(
        (&*rel.columns[1].name, rel.columns[1].type_modifier),
        ("name", 68)
    );
}

#[test]
fn empty_namespace_means_pg_catalog() {
    let msg = ok(Buf::new(b'R').u32(1).cstr("").cstr("t").u8(b'd').i16(0));
    let PgOutputMessage::Relation(rel) = msg else {
        panic!("not a relation: {msg:?}")
    };
    assert_eq!(rel.schema, "pg_catalog");
    let msg = ok(Buf::new(b'Y').u32(600).cstr("").cstr("point"));
    let (id, schema, name) = (600, "pg_catalog".into(), "point".into());
    assert_eq!(msg, PgOutputMessage::Type { id, schema, name });
}

#[test]
fn insert_with_every_kind_of_value() {
    let msg = ok(Buf::new(b'I')
        .u32(7)
        .u8(b'N')
        .i16(4)
        .u8(b'n')
        .u8(b'u')
        .u8(b't')
        .len_bytes(b"42")
        .u8(b'b')
        .len_bytes(&[0, 1]));
    let new = row(vec![
        ColumnValue::Null,
        ColumnValue::UnchangedToast,
        text("42"),
        ColumnValue::Binary(Bytes::from_static(&[0, 1])),
    ]);
    let relation_id = 7;
    assert_eq!(msg, PgOutputMessage::Insert { relation_id, new });
}

#[test]
fn values_are_slices_of_the_input() {
    let input = Buf::new(b'I')
        .u32(7)
        .u8(b'N')
        .i16(1)
        .u8(b't')
        .len_bytes(b"abc")
        .bytes();
    let Ok(PgOutputMessage::Insert { new, .. }) = parse(&input) else {
        panic!("not an insert")
    };
    let ColumnValue::Text(value) = &new.0[0] else {
        panic!("not text")
    };
    let range = input.as_ptr_range();
    assert!(range.contains(&value.as_ptr()), "the value was copied");
}

#[test]
fn update_without_old_row() {
    let msg = ok(Buf::new(b'U')
        .u32(7)
        .u8(b'N')
        .i16(1)
        .u8(b't')
        .len_bytes(b"1"));
    let (relation_id, new) = (7, row(vec![text("1")]));
    let old = None;
    assert_eq!(
        msg,
        PgOutputMessage::Update {
            relation_id,
            old,
            new
        }
    );
}

#[test]
fn update_with_key_or_full_old_row() {
    for (marker, kind) in [(b'K', OldTupleKind::Key), (b'O', OldTupleKind::Full)] {
        let msg = ok(Buf::new(b'U')
            .u32(7)
            .u8(marker)
            .i16(2)
            .u8(b't')
            .len_bytes(b"1")
            .u8(b'n')
            .u8(b'N')
            .i16(2)
            .u8(b't')
            .len_bytes(b"2")
            .u8(b'u'));
        let old = Some(OldTuple {
            kind,
            data: row(vec![text("1"), ColumnValue::Null]),
        });
        let new = row(vec![text("2"), ColumnValue::UnchangedToast]);
        let relation_id = 7;
        assert_eq!(
            msg,
            PgOutputMessage::Update {
                relation_id,
                old,
                new
            }
        );
    }
}

#[test]
fn delete_with_key_or_full_old_row() {
    for (marker, kind) in [(b'K', OldTupleKind::Key), (b'O', OldTupleKind::Full)] {
        let msg = ok(Buf::new(b'D')
            .u32(9)
            .u8(marker)
            .i16(1)
            .u8(b't')
            .len_bytes(b"x"));
        let old = OldTuple {
            kind,
            data: row(vec![text("x")]),
        };
        let relation_id = 9;
        assert_eq!(msg, PgOutputMessage::Delete { relation_id, old });
    }
}

#[test]
fn truncate_with_options() {
    let msg = ok(Buf::new(b'T').i32(2).u8(3).u32(10).u32(11));
    let expected = PgOutputMessage::Truncate {
        relation_ids: vec![10, 11],
        cascade: true,
        restart_identity: true,
    };
    assert_eq!(msg, expected);
    let msg = ok(Buf::new(b'T').i32(1).u8(2).u32(10));
    assert!(matches!(
        msg,
        PgOutputMessage::Truncate {
            cascade: false,
            restart_identity: true,
            ..
        }
    ));
}

#[test]
fn logical_message() {
    let msg = ok(Buf::new(b'M')
        .u8(1)
        .u64(77)
        .cstr("txcache")
        .len_bytes(b"{\"ddl\":1}"));
    let expected = PgOutputMessage::Message {
        transactional: true,
        lsn: 77,
        prefix: "txcache".into(),
        content: Bytes::from_static(b"{\"ddl\":1}"),
    };
    assert_eq!(msg, expected);
    let msg = ok(Buf::new(b'M').u8(0).u64(77).cstr("").len_bytes(b""));
    assert!(matches!(
        msg,
        PgOutputMessage::Message {
            transactional: false,
            ..
        }
    ));
}

#[test]
fn relation_cache_keeps_the_latest_schema() {
    let mut cache = RelationCache::new();
    assert!(cache.is_empty() && cache.get(5).is_none());
    let mut rel = Relation {
        id: 5,
        schema: "s".into(),
        name: "t".into(),
        replica_identity: b'f',
        columns: vec![],
    };
    cache.apply(rel.clone());
    rel.name = "renamed".into();
    cache.apply(rel.clone());
    assert_eq!(cache.get(5), Some(&rel));
    assert_eq!(cache.len(), 1);
}

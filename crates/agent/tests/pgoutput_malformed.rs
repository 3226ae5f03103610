//! The pgoutput parser against malformed input: truncated, overlong, negative, badly marked.
//! Every case is an error naming the offset, never a panic or a huge allocation.

mod pgoutput_encoder;

use bytes::Bytes;
use pgoutput_encoder::{encode, Buf};
use txcache_agent::pgoutput::{
    parse, Begin, ColumnValue, Commit, OldTuple, OldTupleKind, PgOutputError, PgOutputErrorKind,
    PgOutputMessage, Relation, RelationColumn, TupleData,
};

fn err(buf: Buf) -> PgOutputError {
    parse(&buf.bytes()).expect_err("a malformed message")
}

fn text(s: &str) -> ColumnValue {
    ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row(values: Vec<ColumnValue>) -> TupleData {
    TupleData(values)
}

/// One valid message of every type, as the server would send it.
fn samples() -> Vec<Bytes> {
    let rel = Relation {
        id: 5,
        schema: "s".into(),
        name: "t".into(),
        replica_identity: b'f',
        columns: vec![RelationColumn {
            name: "c".into(),
            type_oid: 25,
            type_modifier: -1,
            flags: 1,
        }],
    };
    let old = OldTuple {
        kind: OldTupleKind::Full,
        data: row(vec![text("a"), ColumnValue::Null]),
    };
    let new = row(vec![text("b"), ColumnValue::UnchangedToast]);
    let messages = [
        PgOutputMessage::Begin(Begin {
            final_lsn: 1,
            commit_time: 2,
            xid: 3,
        }),
        PgOutputMessage::Commit(Commit {
            flags: 0,
            commit_lsn: 1,
            end_lsn: 2,
            commit_time: 3,
        }),
        PgOutputMessage::Origin {
            commit_lsn: 1,
            name: "o".into(),
        },
        PgOutputMessage::Relation(rel),
        PgOutputMessage::Type {
            id: 1,
            schema: "s".into(),
            name: "ty".into(),
        },
        PgOutputMessage::Insert {
            relation_id: 5,
            new: new.clone(),
        },
        PgOutputMessage::Update {
            relation_id: 5,
            old: Some(old.clone()),
            new,
        },
        PgOutputMessage::Delete {
            relation_id: 5,
            old,
        },
        PgOutputMessage::Truncate {
            relation_ids: vec![5, 6],
            cascade: true,
            restart_identity: false,
        },
        PgOutputMessage::Message {
            transactional: true,
            lsn: 9,
            prefix: "p".into(),
            content: Bytes::from_static(b"xyz"),
        },
    ];
    messages.iter().map(encode).collect()
}

#[test]
fn every_truncation_of_a_valid_message_is_an_error() {
    for message in samples() {
        assert!(parse(&message).is_ok(), "sample {message:?} must parse");
        for len in 0..message.len() {
            let error = parse(&message.slice(..len)).expect_err("a truncated message");
            assert!(error.offset <= len, "{error} lies beyond {len} bytes");
        }
    }
}

#[test]
fn trailing_bytes_are_an_error() {
    for message in samples() {
        let mut longer = message.to_vec();
        longer.push(0);
        let error = parse(&Bytes::from(longer)).expect_err("trailing byte");
        assert_eq!(error.kind, PgOutputErrorKind::TrailingBytes { left: 1 });
        assert_eq!(error.offset, message.len());
    }
}

#[test]
fn empty_and_unknown_messages() {
    assert_eq!(err(Buf::default()).kind, PgOutputErrorKind::Empty);
    let error = err(Buf::new(b'Z').u32(1));
    assert_eq!(error.kind, PgOutputErrorKind::UnknownMessageType(b'Z'));
    assert_eq!(
        error.to_string(),
        "malformed pgoutput message at byte 0: unknown message type byte 0x5a"
    );
}

#[test]
fn counts_beyond_the_input_are_refused_before_allocating() {
    let error = err(Buf::new(b'I').u32(7).u8(b'N').i16(i16::MAX).u8(b'n'));
    assert_eq!(error.offset, 6);
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::CountTooLarge {
            count: 32767,
            left: 1,
            ..
        }
    ));
    let error = err(Buf::new(b'T').i32(i32::MAX).u8(0).u32(1));
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::CountTooLarge { .. }
    ));
    let error = err(Buf::new(b'R')
        .u32(1)
        .cstr("s")
        .cstr("t")
        .u8(b'd')
        .i16(2)
        .u8(0)
        .cstr("")
        .u32(1)
        .i32(1));
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::CountTooLarge {
            count: 2,
            left: 10,
            ..
        }
    ));
}

#[test]
fn negative_lengths_and_counts_are_refused() {
    let error = err(Buf::new(b'I').u32(7).u8(b'N').i16(-1));
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::Negative { value: -1, .. }
    ));
    let error = err(Buf::new(b'T').i32(-3).u8(0));
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::Negative { value: -3, .. }
    ));
    let error = err(Buf::new(b'I').u32(7).u8(b'N').i16(1).u8(b't').i32(-1));
    assert_eq!(error.offset, 9);
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::Negative { value: -1, .. }
    ));
}

#[test]
fn value_longer_than_the_message_is_truncated() {
    let error = err(Buf::new(b'I')
        .u32(7)
        .u8(b'N')
        .i16(1)
        .u8(b't')
        .i32(1_000_000)
        .raw(b"ab"));
    let kind = PgOutputErrorKind::Truncated {
        what: "text column value",
        needed: 1_000_000,
        left: 2,
    };
    assert_eq!((error.offset, error.kind), (13, kind));
}

#[test]
fn bad_strings_are_refused() {
    let error = err(Buf::new(b'O').u64(1).raw(b"no nul"));
    assert_eq!(error.offset, 9);
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::UnterminatedString { .. }
    ));
    let error = err(Buf::new(b'O').u64(1).raw(&[0xff, 0xfe, 0]));
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::InvalidUtf8 {
            what: "origin name"
        }
    ));
}

#[test]
fn bad_markers_are_refused() {
    let error = err(Buf::new(b'I').u32(7).u8(b'X').i16(0));
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::UnexpectedByte { found: b'X', .. }
    ));
    let error = err(Buf::new(b'U').u32(7).u8(b'K').i16(0).u8(b'K').i16(0));
    assert_eq!(error.offset, 8);
    let error = err(Buf::new(b'D').u32(7).u8(b'N').i16(0));
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::UnexpectedByte { found: b'N', .. }
    ));
    let error = err(Buf::new(b'I').u32(7).u8(b'N').i16(1).u8(b'x'));
    assert_eq!(error.offset, 8);
    assert!(matches!(
        error.kind,
        PgOutputErrorKind::UnexpectedByte { found: b'x', .. }
    ));
}

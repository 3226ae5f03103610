//! Property tests of the pgoutput parser: hostile bytes never panic, and whatever the encoder
//! writes the parser reads back unchanged.

mod pgoutput_encoder;

use bytes::Bytes;
use pgoutput_encoder::encode;
use proptest::prelude::*;
use txcache_agent::pgoutput::{
    parse, ColumnValue, OldTuple, OldTupleKind, PgOutputMessage, Relation, RelationColumn,
    TupleData,
};

fn value() -> impl Strategy<Value = ColumnValue> {
    prop_oneof![
        Just(ColumnValue::Null),
        Just(ColumnValue::UnchangedToast),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(|b| ColumnValue::Text(b.into())),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(|b| ColumnValue::Binary(b.into())),
    ]
}

fn tuple() -> impl Strategy<Value = TupleData> {
    proptest::collection::vec(value(), 0..8).prop_map(TupleData)
}

fn old_tuple() -> impl Strategy<Value = OldTuple> {
    let kind = prop_oneof![Just(OldTupleKind::Key), Just(OldTupleKind::Full)];
    (kind, tuple()).prop_map(|(kind, data)| OldTuple { kind, data })
}

/// A name as PostgreSQL allows it: any characters but NUL. Never empty, since an empty
/// namespace reads back as `pg_catalog`.
fn name() -> impl Strategy<Value = String> {
    "[^\u{0}]{1,12}"
}

fn column() -> impl Strategy<Value = RelationColumn> {
    (name(), any::<u32>(), any::<i32>(), any::<u8>()).prop_map(
        |(name, type_oid, type_modifier, flags)| RelationColumn {
            name,
            type_oid,
            type_modifier,
            flags,
        },
    )
}

fn relation() -> impl Strategy<Value = Relation> {
    let columns = proptest::collection::vec(column(), 0..6);
    (any::<u32>(), name(), name(), any::<u8>(), columns).prop_map(
        |(id, schema, name, replica_identity, columns)| Relation {
            id,
            schema,
            name,
            replica_identity,
            columns,
        },
    )
}

fn change() -> impl Strategy<Value = PgOutputMessage> {
    let id = any::<u32>();
    prop_oneof![
        relation().prop_map(PgOutputMessage::Relation),
        (id, tuple()).prop_map(|(relation_id, new)| PgOutputMessage::Insert { relation_id, new }),
        (id, proptest::option::of(old_tuple()), tuple()).prop_map(|(relation_id, old, new)| {
            PgOutputMessage::Update {
                relation_id,
                old,
                new,
            }
        }),
        (id, old_tuple())
            .prop_map(|(relation_id, old)| PgOutputMessage::Delete { relation_id, old }),
        (
            proptest::collection::vec(any::<u32>(), 0..6),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(relation_ids, cascade, restart_identity)| {
                PgOutputMessage::Truncate {
                    relation_ids,
                    cascade,
                    restart_identity,
                }
            }),
    ]
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse(&Bytes::from(bytes));
    }

    /// Random bodies behind every real type byte reach deep into each decoder.
    #[test]
    fn random_bodies_never_panic(
        tag in proptest::sample::select(b"BCORYIUDTM".to_vec()),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = vec![tag];
        bytes.extend(body);
        if let Err(error) = parse(&Bytes::from(bytes.clone())) {
            prop_assert!(error.offset <= bytes.len());
        }
    }

    #[test]
    fn encoded_changes_parse_back(message in change()) {
        let bytes = encode(&message);
        prop_assert_eq!(parse(&bytes).expect("an encoded message"), message);
    }

    #[test]
    fn corrupted_changes_never_panic(message in change(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = encode(&message).to_vec();
        let at = at % bytes.len();
        bytes[at] = byte;
        let _ = parse(&Bytes::from(bytes));
    }

    #[test]
    fn truncated_changes_are_errors(message in change(), cut in any::<usize>()) {
        let bytes = encode(&message);
        let len = cut % bytes.len();
        prop_assert!(parse(&bytes.slice(..len)).is_err());
    }
}

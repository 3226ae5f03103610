//! One decoder per message type, each reading its fields in the order the protocol sends
//! them.

use bytes::Bytes;

use super::cursor::Cursor;
use super::error::{PgOutputError, PgOutputErrorKind};
use super::{
    Begin, ColumnValue, Commit, OldTuple, OldTupleKind, PgOutputMessage, Relation, RelationColumn,
    TupleData,
};

/// The smallest encoding of a relation column: flags, an empty name, type OID, modifier.
const MIN_RELATION_COLUMN_LEN: usize = 1 + 1 + 4 + 4;
/// The smallest encoding of a tuple column: its kind byte alone (`n` or `u`).
const MIN_TUPLE_COLUMN_LEN: usize = 1;
/// The namespace pgoutput leaves empty to save bytes.
const PG_CATALOG: &str = "pg_catalog";

/// Decodes a whole message, refusing bytes left after it.
pub(super) fn message(data: &Bytes) -> Result<PgOutputMessage, PgOutputError> {
    let mut cur = Cursor::new(data);
    if cur.left() == 0 {
        return Err(cur.error(PgOutputErrorKind::Empty));
    }
    let message = match cur.u8("message type")? {
        b'B' => PgOutputMessage::Begin(begin(&mut cur)?),
        b'C' => PgOutputMessage::Commit(commit(&mut cur)?),
        b'O' => origin(&mut cur)?,
        b'R' => PgOutputMessage::Relation(relation(&mut cur)?),
        b'Y' => type_message(&mut cur)?,
        b'I' => insert(&mut cur)?,
        b'U' => update(&mut cur)?,
        b'D' => delete(&mut cur)?,
        b'T' => truncate(&mut cur)?,
        b'M' => logical_message(&mut cur)?,
        other => return Err(cur.error_at(0, PgOutputErrorKind::UnknownMessageType(other))),
    };
    cur.finish()?;
    Ok(message)
}

fn begin(cur: &mut Cursor<'_>) -> Result<Begin, PgOutputError> {
    Ok(Begin {
        final_lsn: cur.u64("final LSN")?,
        commit_time: cur.i64("commit timestamp")?,
        xid: cur.u32("xid")?,
    })
}

fn commit(cur: &mut Cursor<'_>) -> Result<Commit, PgOutputError> {
    Ok(Commit {
        flags: cur.u8("commit flags")?,
        commit_lsn: cur.u64("commit LSN")?,
        end_lsn: cur.u64("end LSN")?,
        commit_time: cur.i64("commit timestamp")?,
    })
}

fn origin(cur: &mut Cursor<'_>) -> Result<PgOutputMessage, PgOutputError> {
    Ok(PgOutputMessage::Origin {
        commit_lsn: cur.u64("origin commit LSN")?,
        name: cur.cstring("origin name")?,
    })
}

/// A namespace, where the server writes `pg_catalog` as the empty string.
fn namespace(cur: &mut Cursor<'_>, what: &'static str) -> Result<String, PgOutputError> {
    let schema = cur.cstring(what)?;
    Ok(if schema.is_empty() {
        PG_CATALOG.to_owned()
    } else {
        schema
    })
}

fn relation(cur: &mut Cursor<'_>) -> Result<Relation, PgOutputError> {
    let id = cur.u32("relation OID")?;
    let schema = namespace(cur, "relation namespace")?;
    let name = cur.cstring("relation name")?;
    let replica_identity = cur.u8("replica identity")?;
    let at = cur.offset();
    let count = cur.i16("relation column count")?;
    let count = cur.check_count(
        at,
        "relation column count",
        count.into(),
        MIN_RELATION_COLUMN_LEN,
    )?;
    let mut columns = Vec::with_capacity(count);
    for _ in 0..count {
        columns.push(relation_column(cur)?);
    }
    Ok(Relation {
        id,
        schema,
        name,
        replica_identity,
        columns,
    })
}

fn relation_column(cur: &mut Cursor<'_>) -> Result<RelationColumn, PgOutputError> {
    Ok(RelationColumn {
        flags: cur.u8("column flags")?,
        name: cur.cstring("column name")?,
        type_oid: cur.u32("column type OID")?,
        type_modifier: cur.i32("column type modifier")?,
    })
}

fn type_message(cur: &mut Cursor<'_>) -> Result<PgOutputMessage, PgOutputError> {
    Ok(PgOutputMessage::Type {
        id: cur.u32("type OID")?,
        schema: namespace(cur, "type namespace")?,
        name: cur.cstring("type name")?,
    })
}

fn insert(cur: &mut Cursor<'_>) -> Result<PgOutputMessage, PgOutputError> {
    let relation_id = cur.u32("relation OID")?;
    expect_byte(cur, b'N', "'N' before the new tuple")?;
    let new = tuple(cur)?;
    Ok(PgOutputMessage::Insert { relation_id, new })
}

fn update(cur: &mut Cursor<'_>) -> Result<PgOutputMessage, PgOutputError> {
    let relation_id = cur.u32("relation OID")?;
    let at = cur.offset();
    let old = match cur.u8("'K', 'O' or 'N'")? {
        b'N' => None,
        marker => {
            let kind = old_kind(cur, at, marker, "'K', 'O' or 'N'")?;
            let old = OldTuple {
                kind,
                data: tuple(cur)?,
            };
            expect_byte(cur, b'N', "'N' before the new tuple")?;
            Some(old)
        }
    };
    let new = tuple(cur)?;
    Ok(PgOutputMessage::Update {
        relation_id,
        old,
        new,
    })
}

fn delete(cur: &mut Cursor<'_>) -> Result<PgOutputMessage, PgOutputError> {
    let relation_id = cur.u32("relation OID")?;
    let at = cur.offset();
    let marker = cur.u8("'K' or 'O'")?;
    let kind = old_kind(cur, at, marker, "'K' or 'O'")?;
    let old = OldTuple {
        kind,
        data: tuple(cur)?,
    };
    Ok(PgOutputMessage::Delete { relation_id, old })
}

/// The kind of old tuple a `K` or `O` marker (read at `at`) announces.
fn old_kind(
    cur: &Cursor<'_>,
    at: usize,
    marker: u8,
    what: &'static str,
) -> Result<OldTupleKind, PgOutputError> {
    match marker {
        b'K' => Ok(OldTupleKind::Key),
        b'O' => Ok(OldTupleKind::Full),
        found => Err(cur.error_at(at, PgOutputErrorKind::UnexpectedByte { what, found })),
    }
}

fn truncate(cur: &mut Cursor<'_>) -> Result<PgOutputMessage, PgOutputError> {
    let at = cur.offset();
    let count = cur.i32("relation count")?;
    let options = cur.u8("truncate options")?;
    let count = cur.check_count(at, "relation count", count.into(), 4)?;
    let mut relation_ids = Vec::with_capacity(count);
    for _ in 0..count {
        relation_ids.push(cur.u32("relation OID")?);
    }
    Ok(PgOutputMessage::Truncate {
        relation_ids,
        cascade: options & 1 != 0,
        restart_identity: options & 2 != 0,
    })
}

fn logical_message(cur: &mut Cursor<'_>) -> Result<PgOutputMessage, PgOutputError> {
    let flags = cur.u8("message flags")?;
    Ok(PgOutputMessage::Message {
        transactional: flags & 1 != 0,
        lsn: cur.u64("message LSN")?,
        prefix: cur.cstring("message prefix")?,
        content: cur.len_prefixed("message content")?,
    })
}

/// A `TupleData`: a column count, then each column's kind and value.
fn tuple(cur: &mut Cursor<'_>) -> Result<TupleData, PgOutputError> {
    let at = cur.offset();
    let count = cur.i16("tuple column count")?;
    let count = cur.check_count(at, "tuple column count", count.into(), MIN_TUPLE_COLUMN_LEN)?;
    let mut values = Vec::with_capacity(count);
    for _ in 0..count {
        values.push(column_value(cur)?);
    }
    Ok(TupleData(values))
}

fn column_value(cur: &mut Cursor<'_>) -> Result<ColumnValue, PgOutputError> {
    let at = cur.offset();
    match cur.u8("column kind")? {
        b'n' => Ok(ColumnValue::Null),
        b'u' => Ok(ColumnValue::UnchangedToast),
        b't' => Ok(ColumnValue::Text(cur.len_prefixed("text column value")?)),
        b'b' => Ok(ColumnValue::Binary(
            cur.len_prefixed("binary column value")?,
        )),
        found => Err(cur.error_at(
            at,
            PgOutputErrorKind::UnexpectedByte {
                what: "column kind 'n', 'u', 't' or 'b'",
                found,
            },
        )),
    }
}

/// Reads one byte that must be `expected`.
fn expect_byte(
    cur: &mut Cursor<'_>,
    expected: u8,
    what: &'static str,
) -> Result<(), PgOutputError> {
    let at = cur.offset();
    match cur.u8(what)? {
        found if found == expected => Ok(()),
        found => Err(cur.error_at(at, PgOutputErrorKind::UnexpectedByte { what, found })),
    }
}

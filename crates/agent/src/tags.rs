//! Rows to invalidation tags: the write side (the library's read side is docs/sql-tags.md).
//!
//! Each changed row yields, for every tag column of its table (a column that leads some
//! index, the primary key included), a fine tag `schema.table:column=value` for its old value
//! and one for its new value. Wherever a value cannot be named exactly — not sent, binary,
//! not UTF-8, too long for a tag — the table's wildcard stands in for it: coarser is only
//! slower, while a missed tag would serve stale data. Every row change yields at least one
//! tag.
//!
//! How much of an old row is known depends on the replica identity ([`OldRows`]): under
//! REPLICA IDENTITY FULL the whole old row is sent; under DEFAULT or USING INDEX only the
//! key, and only when the key changed (an update that kept its key sends no old row); under
//! NOTHING never. A value not sent is unknown, never NULL.
//!
//! Every tag of a row change also names the columns it changed ([`changed_columns`]): an
//! update whose whole old row is known names the columns whose values differ (and the row's
//! version), anything else every column. A cached result that read none of them stays valid.

use std::collections::HashSet;

use bytes::Bytes;
use txcache_model::{ColumnSet, InvalidationTag, TagError};

use crate::pgoutput::{
    ColumnValue, OldTuple, OldTupleKind, PgOutputMessage, Relation, RelationColumn, TupleData,
};

/// Which columns of a table are tag columns (columns that lead some index, primary key
/// included), by column name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagColumns {
    names: HashSet<String>,
}

impl TagColumns {
    /// The tag columns named in `names`.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            names: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether `name` is a tag column.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// How many tag columns there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the table has no tag column.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether some tag column is not among `relation`'s published columns (a column list
    /// leaves it out, or it is a generated column the publication does not publish: any
    /// before PostgreSQL 18, a stored one without `publish_generated_columns = stored`): its
    /// values never reach us.
    fn any_missing_from(&self, relation: &Relation) -> bool {
        self.names
            .iter()
            .any(|name| !relation.columns.iter().any(|column| &column.name == name))
    }
}

/// What the old rows the stream sends of one relation say exactly. The assembler decides it
/// per relation, from its description and its partitions' (`assemble.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldRows {
    /// Whole rows (REPLICA IDENTITY FULL, the relation's partitions included): a NULL in an
    /// old row marked whole is a NULL.
    Whole,
    /// The replica identity key (DEFAULT or USING INDEX, the relation alone in its family):
    /// what an old row sends as text is exact, and an update sent without an old row left
    /// every key column (the columns its description flags) as it was.
    Key,
    /// Only what an old row sends as text is known.
    Sent,
}

/// One row change, borrowed from a decoded message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowChange<'a> {
    /// A row was inserted.
    Insert {
        /// The new row.
        new: &'a TupleData,
    },
    /// A row was updated.
    Update {
        /// The old row, if the server sent it (whole under REPLICA IDENTITY FULL).
        old: Option<&'a OldTuple>,
        /// The new row.
        new: &'a TupleData,
    },
    /// A row was deleted.
    Delete {
        /// The old row, whole or only its key.
        old: &'a OldTuple,
    },
}

impl<'a> RowChange<'a> {
    /// The relation OID and row change of an Insert, Update or Delete message; `None` for the
    /// other messages.
    pub fn from_message(message: &'a PgOutputMessage) -> Option<(u32, Self)> {
        match message {
            PgOutputMessage::Insert { relation_id, new } => {
                Some((*relation_id, RowChange::Insert { new }))
            }
            PgOutputMessage::Update {
                relation_id,
                old,
                new,
            } => Some((
                *relation_id,
                RowChange::Update {
                    old: old.as_ref(),
                    new,
                },
            )),
            PgOutputMessage::Delete { relation_id, old } => {
                Some((*relation_id, RowChange::Delete { old }))
            }
            _ => None,
        }
    }

    /// The old row (if any was sent) and the new row (if the change has one).
    fn rows(&self) -> (Option<&'a OldTuple>, Option<&'a TupleData>) {
        match *self {
            RowChange::Insert { new } => (None, Some(new)),
            RowChange::Update { old, new } => (old, Some(new)),
            RowChange::Delete { old } => (Some(old), None),
        }
    }
}

/// Appends to `out` the tags of one row change of `relation`, whose old rows say what
/// `old_rows` says: a fine tag for each old and new value of a tag column, the table's
/// wildcard where a value cannot be named, and the wildcard alone when the change yields no
/// other tag. No tag is appended twice for one row.
///
/// Fails only when even the wildcard cannot be written: the escaped `schema.table` is longer
/// than [`InvalidationTag::MAX_LEN`]. Then nothing is appended and the caller cannot
/// invalidate soundly.
pub fn change_tags(
    relation: &Relation,
    tag_columns: &TagColumns,
    old_rows: OldRows,
    change: &RowChange<'_>,
    out: &mut Vec<InvalidationTag>,
) -> Result<(), TagError> {
    let wildcard = truncate_tags(relation)?;
    let (old, new) = change.rows();
    // A tag column that is not published has no values here at all.
    let needs_wildcard = old_values_unknown(relation, tag_columns, old_rows, change)
        || tag_columns.any_missing_from(relation);
    let start = out.len();
    let mut row = RowTags {
        relation,
        out,
        start,
        needs_wildcard,
    };
    let tagged = relation.columns.iter().enumerate();
    for (index, column) in tagged.filter(|(_, column)| tag_columns.contains(&column.name)) {
        if let Some(old) = old {
            row.add(column, old_value(old, old_rows, index));
        }
        if let Some(new) = new {
            row.add(column, new_value(new, old, old_rows, index));
        }
    }
    row.finish(wildcard);
    let columns = changed_columns(relation, old_rows, change);
    for tag in &mut out[start..] {
        *tag = tag.with_columns(columns);
    }
    Ok(())
}

/// The columns a row change may have changed: for an update whose whole old row is known,
/// the row's version and each column whose value is not provably the same (the same text
/// output of a type whose text output tells every value apart, or an unchanged TOASTed
/// value); for anything else — inserts, deletes, updates without their whole old row —
/// every column, row existence included.
pub fn changed_columns(
    relation: &Relation,
    old_rows: OldRows,
    change: &RowChange<'_>,
) -> ColumnSet {
    let RowChange::Update {
        old: Some(old),
        new,
    } = *change
    else {
        return ColumnSet::ALL;
    };
    if old.kind != OldTupleKind::Full || old_rows != OldRows::Whole {
        return ColumnSet::ALL;
    }
    let mut changed = ColumnSet::VERSION;
    for (index, column) in relation.columns.iter().enumerate() {
        let same = match (old.data.0.get(index), new.0.get(index)) {
            (Some(_), Some(ColumnValue::UnchangedToast)) => true,
            (Some(ColumnValue::Null), Some(ColumnValue::Null)) => true,
            (Some(ColumnValue::Text(before)), Some(ColumnValue::Text(after))) => {
                before == after && distinct_texts(column.type_oid)
            }
            _ => false,
        };
        if !same {
            changed = changed.union(ColumnSet::column(&column.name));
        }
    }
    changed
}

/// Whether the type's text output differs for any two values that differ, whatever the
/// session's settings (so equal texts mean an unchanged value): built-in types only, and not
/// `float4`/`float8` (`extra_float_digits` may round) or zoned times (`TimeZone`).
fn distinct_texts(type_oid: u32) -> bool {
    const BOOL: u32 = 16;
    const BYTEA: u32 = 17;
    const CHAR: u32 = 18;
    const NAME: u32 = 19;
    const INT8: u32 = 20;
    const INT2: u32 = 21;
    const INT4: u32 = 23;
    const TEXT: u32 = 25;
    const OID: u32 = 26;
    const JSON: u32 = 114;
    const BPCHAR: u32 = 1042;
    const VARCHAR: u32 = 1043;
    const DATE: u32 = 1082;
    const TIME: u32 = 1083;
    const TIMESTAMP: u32 = 1114;
    const NUMERIC: u32 = 1700;
    const UUID: u32 = 2950;
    const JSONB: u32 = 3802;
    matches!(
        type_oid,
        BOOL | BYTEA
            | CHAR
            | NAME
            | INT8
            | INT2
            | INT4
            | TEXT
            | OID
            | JSON
            | BPCHAR
            | VARCHAR
            | DATE
            | TIME
            | TIMESTAMP
            | NUMERIC
            | UUID
            | JSONB
    )
}

/// Whether an update came without its old row while some tag column's old value is not
/// its new one for certain. Only a key column of a relation whose old rows are its key is
/// known unchanged then (the server sends the old key whenever the key changed).
fn old_values_unknown(
    relation: &Relation,
    tag_columns: &TagColumns,
    old_rows: OldRows,
    change: &RowChange<'_>,
) -> bool {
    if !matches!(change, RowChange::Update { old: None, .. }) {
        return false;
    }
    let unkeyed = |column: &RelationColumn| tag_columns.contains(&column.name) && !column.is_key();
    old_rows != OldRows::Key || relation.columns.iter().any(unkeyed)
}

/// The tag of a TRUNCATE of `relation`: its wildcard. Fails only when the escaped
/// `schema.table` is longer than [`InvalidationTag::MAX_LEN`].
pub fn truncate_tags(relation: &Relation) -> Result<InvalidationTag, TagError> {
    InvalidationTag::for_table(&relation.schema, &relation.name)
}

/// What is known of one column value.
enum Value<'a> {
    /// The value's text output.
    Text(&'a Bytes),
    /// SQL NULL, which no equality matches: no fine tag.
    Null,
    /// Not sent, or not nameable: only the wildcard covers it.
    Unknown,
}

/// The value of column `index` in an old row. A NULL is a NULL only in a row known whole: in
/// a key-only row it is a column the server did not send, and a row marked whole ('O') is
/// marked so by the identity of the table it is published as (a partition root), while it
/// was logged under its partition's own, which may send only the key.
fn old_value(old: &OldTuple, old_rows: OldRows, index: usize) -> Value<'_> {
    let whole = old.kind == OldTupleKind::Full && old_rows == OldRows::Whole;
    match old.data.0.get(index) {
        Some(ColumnValue::Text(text)) => Value::Text(text),
        Some(ColumnValue::Null) if whole => Value::Null,
        _ => Value::Unknown,
    }
}

/// The value of column `index` in a new row; an unchanged TOASTed value is the old row's.
fn new_value<'a>(
    new: &'a TupleData,
    old: Option<&'a OldTuple>,
    old_rows: OldRows,
    index: usize,
) -> Value<'a> {
    match new.0.get(index) {
        Some(ColumnValue::Text(text)) => Value::Text(text),
        Some(ColumnValue::Null) => Value::Null,
        Some(ColumnValue::UnchangedToast) => match old.map(|old| old_value(old, old_rows, index)) {
            Some(Value::Text(text)) => Value::Text(text),
            // A TOASTed value is never NULL, so an old NULL contradicts it: trust neither.
            _ => Value::Unknown,
        },
        _ => Value::Unknown,
    }
}

/// The tags of one row so far.
struct RowTags<'r> {
    relation: &'r Relation,
    out: &'r mut Vec<InvalidationTag>,
    /// Where this row's tags start in `out`: earlier ones belong to other rows.
    start: usize,
    needs_wildcard: bool,
}

impl RowTags<'_> {
    /// Adds the tag of `column` having `value`, or marks the row for the wildcard.
    fn add(&mut self, column: &RelationColumn, value: Value<'_>) {
        let text = match value {
            Value::Null => return,
            Value::Text(bytes) => std::str::from_utf8(bytes).ok(),
            Value::Unknown => None,
        };
        let tag = text.and_then(|text| {
            let (schema, table) = (&self.relation.schema, &self.relation.name);
            InvalidationTag::for_row_value(schema, table, &column.name, text).ok()
        });
        match tag {
            Some(tag) => self.push(tag),
            None => self.needs_wildcard = true,
        }
    }

    fn push(&mut self, tag: InvalidationTag) {
        if !self.out[self.start..].contains(&tag) {
            self.out.push(tag);
        }
    }

    /// Adds the wildcard if some value was not nameable or the row yielded no tag at all.
    fn finish(mut self, wildcard: InvalidationTag) {
        if self.needs_wildcard || self.out.len() == self.start {
            self.push(wildcard);
        }
    }
}

//! A parser of PostgreSQL's `pgoutput` logical-replication messages, protocol version 1.
//!
//! Pure: it takes the payload of one `XLogData` message and returns a [`PgOutputMessage`]; it
//! does no I/O and keeps no state. The replication client already decodes BEGIN, COMMIT and
//! logical MESSAGE itself; the others arrive as raw bytes and come here. The stream sends a
//! [`Relation`] before the first change of each relation and again after its schema changes;
//! [`RelationCache`] keeps the latest one per relation so that changes can be read by column.
//!
//! The input comes from the network, so it is treated as hostile: every length and count is
//! checked against the bytes that remain before anything is allocated for it, nothing panics,
//! and a [`PgOutputError`] names the malformed field and its byte offset. Column values are
//! zero-copy slices of the input.
//!
//! Message layouts follow "Logical Replication Message Formats" in the PostgreSQL manual
//! (version 1, no in-progress streaming).

mod cursor;
mod decode;
mod error;

use std::collections::HashMap;

use bytes::Bytes;

pub use error::{PgOutputError, PgOutputErrorKind};

/// One decoded pgoutput message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgOutputMessage {
    /// `B`: a transaction starts.
    Begin(Begin),
    /// `C`: the transaction commits.
    Commit(Commit),
    /// `O`: the transaction was replicated from another node.
    Origin {
        /// Commit LSN of the transaction on the origin server.
        commit_lsn: u64,
        /// Name of the origin.
        name: String,
    },
    /// `R`: the schema of a relation, sent before its first change and after a schema change.
    Relation(Relation),
    /// `Y`: a data type used by a following relation.
    Type {
        /// Type OID.
        id: u32,
        /// Namespace; `pg_catalog` when the server sent an empty one.
        schema: String,
        /// Type name.
        name: String,
    },
    /// `I`: a row was inserted.
    Insert {
        /// OID of the relation, as in its [`Relation`] message.
        relation_id: u32,
        /// The new row.
        new: TupleData,
    },
    /// `U`: a row was updated.
    Update {
        /// OID of the relation, as in its [`Relation`] message.
        relation_id: u32,
        /// The old row: whole under REPLICA IDENTITY FULL, only its key when the key changed
        /// under DEFAULT or INDEX, absent otherwise.
        old: Option<OldTuple>,
        /// The new row.
        new: TupleData,
    },
    /// `D`: a row was deleted.
    Delete {
        /// OID of the relation, as in its [`Relation`] message.
        relation_id: u32,
        /// The old row, whole or only its key.
        old: OldTuple,
    },
    /// `T`: relations were truncated.
    Truncate {
        /// OIDs of the truncated relations.
        relation_ids: Vec<u32>,
        /// `TRUNCATE ... CASCADE`.
        cascade: bool,
        /// `TRUNCATE ... RESTART IDENTITY`.
        restart_identity: bool,
    },
    /// `M`: a logical message from `pg_logical_emit_message`.
    Message {
        /// Whether it belongs to a transaction (else it was emitted immediately).
        transactional: bool,
        /// LSN of the message.
        lsn: u64,
        /// The prefix it was emitted with.
        prefix: String,
        /// Its content, as emitted.
        content: Bytes,
    },
}

/// A `B` message: a transaction starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Begin {
    /// LSN of the transaction's commit record.
    pub final_lsn: u64,
    /// Commit time, microseconds since 2000-01-01 00:00 UTC.
    pub commit_time: i64,
    /// Transaction id.
    pub xid: u32,
}

/// A `C` message: the transaction commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Flags; unused by PostgreSQL so far.
    pub flags: u8,
    /// LSN of the commit record.
    pub commit_lsn: u64,
    /// End LSN of the transaction: what to acknowledge once it is delivered.
    pub end_lsn: u64,
    /// Commit time, microseconds since 2000-01-01 00:00 UTC.
    pub commit_time: i64,
}

/// An `R` message: the published columns of a relation, in the order rows list them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relation {
    /// Relation OID.
    pub id: u32,
    /// Namespace; `pg_catalog` when the server sent an empty one.
    pub schema: String,
    /// Relation name.
    pub name: String,
    /// REPLICA IDENTITY setting: `d` default, `n` nothing, `f` full, `i` index.
    pub replica_identity: u8,
    /// The published columns, in row order.
    pub columns: Vec<RelationColumn>,
}

/// One column of a [`Relation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationColumn {
    /// Column name.
    pub name: String,
    /// OID of its type.
    pub type_oid: u32,
    /// Type modifier (`atttypmod`).
    pub type_modifier: i32,
    /// Flags; bit 1 marks the column as part of the replica identity key.
    pub flags: u8,
}

impl RelationColumn {
    /// Whether the column is part of the replica identity key. Under REPLICA IDENTITY FULL
    /// every column is, so this is not the primary key.
    pub fn is_key(&self) -> bool {
        self.flags & 1 != 0
    }
}

/// The values of one row, in the order of the relation's columns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TupleData(pub Vec<ColumnValue>);

/// One column value of a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnValue {
    /// `n`: SQL NULL — or, in a key-only old row, a non-key column that was not sent.
    Null,
    /// `u`: a TOASTed value the change left unchanged, so the server did not send it.
    UnchangedToast,
    /// `t`: the value in the type's text output format.
    Text(Bytes),
    /// `b`: the value in the type's binary format.
    Binary(Bytes),
}

/// The old row of an update or delete, and how much of it the server sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OldTuple {
    /// Whether the row is whole or only its key.
    pub kind: OldTupleKind,
    /// The values; under [`OldTupleKind::Key`] non-key columns are sent as NULL.
    pub data: TupleData,
}

/// How much of an old row the server sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldTupleKind {
    /// `K`: only the replica identity key; other columns read as NULL but are unknown.
    Key,
    /// `O`: the whole row (REPLICA IDENTITY FULL).
    Full,
}

/// Parses one pgoutput message: the payload of one `XLogData` message.
pub fn parse(data: &Bytes) -> Result<PgOutputMessage, PgOutputError> {
    decode::message(data)
}

/// The latest [`Relation`] of each relation OID seen in the stream.
#[derive(Clone, Debug, Default)]
pub struct RelationCache {
    relations: HashMap<u32, Relation>,
}

impl RelationCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `relation`, replacing what was known of the same OID: a later Relation message
    /// means the schema changed.
    pub fn apply(&mut self, relation: Relation) {
        self.relations.insert(relation.id, relation);
    }

    /// The latest schema of relation `id`, if a Relation message for it has been seen.
    pub fn get(&self, id: u32) -> Option<&Relation> {
        self.relations.get(&id)
    }

    /// How many relations are known.
    pub fn len(&self) -> usize {
        self.relations.len()
    }

    /// Whether no relation is known.
    pub fn is_empty(&self) -> bool {
        self.relations.is_empty()
    }
}

//! A test-only pgoutput encoder: writes messages byte by byte as the PostgreSQL manual lays
//! them out, so that tests can state exact inputs and round-trip the parser.
#![allow(dead_code)] // each test crate uses a different part

use txcache_agent::pgoutput::{
    ColumnValue, OldTuple, OldTupleKind, PgOutputMessage, Relation, TupleData,
};

/// A message under construction.
#[derive(Default)]
pub struct Buf(pub Vec<u8>);

impl Buf {
    pub fn new(message_type: u8) -> Self {
        Buf(vec![message_type])
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }
    /// A NUL-terminated string.
    pub fn cstr(self, s: &str) -> Self {
        self.raw(s.as_bytes()).u8(0)
    }
    /// An `Int32` length and the bytes.
    pub fn len_bytes(self, bytes: &[u8]) -> Self {
        self.i32(bytes.len() as i32).raw(bytes)
    }
    pub fn tuple(self, tuple: &TupleData) -> Self {
        let buf = self.i16(tuple.0.len() as i16);
        tuple.0.iter().fold(buf, |buf, value| match value {
            ColumnValue::Null => buf.u8(b'n'),
            ColumnValue::UnchangedToast => buf.u8(b'u'),
            ColumnValue::Text(b) => buf.u8(b't').len_bytes(b),
            ColumnValue::Binary(b) => buf.u8(b'b').len_bytes(b),
        })
    }
    pub fn old_tuple(self, old: &OldTuple) -> Self {
        let marker = match old.kind {
            OldTupleKind::Key => b'K',
            OldTupleKind::Full => b'O',
        };
        self.u8(marker).tuple(&old.data)
    }
    pub fn bytes(self) -> bytes::Bytes {
        bytes::Bytes::from(self.0)
    }
}

fn relation(r: &Relation) -> Buf {
    let buf = Buf::new(b'R')
        .u32(r.id)
        .cstr(&r.schema)
        .cstr(&r.name)
        .u8(r.replica_identity)
        .i16(r.columns.len() as i16);
    r.columns.iter().fold(buf, |buf, c| {
        buf.u8(c.flags)
            .cstr(&c.name)
            .u32(c.type_oid)
            .i32(c.type_modifier)
    })
}

fn truncate(relation_ids: &[u32], cascade: bool, restart_identity: bool) -> Buf {
    let options = u8::from(cascade) | (u8::from(restart_identity) << 1);
    let buf = Buf::new(b'T').i32(relation_ids.len() as i32).u8(options);
    relation_ids.iter().fold(buf, |buf, &id| buf.u32(id))
}

/// Encodes any message the way the server would.
pub fn encode(message: &PgOutputMessage) -> bytes::Bytes {
    use PgOutputMessage as M;
    let buf = match message {
        M::Begin(b) => Buf::new(b'B')
            .u64(b.final_lsn)
            .i64(b.commit_time)
            .u32(b.xid),
        M::Commit(c) => Buf::new(b'C')
            .u8(c.flags)
            .u64(c.commit_lsn)
            .u64(c.end_lsn)
            .i64(c.commit_time),
        M::Origin { commit_lsn, name } => Buf::new(b'O').u64(*commit_lsn).cstr(name),
        M::Relation(r) => relation(r),
        M::Type { id, schema, name } => Buf::new(b'Y').u32(*id).cstr(schema).cstr(name),
        M::Insert { relation_id, new } => Buf::new(b'I').u32(*relation_id).u8(b'N').tuple(new),
        M::Update {
            relation_id,
            old,
            new,
        } => {
            let buf = Buf::new(b'U').u32(*relation_id);
            let buf = match old {
                Some(old) => buf.old_tuple(old),
                None => buf,
            };
            buf.u8(b'N').tuple(new)
        }
        M::Delete { relation_id, old } => Buf::new(b'D').u32(*relation_id).old_tuple(old),
        M::Truncate {
            relation_ids,
            cascade,
            restart_identity,
        } => truncate(relation_ids, *cascade, *restart_identity),
        M::Message {
            transactional,
            lsn,
            prefix,
            content,
        } => Buf::new(b'M')
            .u8(u8::from(*transactional))
            .u64(*lsn)
            .cstr(prefix)
            .len_bytes(content),
    };
    buf.bytes()
}

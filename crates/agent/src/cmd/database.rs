//! `DATABASE`: the database the stream decodes, as read when the agent started.

use super::{Active, Args, CommandError};
use bytes::BytesMut;
use txcache_resp::encode;

/// `DATABASE` takes no arguments.
#[derive(Debug)]
pub struct Database;

impl Database {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `*3 $system_identifier :oid $name`.
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        let database = &active.database;
        encode::array_header(out, 3);
        encode::bulk(out, database.system_identifier.as_bytes());
        encode::integer(out, i64::from(database.oid));
        encode::bulk(out, database.name.as_bytes());
        Ok(())
    }
}

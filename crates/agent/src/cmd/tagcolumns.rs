//! `TAGCOLUMNS`: the versions of the tag-column catalog, oldest first.

use super::{reply, Active, Args, CommandError};
use crate::tracker::CatalogVersion;
use bytes::BytesMut;
use txcache_resp::encode;

/// `TAGCOLUMNS` takes no arguments.
#[derive(Debug)]
pub struct TagColumns;

impl TagColumns {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `*n` versions, each `*2 :since *tables`, each table `*2 $schema.table *columns`.
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        let versions = active.tracker.catalogs();
        encode::array_header(out, versions.len());
        versions
            .iter()
            .for_each(|version| encode_version(out, version));
        Ok(())
    }
}

fn encode_version(out: &mut BytesMut, version: &CatalogVersion) {
    encode::array_header(out, 2);
    reply::position(out, version.since.0);
    encode::array_header(out, version.tables.len());
    for (table, columns) in version.tables.iter() {
        encode::array_header(out, 2);
        encode::bulk(out, table.as_bytes());
        encode::array_header(out, columns.len());
        columns
            .iter()
            .for_each(|column| encode::bulk(out, column.as_bytes()));
    }
}

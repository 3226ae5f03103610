//! Which database the agent follows: the one its `--dsn` names, in the cluster it runs on.
//!
//! A replication slot decodes one database, so only that database's cached results are ever
//! invalidated. Libraries compare their own database with this (`DATABASE`) and do not cache
//! when they differ: another database on the same server (a test database beside the
//! development one) would otherwise read values nothing invalidates.

use crate::connect::SqlSession;
use anyhow::Context as _;

/// The cluster and the database, as PostgreSQL names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseIdentity {
    /// `pg_control_system().system_identifier`: another cluster (a restored dump, another
    /// server) has another.
    pub system_identifier: String,
    /// The database's oid in `pg_database`.
    pub oid: u32,
    /// The database's name, for messages.
    pub name: String,
}

/// The identity of the database `sql` is connected to.
pub async fn identity(sql: &SqlSession) -> anyhow::Result<DatabaseIdentity> {
    let row = sql
        .client
        .query_one(
            "SELECT s.system_identifier::text, d.oid::int8, d.datname::text \
             FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d \
             WHERE d.datname = pg_catalog.current_database()",
            &[],
        )
        .await
        .context("cannot read the database's identity (pg_control_system())")?;
    let oid: i64 = row.get(1);
    Ok(DatabaseIdentity {
        system_identifier: row.get(0),
        oid: u32::try_from(oid).context("a database oid out of range")?,
        name: row.get(2),
    })
}

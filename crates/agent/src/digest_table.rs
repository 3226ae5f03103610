//! A digest the agent records in the database, and the `all` notice written with it.
//!
//! Three checks compare something no event trigger reports with its last reading: roles and
//! settings (`shared_catalog`), the schema against the DDL triggers' digests
//! (`schema_watch`), and, without the triggers, every pin's catalog fingerprint
//! (`fingerprint_check`; the last two share [`SCHEMA_CHECK`]). Each records its last reading
//! in a table of one row that `txcache setup` creates (so that a change made while the agent
//! was down is seen when it starts), and on a change writes an `all` line as a transactional
//! `txcache-ddl` message, in the transaction that records the new digest: the stream then
//! invalidates every cached result at that commit, records it as the barrier and publishes a
//! new catalog version.

use crate::connect::SqlSession;
use tokio_postgres::error::SqlState;

/// The prefix of DDL notices: written by `txcache setup`'s event trigger, and by the agent
/// for a change no trigger reported ([`DigestTable::announce`]); the stream decodes them.
pub const DDL_PREFIX: &str = "txcache-ddl";

/// Where the schema digest (or, without DDL triggers, the catalog fingerprint) last checked
/// is recorded.
pub const SCHEMA_CHECK: DigestTable = DigestTable {
    name: "schema_check",
    unseen: "a schema change no trigger saw, made while the agent is down, is not seen",
};

/// The notice of a schema change no DDL notice reported: every cached result, as DDL whose
/// dependents cannot be told.
pub const SCHEMA_CHANGED: &str = "all\t\tschema changed without a DDL notice\t0";

/// One of the agent's digest tables: `txcache.<name> (digest text)`.
#[derive(Clone, Copy, Debug)]
pub struct DigestTable {
    /// The table's name in schema `txcache`.
    pub name: &'static str,
    /// What is not seen without it, for the warning.
    pub unseen: &'static str,
}

impl DigestTable {
    /// The recorded digest: `Some(None)` before the first is recorded, `None` when none can
    /// be (no table: a database set up by an older `txcache setup`; or no privilege to
    /// write it).
    pub async fn recorded(&self, sql: &SqlSession) -> anyhow::Result<Option<Option<String>>> {
        let name = self.name;
        let query = format!(
            "SELECT (SELECT digest FROM txcache.{name} LIMIT 1), \
             pg_catalog.has_table_privilege('txcache.{name}', 'INSERT, UPDATE')"
        );
        let problem = match sql.client.query_one(&query, &[]).await {
            Ok(row) if row.get::<_, bool>(1) => return Ok(Some(row.get(0))),
            Ok(_) => {
                format!("the agent's role may not write txcache.{name} (grant it INSERT, UPDATE)")
            }
            Err(error) if error.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                format!("txcache.{name} does not exist (run `txcache setup` again to create it)")
            }
            Err(error) => return Err(error.into()),
        };
        tracing::warn!("{problem}: {}", self.unseen);
        Ok(None)
    }

    /// Records `digest`.
    pub async fn record(&self, sql: &SqlSession, digest: &str) -> anyhow::Result<()> {
        let name = self.name;
        let statement = format!(
            "WITH updated AS (UPDATE txcache.{name} SET digest = $1 RETURNING 1) \
             INSERT INTO txcache.{name} (digest) SELECT $1 WHERE NOT EXISTS (SELECT FROM updated)"
        );
        sql.client.execute(&statement, &[&digest]).await?;
        Ok(())
    }

    /// Writes the `all` notice `notice` (a `txcache-ddl` line), recording `digest` in the
    /// same transaction when the table can be written (`persistent`).
    pub async fn announce(
        &self,
        sql: &SqlSession,
        notice: &str,
        digest: &str,
        persistent: bool,
    ) -> anyhow::Result<()> {
        let client = &sql.client;
        client.batch_execute("BEGIN").await?;
        let written = async {
            if persistent {
                self.record(sql, digest).await?;
            }
            client
                .execute(
                    "SELECT pg_catalog.pg_logical_emit_message(true, $1, $2)",
                    &[&DDL_PREFIX, &notice],
                )
                .await?;
            client.batch_execute("COMMIT").await?;
            anyhow::Ok(())
        }
        .await;
        if written.is_err() {
            let _ = client.batch_execute("ROLLBACK").await;
        }
        written
    }
}

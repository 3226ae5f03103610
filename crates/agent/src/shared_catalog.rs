//! Changes no event trigger sees, turned into a notice in the stream.
//!
//! Roles, role membership and per-database or per-role settings live in shared catalogs:
//! `CREATE`/`ALTER`/`DROP ROLE`, `GRANT role TO role`, `ALTER DATABASE … SET` and
//! `ALTER ROLE … SET` fire no event trigger, and logical decoding carries no catalog change.
//! Yet a cached result depends on them: a role that lost a membership must stop reading what
//! it read through it, and new sessions start with the new settings. Nor does a reloaded
//! configuration file that changed a setting results depend on reach any trigger.
//!
//! So the agent reads a digest of all of it every `--shared-catalog-interval`. When it
//! differs from the last one recorded (in `txcache.shared_catalog`, so a change made while
//! the agent was down is seen when it starts), it writes an `all` line as a transactional
//! `txcache-ddl` message, in the transaction that records the new digest: the stream then
//! invalidates every cached result at that commit, records it as the barrier and publishes a
//! new catalog version, which makes every library read its catalog and session context again
//! (and drop pooled sessions whose settings differ). A change is seen within the interval.

use crate::connect::{connect_sql, SqlSession};
use crate::stream::DDL_PREFIX;
use std::time::Duration;
use tokio_postgres::error::SqlState;

/// The settings a read query's result can depend on: the library's `RESULT_SETTINGS`
/// (`python/txcache/_session.py`), which a test keeps equal to this list.
pub const RESULT_SETTINGS: [&str; 25] = [
    "search_path",
    "TimeZone",
    "timezone_abbreviations",
    "DateStyle",
    "IntervalStyle",
    "extra_float_digits",
    "bytea_output",
    "xmlbinary",
    "xmloption",
    "standard_conforming_strings",
    "backslash_quote",
    "array_nulls",
    "client_encoding",
    "quote_all_identifiers",
    "lc_monetary",
    "lc_numeric",
    "lc_time",
    "default_text_search_config",
    "transform_null_equals",
    "row_security",
    "gin_fuzzy_search_limit",
    "pg_trgm.similarity_threshold",
    "pg_trgm.word_similarity_threshold",
    "pg_trgm.strict_word_similarity_threshold",
    "server_version_num",
];

/// One digest of roles, memberships, per-database and per-role settings, and the result
/// settings as a new session of the agent's role sees them (a reload changes those).
const DIGEST: &str = "SELECT md5(concat_ws('|',
    (SELECT string_agg(format('%s/%s:%s', setdatabase, setrole, setconfig), ','
                       ORDER BY setdatabase, setrole)
     FROM pg_catalog.pg_db_role_setting),
    (SELECT string_agg(format('%s:%s:%s:%s:%s', oid, rolname, rolsuper, rolinherit,
                              rolbypassrls), ',' ORDER BY oid)
     FROM pg_catalog.pg_roles),
    (SELECT string_agg(m::text, ',' ORDER BY m::text) FROM pg_catalog.pg_auth_members m),
    (SELECT string_agg(name || '=' || coalesce(pg_catalog.current_setting(name, true), ''),
                       ',' ORDER BY name)
     FROM unnest($1::text[]) name)))";

/// Where the last digest is recorded (`txcache setup` creates the table), and whether the
/// agent's role may record one.
const RECORDED: &str = "SELECT (SELECT digest FROM txcache.shared_catalog LIMIT 1),
    pg_catalog.has_table_privilege('txcache.shared_catalog', 'INSERT, UPDATE')";
const RECORD: &str = "WITH updated AS (UPDATE txcache.shared_catalog SET digest = $1 RETURNING 1)
    INSERT INTO txcache.shared_catalog (digest) SELECT $1 WHERE NOT EXISTS (SELECT FROM updated)";

/// The notice: every cached result, as DDL whose dependents cannot be told.
const NOTICE: &str = "all\t\troles and settings\t0";

/// Watches the shared catalogs forever, reconnecting when the database goes away.
pub async fn run(dsn: String, interval: Duration) {
    let mut last: Option<String> = None;
    loop {
        let sql = match connect_sql(&dsn, "txcache-agent shared catalogs").await {
            Ok(sql) => sql,
            Err(error) => {
                tracing::warn!(%error, "shared-catalog watch: cannot connect; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(error) = watch(&sql, interval, &mut last).await {
            tracing::warn!(error = %format!("{error:#}"), "shared-catalog watch failed; reconnecting");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Compares the digest with `last` every `interval` until an error.
async fn watch(
    sql: &SqlSession,
    interval: Duration,
    last: &mut Option<String>,
) -> anyhow::Result<()> {
    let recorded = recorded_digest(sql).await?;
    let persistent = recorded.is_some();
    if last.is_none() {
        *last = recorded.flatten();
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now: String = sql
            .client
            .query_one(DIGEST, &[&RESULT_SETTINGS.as_slice()])
            .await?
            .get(0);
        match last.as_deref() {
            Some(known) if known == now => continue,
            // The first reading ever: nothing to compare with, nothing cached under it.
            None if persistent => record(sql, &now).await?,
            None => {}
            Some(_) => {
                announce(sql, &now, persistent).await?;
                tracing::info!(
                    "roles, memberships or database/role settings changed: every cached \
                     result is invalidated and libraries read their session context again"
                );
            }
        }
        *last = Some(now);
    }
}

/// The recorded digest: `Some(None)` before the first is recorded, `None` when none can be
/// (no table: a database set up by an older `txcache setup`; or no privilege to write it).
async fn recorded_digest(sql: &SqlSession) -> anyhow::Result<Option<Option<String>>> {
    let problem = match sql.client.query_one(RECORDED, &[]).await {
        Ok(row) if row.get::<_, bool>(1) => return Ok(Some(row.get(0))),
        Ok(_) => "the agent's role may not write txcache.shared_catalog (grant it INSERT, UPDATE)",
        Err(error) if error.code() == Some(&SqlState::UNDEFINED_TABLE) => {
            "txcache.shared_catalog does not exist (run `txcache setup` again to create it)"
        }
        Err(error) => return Err(error.into()),
    };
    tracing::warn!(
        "{problem}: a change of roles or settings made while the agent is down is not seen"
    );
    Ok(None)
}

/// Records `digest` as the first reading.
async fn record(sql: &SqlSession, digest: &str) -> anyhow::Result<()> {
    sql.client.execute(RECORD, &[&digest]).await?;
    Ok(())
}

/// Writes the notice, recording `digest` in the same transaction.
async fn announce(sql: &SqlSession, digest: &str, persistent: bool) -> anyhow::Result<()> {
    let client = &sql.client;
    client.batch_execute("BEGIN").await?;
    let written = async {
        if persistent {
            client.execute(RECORD, &[&digest]).await?;
        }
        client
            .execute(
                "SELECT pg_catalog.pg_logical_emit_message(true, $1, $2)",
                &[&DDL_PREFIX, &NOTICE],
            )
            .await?;
        client.batch_execute("COMMIT").await
    }
    .await;
    if written.is_err() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    Ok(written?)
}

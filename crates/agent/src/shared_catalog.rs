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
//! differs from the last one recorded (in `txcache.shared_catalog`), it writes an `all`
//! notice ([`DigestTable::announce`]): the new catalog version makes every library read its
//! catalog and session context again (and drop pooled sessions whose settings differ). A
//! change is seen within the interval.

use crate::connect::{connect_sql_until_open, SqlSession};
use crate::digest_table::DigestTable;
use std::time::Duration;

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

/// Where the last digest is recorded.
const TABLE: DigestTable = DigestTable {
    name: "shared_catalog",
    unseen: "a change of roles or settings made while the agent is down is not seen",
};

/// The notice: every cached result, as DDL whose dependents cannot be told.
const NOTICE: &str = "all\t\troles and settings\t0";

/// Watches the shared catalogs forever, reconnecting when the database goes away.
pub async fn run(dsn: String, interval: Duration) {
    let mut last: Option<String> = None;
    loop {
        let sql = connect_sql_until_open(&dsn, "txcache-agent shared catalogs").await;
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
    let recorded = TABLE.recorded(sql).await?;
    let persistent = recorded.is_some();
    if last.is_none() {
        *last = recorded.flatten();
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now: String = sql
            .query_one_prepared(DIGEST, &[&RESULT_SETTINGS.as_slice()])
            .await?
            .get(0);

        match last.as_deref() {
            Some(known) if known == now => continue,
            // The first reading ever: nothing to compare with, nothing cached under it.
            None if persistent => TABLE.record(sql, &now).await?,
            None => {}
            Some(_) => {
                TABLE.announce(sql, NOTICE, &now, persistent).await?;
                tracing::info!(
                    "roles, memberships or database/role settings changed: every cached \
                     result is invalidated and libraries read their session context again"
                );
            }
        }
        *last = Some(now);
    }
}

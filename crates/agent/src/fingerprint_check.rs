//! Without DDL event triggers (`--ddl-tracking fingerprint`), the check of every pin's catalog
//! fingerprint: how a schema change reaches the caches when nothing reports it.
//!
//! The pinner's export statement also computes `txcache.schema_fingerprint(true)`, in the
//! very snapshot it exports; a committed catalog change that persists alters it for good
//! (an object created and dropped again between two pins leaves no trace). A clean pin is
//! listed only if it shows the fingerprint the last listed pin showed
//! ([`FingerprintCheck::admits`]). One that shows another is withheld: the check writes an
//! `all` notice ([`DigestTable::announce`]: every cached result invalidated at its commit,
//! which raises the barrier), counts it (`untracked_schema_changes`) and logs it, and the
//! pinner takes another pin. That one's snapshot sees the notice's commit, so it lies at or
//! after the barrier; the pins before it are no longer listed.
//!
//! The fingerprint is recorded in `txcache.schema_check` (the table the schema watch records
//! its digest in), so that a change made while no agent ran is seen at the first pin. With
//! nothing recorded, or no table to record in, the caches may hold results computed under
//! another schema: the first pin invalidates everything.

use crate::connect::{connect_sql, SqlSession};
use crate::digest_table::{DigestTable, SCHEMA_CHANGED, SCHEMA_CHECK};
use crate::stream_stats::StreamStats;
use std::sync::Arc;
use txcache_model::Timestamp;

/// `txcache.schema_check`, with what is lost without it when no trigger runs.
const TABLE: DigestTable = DigestTable {
    unseen: "the fingerprint checked last is not kept, so every start of the agent \
             invalidates every cached result",
    ..SCHEMA_CHECK
};

/// What becomes of a clean pin, by the fingerprint it shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Listed: its schema is the one the last listed pin showed.
    List,
    /// Listed, and its fingerprint recorded: the table holds another.
    RecordAndList,
    /// Withheld, and a schema change announced: every cached result is invalidated.
    Announce,
}

/// What becomes of a clean pin showing fingerprint `shown`, given the one the last listed
/// pin showed (`expected`; `None` while unknown), the one recorded, and whether the table
/// can be written (`persistent`).
pub fn decide(
    shown: &str,
    expected: Option<&str>,
    recorded: Option<&str>,
    persistent: bool,
) -> Decision {
    if expected != Some(shown) {
        Decision::Announce
    } else if persistent && recorded != Some(shown) {
        Decision::RecordAndList
    } else {
        Decision::List
    }
}

/// The pinner's check of each clean pin. It writes through a session of its own: pinner
/// sessions idle inside transactions that hold exported snapshots, and must not commit.
pub struct FingerprintCheck {
    dsn: String,
    stats: Arc<StreamStats>,
    /// Opened when first needed; dropped on an error.
    session: Option<SqlSession>,
    /// The fingerprint the last listed pin showed (before any, the one recorded); `None`
    /// while unknown.
    expected: Option<String>,
    /// What `txcache.schema_check` holds, as last read or written.
    recorded: Option<String>,
    /// Whether the table can be written, as last read.
    persistent: bool,
    /// Whether `expected` was read from the table yet.
    started: bool,
}

impl FingerprintCheck {
    /// A check that writes through `dsn` and counts into `stats`.
    pub fn new(dsn: String, stats: Arc<StreamStats>) -> Self {
        Self {
            dsn,
            stats,
            session: None,
            expected: None,
            recorded: None,
            persistent: false,
            started: false,
        }
    }

    /// Whether the clean pin at `ts` showing fingerprint `shown` may be listed; when it
    /// shows another schema than the last listed pin, the change is announced first and the
    /// pin withheld. On an error the pin is not listed (and the session is dropped).
    pub async fn admits(&mut self, ts: Timestamp, shown: &str) -> anyhow::Result<bool> {
        let admitted = self.check(ts, shown).await;
        if admitted.is_err() {
            self.session = None;
        }
        admitted
    }

    async fn check(&mut self, ts: Timestamp, shown: &str) -> anyhow::Result<bool> {
        if !self.started {
            self.session().await?; // reads what is recorded
        }
        let expected = self.expected.as_deref();
        match decide(shown, expected, self.recorded.as_deref(), self.persistent) {
            Decision::List => Ok(true),
            Decision::RecordAndList => {
                TABLE.record(self.session().await?, shown).await?;
                self.recorded = Some(shown.to_owned());
                Ok(true)
            }
            Decision::Announce => {
                self.announce(ts, shown).await?;
                Ok(false)
            }
        }
    }

    /// Writes the `all` notice (recording `shown` with it when the table can be written),
    /// counts and logs the change, and expects `shown` from now on.
    async fn announce(&mut self, ts: Timestamp, shown: &str) -> anyhow::Result<()> {
        let persistent = self.persistent;
        let sql = self.session().await?;
        TABLE
            .announce(sql, SCHEMA_CHANGED, shown, persistent)
            .await?;
        self.stats.count_untracked_schema_change();
        if self.expected.is_some() {
            tracing::warn!(
                at = ts.0,
                "the schema changed (a pin's catalog fingerprint differs from the last listed \
                 pin's): every cached result is invalidated, and the pin is not listed; see \
                 docs/agent.md, \"Without event triggers\""
            );
        } else {
            tracing::warn!(
                at = ts.0,
                "no catalog fingerprint is known from before this start (none is recorded in \
                 txcache.schema_check): the caches may hold results computed under another \
                 schema, so every cached result is invalidated, and the pin is not listed"
            );
        }
        if persistent {
            self.recorded = Some(shown.to_owned());
        }
        self.expected = Some(shown.to_owned());
        Ok(())
    }

    /// The check's session, opened when there is none; opening it reads what the table
    /// holds (and, the first time, takes it as the fingerprint expected).
    async fn session(&mut self) -> anyhow::Result<&SqlSession> {
        let sql = match self.session.take() {
            Some(sql) => sql,
            None => self.open().await?,
        };
        Ok(self.session.insert(sql))
    }

    async fn open(&mut self) -> anyhow::Result<SqlSession> {
        let sql = connect_sql(&self.dsn, "txcache-agent fingerprint check").await?;
        let recorded = TABLE.recorded(&sql).await?;
        self.persistent = recorded.is_some();
        self.recorded = recorded.flatten();
        if !self.started {
            self.expected = self.recorded.clone();
            self.started = true;
        }
        Ok(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_showing_the_expected_fingerprint_is_listed() {
        assert_eq!(decide("a1", Some("a1"), Some("a1"), true), Decision::List);
        assert_eq!(decide("a1", Some("a1"), None, false), Decision::List);
    }

    #[test]
    fn an_expected_fingerprint_the_table_does_not_hold_is_recorded_where_it_can_be() {
        assert_eq!(
            decide("a1", Some("a1"), Some("b2"), true),
            Decision::RecordAndList
        );
        assert_eq!(
            decide("a1", Some("a1"), None, true),
            Decision::RecordAndList
        );
        assert_eq!(decide("a1", Some("a1"), Some("b2"), false), Decision::List);
    }

    #[test]
    fn another_fingerprint_or_none_known_announces_a_change() {
        assert_eq!(
            decide("b2", Some("a1"), Some("a1"), true),
            Decision::Announce
        );
        assert_eq!(decide("b2", None, None, true), Decision::Announce);
        assert_eq!(decide("b2", None, None, false), Decision::Announce);
        assert_eq!(decide("b2", None, Some("b2"), true), Decision::Announce);
    }
}

//! Pins on hot standbys (`--standby NAME=CONNINFO`; docs/agent.md, "Pins on standbys"): the
//! statement that takes a snapshot there, what each refusal means and what to do about it,
//! and making sure replay runs again after a call that failed half-way.
//!
//! A standby makes commits visible in replay order, so a snapshot taken while replay is
//! paused at `R` (`pg_last_wal_replay_lsn()`, the end of the last record replayed) sees
//! exactly the commits whose commit record starts below `R`; the tracker names that commit
//! point ([`crate::tracker::StreamTracker::replay_point`]). `txcache.standby_snapshot()`
//! (created by `txcache setup`) pauses replay, takes and exports the snapshot and resumes
//! replay, inside the pinner session's open READ COMMITTED transaction, which keeps the
//! snapshot importable. The pincushion does the rest as for the primary's pins.

use crate::connect::{connect_sql, NoAnswer, SqlSession};
use crate::database::{self, DatabaseIdentity};
use anyhow::Context as _;
use pgwire_replication::Lsn;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use txcache_model::Timestamp;

/// Takes and exports a snapshot with replay paused: the replay position, the snapshot's
/// contents and its id; and the timeline the standby's WAL receiver streams (no row: it
/// runs no receiver; a row without it: the role may not see it).
pub const EXPORT_STATEMENT: &str = "SELECT replay_lsn::text, snapshot, snapshot_id, \
     w.pid IS NOT NULL, w.received_tli FROM txcache.standby_snapshot() \
     LEFT JOIN pg_stat_wal_receiver w ON true";

/// Resumes replay if something left it paused (a row when it did).
pub const RESUME_STATEMENT: &str = "SELECT pg_wal_replay_resume() WHERE pg_is_in_recovery() \
     AND pg_get_wal_replay_pause_state() <> 'not paused'";

/// A snapshot exported on a standby.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbySnapshot {
    /// Where replay was paused: the snapshot sees exactly the commits below it.
    pub replay: Timestamp,
    /// `pg_current_snapshot()::text` (on a standby, without an in-progress list).
    pub snapshot: String,
    /// `SET TRANSACTION SNAPSHOT` takes this.
    pub snapshot_id: String,
    /// The timeline its WAL receiver streams.
    pub receiver: Receiver,
}

/// What the standby's WAL receiver (`pg_stat_wal_receiver`) says of its timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// It streams this timeline (`received_tli`).
    Streams(u32),
    /// No receiver runs: the standby streams from no server now.
    Stopped,
    /// A receiver runs, but the role may not see its details (`pg_read_all_stats`).
    Hidden,
}

/// Fails unless the standby streams the timeline the agent's stream follows (`stream`). A
/// standby streams a timeline only once its
/// own history is part of that timeline's — its primary refuses one that replayed past
/// where the timeline branched off — and replay never goes back: so every position it
/// replays, before or after, is the same WAL on the stream's history. One left on an old
/// timeline after a failover may have replayed past the branch, commits the stream's
/// history never had: its positions must not be placed on the stream.
pub fn check_timeline(receiver: Receiver, stream: u32) -> Result<(), Refusal> {
    match receiver {
        Receiver::Streams(standby) if standby == stream => Ok(()),
        Receiver::Streams(standby) => Err(Refusal::OtherTimeline { standby, stream }),
        Receiver::Stopped => Err(Refusal::NotStreaming),
        Receiver::Hidden => Err(Refusal::TimelineHidden),
    }
}

/// How long `txcache.standby_snapshot()` waits for replay to pause before it gives up (its
/// `deadline`): an export may take that long on a standby that answers.
pub const REPLAY_PAUSE_DEADLINE: Duration = Duration::from_secs(5);

/// Takes and exports a snapshot in `sql`'s open transaction.
pub async fn export(sql: &SqlSession) -> Result<StandbySnapshot, Refusal> {
    let row = sql
        .query_one_prepared(EXPORT_STATEMENT, &[])
        .await
        .map_err(Refusal::from_call)?;
    let replay: Option<&str> = row.get(0);
    let replay = replay.context("pg_last_wal_replay_lsn() is NULL: nothing replayed yet");
    let replay = replay.and_then(|text| Ok(Lsn::parse(text)?));
    let replay = replay.map_err(|error| Refusal::Failed {
        code: "none".to_owned(),
        error,
    })?;
    let timeline: Option<i32> = row.get(4);
    let receiver = match (row.get::<_, bool>(3), timeline) {
        (false, _) => Receiver::Stopped,
        (true, None) => Receiver::Hidden,
        (true, Some(timeline)) => Receiver::Streams(timeline.unsigned_abs()),
    };
    Ok(StandbySnapshot {
        replay: Timestamp(replay.as_u64()),
        snapshot: row.get(1),
        snapshot_id: row.get(2),
        receiver,
    })
}

/// Fails with [`Refusal::Foreign`] unless `sql` is connected to `primary`'s database on a
/// server of its cluster: a snapshot of another database would be certified by this one's
/// stream. (A replica keeps the primary's system identifier and database oids.)
pub async fn check_identity(sql: &SqlSession, primary: &DatabaseIdentity) -> anyhow::Result<()> {
    let found = database::identity(sql).await?;
    let same_cluster = found.system_identifier == primary.system_identifier;
    if same_cluster && found.oid == primary.oid {
        return Ok(());
    }
    let what = if same_cluster {
        format!(
            "database {:?} (oid {}), not the agent's {:?} (oid {})",
            found.name, found.oid, primary.name, primary.oid
        )
    } else {
        format!(
            "a server of cluster {}, not of the agent's {}",
            found.system_identifier, primary.system_identifier
        )
    };
    Err(Refusal::Foreign(what).into())
}

/// Why a standby gave no pin; each kind is logged once, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// No session could be opened (down, wrong conninfo, authentication).
    #[error("cannot open a session: {0:#}")]
    Unreachable(anyhow::Error),
    /// The conninfo reaches another database or cluster.
    #[error("it is {0}")]
    Foreign(String),
    /// SQLSTATE 55000: not in recovery any more.
    #[error("it is not in recovery (promoted?)")]
    Promoted,
    /// SQLSTATE 42501: the role may not pause replay.
    #[error("{0}")]
    NotPermitted(String),
    /// SQLSTATE 42883 or 3F000: `txcache.standby_snapshot()` does not exist.
    #[error("{0}")]
    NotSetUp(String),
    /// The connection broke during the call.
    #[error("the connection broke during the call: {0:#}")]
    Broken(anyhow::Error),
    /// It accepted the connection, then did not answer within the host's `connect_timeout`
    /// (10 s without one): stopped, overloaded, or cut off after the handshake.
    #[error("it did not answer within {0:?}")]
    NoAnswer(Duration),
    /// It streams another timeline than the agent's stream (a failover left it behind).
    #[error("it streams timeline {standby}, the agent's stream follows timeline {stream}")]
    OtherTimeline {
        /// The standby's.
        standby: u32,
        /// The stream's.
        stream: u32,
    },
    /// No WAL receiver runs on it: which timeline it will replay is not known.
    #[error("it streams from no server now (no WAL receiver in pg_stat_wal_receiver)")]
    NotStreaming,
    /// The role cannot see which timeline its WAL receiver streams.
    #[error("the role cannot see which timeline it streams (pg_stat_wal_receiver.received_tli is hidden)")]
    TimelineHidden,
    /// Anything else the call answered.
    #[error("the call failed (SQLSTATE {code}): {error:#}")]
    Failed {
        /// The SQLSTATE, or `none`.
        code: String,
        /// What it said.
        error: anyhow::Error,
    },
}

impl Refusal {
    /// What a failed `txcache.standby_snapshot()` call means.
    pub fn from_call(error: tokio_postgres::Error) -> Self {
        let Some(code) = error.code().cloned() else {
            return Self::Broken(error.into());
        };
        let message = error
            .as_db_error()
            .map_or_else(|| error.to_string(), |db| db.message().to_owned());
        match code {
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE => Self::Promoted,
            SqlState::INSUFFICIENT_PRIVILEGE => Self::NotPermitted(message),
            SqlState::UNDEFINED_FUNCTION | SqlState::INVALID_SCHEMA_NAME => Self::NotSetUp(message),
            code => Self::Failed {
                code: code.code().to_owned(),
                error: error.into(),
            },
        }
    }

    /// The refusal an error opening a session carries ([`check_identity`]'s), or
    /// [`Refusal::Unreachable`].
    pub fn from_opening(error: anyhow::Error) -> Self {
        error.downcast::<Self>().unwrap_or_else(Self::Unreachable)
    }

    /// The state it puts the standby in: a change of state is logged, a repeat is not.
    pub fn state(&self) -> String {
        match self {
            Self::Unreachable(_) => "unreachable".to_owned(),
            Self::Foreign(_) => "foreign".to_owned(),
            Self::Promoted => "promoted".to_owned(),
            Self::NotPermitted(_) => "not permitted".to_owned(),
            Self::NotSetUp(_) => "not set up".to_owned(),
            Self::Broken(_) => "broken".to_owned(),
            Self::NoAnswer(_) => "no answer".to_owned(),
            Self::OtherTimeline { standby, .. } => format!("timeline {standby}"),
            Self::NotStreaming => "not streaming".to_owned(),
            Self::TimelineHidden => "timeline hidden".to_owned(),
            Self::Failed { code, .. } => format!("failed {code}"),
        }
    }

    /// What an operator can do about it.
    pub fn advice(&self) -> &'static str {
        match self {
            Self::Unreachable(_) | Self::Broken(_) => {
                "check that the standby runs and that its --standby conninfo reaches it"
            }
            Self::Foreign(_) => {
                "name a streaming replica of the agent's database (same cluster, same \
                 database) in --standby"
            }
            Self::NoAnswer(_) => {
                "check the standby (a stopped or overloaded server, or a network cut after \
                 the handshake); each call waits at most its conninfo's connect_timeout, and \
                 pins return once it answers"
            }
            Self::Promoted => "it is a primary now: point --standby at a standby, or remove it",
            Self::NotPermitted(_) => {
                "as a superuser, GRANT EXECUTE ON FUNCTION pg_wal_replay_pause(), \
                 pg_wal_replay_resume(), pg_get_wal_replay_pause_state() TO the role of its \
                 conninfo (on the primary: grants replicate)"
            }
            Self::NotSetUp(_) => {
                "run `txcache setup` on the primary (it creates txcache.standby_snapshot(), \
                 which replicates to the standby)"
            }
            Self::OtherTimeline { .. } => {
                "after a failover, point the standby at the new primary (primary_conninfo); \
                 if it replayed past the switch, rebuild it (pg_rewind or pg_basebackup). \
                 Pins return once it streams the stream's timeline"
            }
            Self::NotStreaming => {
                "check the standby's primary_conninfo and its log: pins return once its WAL \
                 receiver streams from the primary (a standby restoring only from an \
                 archive gives none)"
            }
            Self::TimelineHidden => {
                "GRANT pg_read_all_stats TO the role of its conninfo (on the primary: grants \
                 replicate)"
            }
            Self::Failed { .. } => "see the error; the agent retries at every --pin-interval",
        }
    }

    /// Whether the call may have paused replay and not resumed it: it reached the server,
    /// and failed after the checks that run before the pause.
    pub fn may_have_paused(&self) -> bool {
        matches!(
            self,
            Self::Broken(_) | Self::NoAnswer(_) | Self::Failed { .. } | Self::NotPermitted(_)
        )
    }
}

/// After a failed call in `session` (its transaction aborted, or its connection gone): ends
/// that transaction and resumes replay if it is paused, on the same connection or, failing
/// that, a fresh one to `dsn`, all within `wait` (a standby that hangs must not hold its
/// pinner). Whether replay was paused (and is resumed now).
pub async fn resume_replay(
    session: Option<&SqlSession>,
    dsn: &str,
    wait: Duration,
) -> anyhow::Result<bool> {
    tokio::time::timeout(wait, resume_on_either(session, dsn))
        .await
        .unwrap_or_else(|_| Err(NoAnswer { within: wait }.into()))
}

async fn resume_on_either(session: Option<&SqlSession>, dsn: &str) -> anyhow::Result<bool> {
    if let Some(sql) = session.filter(|sql| !sql.client.is_closed()) {
        let resumed = async {
            sql.client.batch_execute("ROLLBACK").await?;
            resume_on(sql).await
        };
        if let Ok(resumed) = resumed.await {
            return Ok(resumed);
        }
    }
    let sql = connect_sql(dsn, "txcache-agent standby resume").await?;
    resume_on(&sql).await
}

async fn resume_on(sql: &SqlSession) -> anyhow::Result<bool> {
    let rows = sql.client.query(RESUME_STATEMENT, &[]).await?;
    Ok(!rows.is_empty())
}

/// How a standby answered last, so that each change is logged once. (The standby's pinner
/// logs inside a span naming it, so the lines here need not.)
#[derive(Debug)]
pub struct Health {
    name: String,
    /// `None` before the first answer.
    state: Option<String>,
}

impl Health {
    /// The health of the standby `name`, before its first answer.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            state: None,
        }
    }

    /// The standby's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A pin was placed: the first one, and the first after anything else, is logged.
    pub fn pinning(&mut self) {
        if self.change("pinning") {
            tracing::info!("standby pins: taking pins on the standby");
        }
    }

    /// Snapshots were taken but none could be placed on the stream (the last at `replay`).
    pub fn unplaced(&mut self, replay: Timestamp) {
        if self.change("unplaced") {
            tracing::info!(%replay,
                "standby pins: the standby's replay position is not placed on the stream (not decoded within the time allowed, or below where the stream resumed); retrying at every --pin-interval");
        }
    }

    /// A refusal: logged with what to do when it is new (`true` then). Its pins are gone.
    pub fn refused(&mut self, refusal: &Refusal) -> bool {
        let new = self.change(&refusal.state());
        if new {
            tracing::warn!(reason = %refusal, advice = refusal.advice(),
                "standby pins: the standby gives no pins; none of its pins are listed, and the agent retries at every --pin-interval");
        } else {
            tracing::debug!(reason = %refusal, "standby pins: still refused");
        }
        new
    }

    /// Moves to `state`; whether it is a change.
    fn change(&mut self, state: &str) -> bool {
        if self.state.as_deref() == Some(state) {
            return false;
        }
        self.state = Some(state.to_owned());
        true
    }
}

/// Logs what making sure replay runs found after a failed call: as a warning when `loud`
/// (the refusal is new), else quieter, since it repeats at every retry.
pub fn log_resume(outcome: &anyhow::Result<bool>, loud: bool) {
    const RESUMED: &str =
        "standby pins: the failed call had left replay paused; resumed it (pg_wal_replay_resume())";
    match outcome {
        Ok(true) if loud => tracing::warn!("{RESUMED}"),
        Ok(true) => tracing::info!("{RESUMED}"),
        Ok(false) => tracing::debug!("standby pins: replay is not paused"),
        Err(error) if loud => tracing::warn!(error = format!("{error:#}"),
            "standby pins: cannot make sure replay runs after the failed call: if pg_get_wal_replay_pause_state() on the standby says 'paused', run SELECT pg_wal_replay_resume() there as a superuser"),
        Err(error) => tracing::debug!(error = format!("{error:#}"),
            "standby pins: cannot make sure replay runs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_kind_is_one_state_and_only_calls_that_got_far_may_leave_replay_paused() {
        let failed = |code: &str| Refusal::Failed {
            code: code.to_owned(),
            error: anyhow::anyhow!("x"),
        };
        let refusals = [
            Refusal::Unreachable(anyhow::anyhow!("refused")),
            Refusal::Foreign("another".to_owned()),
            Refusal::Promoted,
            Refusal::NotPermitted("permission denied".to_owned()),
            Refusal::NotSetUp("no function".to_owned()),
            Refusal::Broken(anyhow::anyhow!("eof")),
            Refusal::NoAnswer(Duration::from_secs(2)),
            Refusal::OtherTimeline {
                standby: 2,
                stream: 1,
            },
            Refusal::NotStreaming,
            Refusal::TimelineHidden,
            failed("55P03"),
        ];
        let states: Vec<String> = refusals.iter().map(Refusal::state).collect();
        let mut unique = states.clone();
        unique.dedup();
        assert_eq!(unique, states);
        assert_ne!(failed("55P03").state(), failed("XX000").state());
        let paused: Vec<bool> = refusals.iter().map(Refusal::may_have_paused).collect();
        assert_eq!(
            paused,
            [false, false, false, true, false, true, true, false, false, false, true]
        );
    }

    #[test]
    fn only_a_standby_streaming_the_stream_s_timeline_gives_pins() {
        assert!(check_timeline(Receiver::Streams(2), 2).is_ok());
        assert!(matches!(
            check_timeline(Receiver::Streams(1), 2),
            Err(Refusal::OtherTimeline {
                standby: 1,
                stream: 2
            })
        ));
        assert!(matches!(
            check_timeline(Receiver::Streams(3), 2),
            Err(Refusal::OtherTimeline { .. })
        ));
        assert!(matches!(
            check_timeline(Receiver::Stopped, 1),
            Err(Refusal::NotStreaming)
        ));
        assert!(matches!(
            check_timeline(Receiver::Hidden, 1),
            Err(Refusal::TimelineHidden)
        ));
        let message = Refusal::OtherTimeline {
            standby: 1,
            stream: 2,
        }
        .to_string();
        assert_eq!(
            message,
            "it streams timeline 1, the agent's stream follows timeline 2"
        );
    }

    #[test]
    fn an_opening_error_keeps_its_refusal() {
        let foreign = anyhow::Error::from(Refusal::Foreign("another".to_owned()));
        assert!(matches!(
            Refusal::from_opening(foreign),
            Refusal::Foreign(_)
        ));
        let down = anyhow::anyhow!("cannot connect to PostgreSQL: refused");
        assert!(matches!(
            Refusal::from_opening(down),
            Refusal::Unreachable(_)
        ));
    }

    #[test]
    fn health_changes_once_per_state() {
        let mut health = Health::new("replica1");
        assert!(health.refused(&Refusal::Promoted));
        assert!(!health.refused(&Refusal::Promoted));
        health.pinning();
        assert!(health.refused(&Refusal::Promoted));
        assert_eq!(health.name(), "replica1");
    }
}

//! The server the change stream is decoded on: the primary (`--dsn`), or a hot standby
//! (`--decode-from`). A `--decode-from` naming several hosts keeps the stream going when the
//! one it is decoded on fails:
//!
//! ```text
//!  host=s1,s2,p   s1 answers ─▶ decode on s1 (its slot)
//!                 s1 silent or unreachable for --decode-failover-after
//!                                ─▶ the first other host that answers, preferring a standby
//!                                   holding a usable slot; a new slot there resets every node
//!  every --decode-failover-after: drop the idle slot of that name on the other hosts
//! ```
//!
//! A slot left on a host the stream moved away from would keep that server's WAL and,
//! through `hot_standby_feedback`, the primary's catalog rows for ever, so it is dropped once
//! its host answers again. The stream stays where it moved until that server fails in turn:
//! each move may reset every cache node, so it is not moved back on its own.

use crate::config::Config;
use crate::connect::{self, connect_sql, reached_host, SqlSession};
use crate::database::{self, DatabaseIdentity};
use anyhow::{bail, Context as _};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// The servers the stream may be decoded on, and the one it is.
pub struct DecodingServers {
    /// `--decode-from`, or the primary's `--dsn`.
    dsn: String,
    /// `--decode-from`'s hosts as `host:port`, when it names several; empty otherwise.
    hosts: Vec<String>,
    slot: String,
    failover_after: Duration,
    /// What every host must be a server of (`require_decoding_server`).
    primary: DatabaseIdentity,
    current: Mutex<Current>,
}

/// The host the stream is decoded on, and since when it has failed to answer.
#[derive(Default)]
struct Current {
    host: Option<usize>,
    failing_since: Option<Instant>,
}

/// A session on the server the stream is decoded on.
pub struct DecodingServer {
    /// The session.
    pub sql: SqlSession,
    /// Which host of the connection string it reached (the replication stream opens there).
    pub host: usize,
    /// The host the stream was decoded on before, when it has just moved.
    pub moved_from: Option<String>,
}

impl DecodingServers {
    /// The servers `config` names for decoding, each of which must be a server of `primary`.
    pub fn new(config: &Config, primary: DatabaseIdentity) -> anyhow::Result<Self> {
        let dsn = config.decoding_dsn().to_owned();
        let hosts = match &config.decode_from {
            Some(decode_from) => connect::hosts_of(decode_from)?,
            None => Vec::new(),
        };
        Ok(Self {
            dsn,
            hosts: if hosts.len() > 1 { hosts } else { Vec::new() },
            slot: config.slot.clone(),
            failover_after: config.decode_failover_after,
            primary,
            current: Mutex::new(Current::default()),
        })
    }

    /// How long the stream may receive nothing before its server counts as failing: `Some`
    /// only when there is another host to move to.
    pub fn silence_limit(&self) -> Option<Duration> {
        (!self.hosts.is_empty()).then_some(self.failover_after)
    }

    /// Opens `application`'s session on the server the stream is decoded on. With several
    /// hosts: the current one, unless it has failed for `--decode-failover-after`; then (or
    /// at first) the first other host that answers, a standby holding a usable slot first.
    pub async fn open(&self, application: &str) -> anyhow::Result<DecodingServer> {
        if self.hosts.is_empty() {
            let sql = connect_sql(&self.dsn, application).await?;
            let host = reached_host(&self.dsn, &sql).await?;
            return Ok(DecodingServer {
                sql,
                host,
                moved_from: None,
            });
        }
        let mut current = self.current.lock().await;
        let failed = match current.host {
            None => None,
            Some(host) => match connect::connect_host(&self.dsn, host, application).await {
                Ok(sql) => {
                    current.failing_since = None;
                    return Ok(DecodingServer {
                        sql,
                        host,
                        moved_from: None,
                    });
                }
                Err(error) => {
                    let since = *current.failing_since.get_or_insert_with(Instant::now);
                    let name = &self.hosts[host];
                    if since.elapsed() < self.failover_after {
                        bail!(
                            "the --decode-from host the stream is decoded on ({name}) does \
                             not answer: {error:#}; the stream moves to another host if it \
                             still does not {:?} after it stopped",
                            self.failover_after
                        );
                    }
                    tracing::error!(host = %name, error = format!("{error:#}"), failing_for = ?since.elapsed(),
                        "THE --decode-from HOST THE STREAM IS DECODED ON HAS FAILED: moving the stream to another host");
                    Some(host)
                }
            },
        };
        let (sql, host) = self.choose(application, failed).await?;
        let moved_from = failed.map(|old| self.hosts[old].clone());
        tracing::warn!(host = %self.hosts[host], moved_from = ?moved_from, "the change stream is decoded on this --decode-from host");
        *current = Current {
            host: Some(host),
            failing_since: None,
        };
        Ok(DecodingServer {
            sql,
            host,
            moved_from,
        })
    }

    /// The first host that answers and can decode, a standby holding a usable slot first;
    /// `failed` is tried last.
    async fn choose(
        &self,
        application: &str,
        failed: Option<usize>,
    ) -> anyhow::Result<(SqlSession, usize)> {
        let order = (0..self.hosts.len()).filter(|host| Some(*host) != failed);
        let mut first_answering = None;
        for host in order.chain(failed) {
            let name = &self.hosts[host];
            let sql = match connect::connect_host(&self.dsn, host, application).await {
                Ok(sql) => sql,
                Err(error) => {
                    tracing::warn!(host = %name, error = format!("{error:#}"), "a --decode-from host does not answer");
                    continue;
                }
            };
            if let Err(error) = database::require_decoding_server(&self.primary, &sql).await {
                tracing::error!(host = %name, error = format!("{error:#}"), "a --decode-from host cannot decode the stream; skipping it");
                continue;
            }
            // A standby's slot is one the stream was decoded on: resuming there resets no
            // node. The primary's (setup's, or one it fell back to) is never preferred.
            if database::in_recovery(&sql).await? {
                let slot = database::find_slot(&sql, &self.slot).await;
                if matches!(slot, Ok(Some(ref state)) if !state.lost) {
                    return Ok((sql, host));
                }
            }
            first_answering.get_or_insert((sql, host));
        }
        match first_answering {
            Some(chosen) => Ok(chosen),
            None => bail!(
                "no --decode-from host answers and can decode ({})",
                self.hosts.join(", ")
            ),
        }
    }

    /// Records that the stream has received nothing since `since`: its server counts as
    /// failing from then, unless it answers the next session.
    pub async fn went_silent(&self, since: Instant) {
        let mut current = self.current.lock().await;
        current.failing_since.get_or_insert(since);
    }

    /// Drops, every `--decode-failover-after`, the idle slot of `--slot`'s name on each
    /// host the stream is not decoded on (left there when it moved), forever.
    pub async fn drop_abandoned_slots(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.failover_after);
        loop {
            tick.tick().await;
            for host in 0..self.hosts.len() {
                self.drop_abandoned_slot(host).await;
            }
        }
    }

    /// Drops `host`'s slot of `--slot`'s name if the stream is not decoded there.
    async fn drop_abandoned_slot(&self, host: usize) {
        if self
            .current
            .lock()
            .await
            .host
            .is_none_or(|current| current == host)
        {
            return;
        }
        let application = "txcache-agent slot clean-up";
        let Ok(sql) = connect::connect_host(&self.dsn, host, application).await else {
            return;
        };
        // Under the lock: the stream does not move onto this slot while it is dropped.
        let current = self.current.lock().await;
        if current.host.is_none_or(|current| current == host) {
            return;
        }
        let name = &self.hosts[host];
        match database::drop_idle_slot(&sql, &self.slot).await {
            Ok(true) => tracing::warn!(host = %name, slot = %self.slot,
                "dropped the replication slot left on a --decode-from host the stream moved away from (it kept that server's WAL and, through hot_standby_feedback, the primary's catalog rows)"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(host = %name, error = format!("{error:#}"), "cannot drop the replication slot left on a --decode-from host the stream moved away from; trying again later")
            }
        }
    }
}

/// Refuses to start unless some host of `--decode-from` answers, and every one that answers
/// is a server of `primary` that can decode (`require_decoding_server`).
pub async fn require_decoding_hosts(
    decode_from: &str,
    primary: &DatabaseIdentity,
) -> anyhow::Result<()> {
    let hosts = connect::hosts_of(decode_from)?;
    let mut answered = 0;
    for (host, name) in hosts.iter().enumerate() {
        match connect::connect_host(decode_from, host, "txcache-agent").await {
            Ok(sql) => {
                database::require_decoding_server(primary, &sql)
                    .await
                    .with_context(|| format!("--decode-from host {name}"))?;
                answered += 1;
            }
            Err(error) => {
                tracing::warn!(host = %name, error = format!("{error:#}"), "a --decode-from host does not answer")
            }
        }
    }
    if answered == 0 {
        bail!(
            "cannot connect to the --decode-from standby ({}): no host answers",
            hosts.join(", ")
        );
    }
    Ok(())
}

//! The server the change stream is decoded on: the primary (`--dsn`), or a hot standby
//! (`--decode-from`). A `--decode-from` naming several hosts keeps the stream going when the
//! one it is decoded on fails:
//!
//! ```text
//!  host=s1,s2,p   decode on s1 (its slot)
//!                 every second: a spare slot on s2, advanced to what s1's slot acknowledged;
//!                               no idle slot on p (it would keep the primary's WAL), or
//!                               with --decode-primary-slot spare, a spare there too
//!                 s1 silent or unreachable for --decode-spare-after, a spare usable
//!                                ─▶ a standby holding a usable slot (s2's spare: no node
//!                                   reset), else the primary's usable spare
//!                 s1 silent or unreachable for --decode-failover-after
//!                                ─▶ another host that answers: a standby holding a usable
//!                                   slot, else the primary's usable spare, else the first
//!                                   standby, else the primary (a new slot: every node
//!                                   reset)
//!                 decoded on a primary, a standby's spare caught up ─▶ move there
//! ```
//!
//! Decoded on a primary (one it fell back to, or a standby promoted in place), the stream
//! moves to a standby whose spare has caught up; otherwise it stays on a host that works: a
//! move to a host without a spare resets every cache node. A primary keeps a spare only with
//! `--decode-primary-slot spare`: advancing it reads the primary's WAL back every second,
//! work `--decode-from` exists to take off the primary.

use crate::config::{Config, PrimarySlot};
use crate::connect::{self, connect_sql, reached_host, ReplicationHost, SqlSession};
use crate::database::{self, DatabaseIdentity};
use crate::term::Term;
use anyhow::{bail, Context as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use tokio::time::MissedTickBehavior;
use txcache_model::Timestamp;

/// The servers the stream may be decoded on, and the one it is.
pub struct DecodingServers {
    /// `--decode-from`, or the primary's `--dsn`.
    dsn: String,
    /// `--decode-from`'s hosts as `host:port`, when it names several; empty otherwise.
    hosts: Vec<String>,
    slot: String,
    publication: String,
    failover_after: Duration,
    /// How long the host in use may fail before the stream moves to a spare (no reset).
    spare_after: Duration,
    /// Per host: whether it held a usable spare slot when last tended (while the stream
    /// was decoded elsewhere, and not failing).
    spares: Vec<AtomicBool>,
    /// Whether a primary among the hosts keeps a spare slot (`--decode-primary-slot spare`).
    primary_spare: bool,
    /// Whether a host was found to be a primary: only then is a slot there tended, and may
    /// be kept rather than dropped when the stream starts on a standby.
    primary_listed: AtomicBool,
    /// What every host must be a server of (`require_decoding_server`).
    primary: DatabaseIdentity,
    current: Mutex<Current>,
    /// How far the stream's slot is acknowledged: where the spare slots are advanced to.
    acknowledged: AtomicU64,
    /// Whether the server the stream is decoded on is a primary, as the stream last found.
    on_primary: AtomicBool,
    /// The history of the server the stream is decoded on, as the stream last found it: a
    /// standby the stream moves to off a primary must follow it.
    history: std::sync::Mutex<Option<String>>,
}

/// The host the stream is decoded on, since when it has failed to answer, and the standby
/// it should move to (decoded on a primary, with a spare slot there caught up).
#[derive(Default)]
struct Current {
    host: Option<usize>,
    failing_since: Option<Instant>,
    /// Since when sessions on `host` have been opened without the stream running there:
    /// not started, or started on a standby that receives no WAL.
    starting_since: Option<Instant>,
    wanted: Option<usize>,
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
        let hosts = if hosts.len() > 1 { hosts } else { Vec::new() };
        Ok(Self {
            dsn,
            spares: hosts.iter().map(|_| AtomicBool::new(false)).collect(),
            primary_spare: config.keeps_primary_spare(),
            primary_listed: AtomicBool::new(false),
            hosts,
            slot: config.slot.clone(),
            publication: config.publication.clone(),
            failover_after: config.decode_failover_after,
            spare_after: config.decode_spare_after.min(config.decode_failover_after),
            primary,
            current: Mutex::new(Current::default()),
            acknowledged: AtomicU64::new(0),
            on_primary: AtomicBool::new(false),
            history: std::sync::Mutex::default(),
        })
    }

    /// How long the stream may receive nothing before its server counts as failing: `Some`
    /// only when there is another host to move to.
    pub fn silence_limit(&self) -> Option<Duration> {
        (!self.hosts.is_empty()).then(|| self.failure_limit())
    }

    /// How long the host in use may fail before the stream moves: `--decode-spare-after`
    /// while another host held a usable spare slot when last tended (a move there resets
    /// no node), else `--decode-failover-after`.
    fn failure_limit(&self) -> Duration {
        if self.spare_usable() {
            self.spare_after
        } else {
            self.failover_after
        }
    }

    fn spare_usable(&self) -> bool {
        self.spares
            .iter()
            .any(|spare| spare.load(Ordering::Relaxed))
    }

    /// Opens `application`'s session on the server the stream is decoded on. With several
    /// hosts: the current one, unless it has failed for `--decode-failover-after`; then (or
    /// at first) another host that answers: a standby holding a usable slot, else a primary
    /// holding one, else the first standby, else the primary.
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
        if let Some(server) = self.move_to_wanted(&mut current, application).await {
            return Ok(server);
        }
        let failed = match current.host {
            None => None,
            Some(host) => match connect::connect_host(&self.dsn, host, application).await {
                // It answers; but a host where the stream cannot start (replication refused,
                // no walsender free, the slot held) has failed as surely.
                Ok(sql) => {
                    current.failing_since = None;
                    let starting = *current.starting_since.get_or_insert_with(Instant::now);
                    if starting.elapsed() < self.failure_limit() {
                        return Ok(DecodingServer {
                            sql,
                            host,
                            moved_from: None,
                        });
                    }
                    current.failing_since = Some(starting);
                    tracing::error!(host = %self.hosts[host], failing_for = ?starting.elapsed(),
                        "THE STREAM CANNOT RUN ON THE --decode-from HOST IN USE, WHICH ANSWERS SQL (the stream does not start there, or the standby receives no WAL): moving the stream to another host");
                    Some(host)
                }
                Err(error) => {
                    let since = *current.failing_since.get_or_insert_with(Instant::now);
                    let name = &self.hosts[host];
                    let limit = self.failure_limit();
                    if since.elapsed() < limit {
                        let to = if limit < self.failover_after {
                            "a spare slot"
                        } else {
                            "another host"
                        };
                        bail!(
                            "the --decode-from host the stream is decoded on ({name}) does \
                             not answer: {error:#}; the stream moves to {to} if it still does \
                             not {limit:?} after it stopped"
                        );
                    }
                    tracing::error!(host = %name, error = format!("{error:#}"), failing_for = ?since.elapsed(),
                        "THE --decode-from HOST THE STREAM IS DECODED ON HAS FAILED: moving the stream to another host");
                    Some(host)
                }
            },
        };
        // Before --decode-failover-after, only a host holding a usable slot will do.
        let spare_only = current
            .failing_since
            .is_some_and(|since| since.elapsed() < self.failover_after);
        let (sql, host) = self.choose(application, failed, spare_only).await?;

        let moved_from = failed.map(|old| self.hosts[old].clone());
        tracing::warn!(host = %self.hosts[host], moved_from = ?moved_from, "the change stream is decoded on this --decode-from host");
        *current = Current {
            host: Some(host),
            ..Current::default()
        };
        self.decoded_on_primary(false);
        Ok(DecodingServer {
            sql,
            host,
            moved_from,
        })
    }

    /// A session on the standby the stream should move to off a primary (`wanted`), which
    /// becomes the current host; `None` when there is none, or it does not answer.
    async fn move_to_wanted(
        &self,
        current: &mut Current,
        application: &str,
    ) -> Option<DecodingServer> {
        let (wanted, old) = (current.wanted.take()?, current.host?);
        let name = &self.hosts[wanted];
        match connect::connect_host(&self.dsn, wanted, application).await {
            Ok(sql) => {
                tracing::warn!(host = %name, moved_from = %self.hosts[old], "moving the change stream off the primary to the spare slot on a --decode-from standby (no cache node is reset)");
                *current = Current {
                    host: Some(wanted),
                    ..Current::default()
                };
                self.decoded_on_primary(false);
                Some(DecodingServer {
                    sql,
                    host: wanted,
                    moved_from: Some(self.hosts[old].clone()),
                })
            }
            Err(error) => {
                tracing::warn!(host = %name, error = format!("{error:#}"), "the standby with a spare slot does not answer: the stream stays on the primary");
                None
            }
        }
    }

    /// Whether the stream should move to a standby's spare slot: its session then ends, and
    /// the next opens there ([`DecodingServers::open`]).
    pub async fn move_wanted(&self) -> bool {
        self.current.lock().await.wanted.is_some()
    }

    /// The first host of the best [`HostRank`] that answers and can decode; with
    /// `spare_only`, only a host whose slot is not ahead of what the stream acknowledged.
    /// `failed` is tried last, and ranks no better than a slot ahead: the stream returns to
    /// it only when nothing better answers.
    async fn choose(
        &self,
        application: &str,
        failed: Option<usize>,
        spare_only: bool,
    ) -> anyhow::Result<(SqlSession, usize)> {
        let order = (0..self.hosts.len()).filter(|host| Some(*host) != failed);
        // The hosts that answer, by rank (`HostRank`): the first of the best rank wins.
        let mut ranked: [Option<(SqlSession, usize)>; 6] = Default::default();
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
            let rank = self.rank(&sql, host, Some(host) == failed).await?;
            if rank == HostRank::UsableSlot {
                return Ok((sql, host));
            }
            ranked[rank as usize].get_or_insert((sql, host));
        }
        let [_, primary_spare, behind, other_slot, no_slot, primary] = ranked;
        let chosen = match primary_spare.or(behind) {
            Some(chosen) => Some(chosen),
            None if spare_only => None,
            None => other_slot.or(no_slot).or(primary),
        };
        match chosen {
            Some(chosen) => Ok(chosen),
            None if spare_only => bail!(
                "no --decode-from host with a usable slot answers: the stream moves to a host \
                 without one (every cache node reset) once the one it was decoded on has \
                 failed for {:?}",
                self.failover_after
            ),
            None => bail!(
                "no --decode-from host answers and can decode ({})",
                self.hosts.join(", ")
            ),
        }
    }

    /// How good a move of the stream to `host` (over its session `sql`) would be.
    async fn rank(&self, sql: &SqlSession, host: usize, failed: bool) -> anyhow::Result<HostRank> {
        let primary = self.is_primary(sql).await?;
        if primary && !self.primary_spare {
            return Ok(HostRank::Primary);
        }
        // A slot confirmed nowhere (NULL) is still being created; a primary's failover slot
        // is no spare of the agent's (`tend` replaces it).
        let slot = database::find_slot(sql, &self.slot).await;
        let Ok(Some(slot)) = slot.as_ref().map(|slot| {
            slot.as_ref().filter(|slot| {
                !slot.lost && slot.confirmed != Timestamp::ZERO && !(primary && slot.failover)
            })
        }) else {
            return Ok(if primary {
                HostRank::Primary
            } else {
                HostRank::NoSlot
            });
        };
        let acknowledged = Timestamp(self.acknowledged.load(Ordering::Relaxed));
        let ahead = failed || slot.confirmed > acknowledged;
        let follows = !ahead && self.follows_stream(sql, host).await.unwrap_or(false);
        Ok(match (primary, ahead, follows) {
            (true, _, true) => HostRank::PrimarySpare,
            (true, _, false) => HostRank::Primary,
            (false, true, _) => HostRank::OtherSlot,
            (false, false, true) => HostRank::UsableSlot,
            (false, false, false) => HostRank::SlotBehind,
        })
    }

    /// Whether the host of `sql` is the primary, which is then recorded as found among the
    /// hosts ([`Self::primary_slot`]).
    async fn is_primary(&self, sql: &SqlSession) -> anyhow::Result<bool> {
        let primary = !database::in_recovery(sql).await?;
        if primary {
            self.primary_listed.store(true, Ordering::Relaxed);
        }
        Ok(primary)
    }

    /// What becomes of the primary's slot of `--slot`'s name while the stream is decoded on a
    /// standby: kept as a spare only with `--decode-primary-slot spare` and the primary
    /// found among the hosts, which tends it; else dropped (nothing would advance it, and it
    /// would keep the primary's WAL).
    pub fn primary_slot(&self) -> PrimarySlot {
        if self.primary_spare && self.primary_listed.load(Ordering::Relaxed) {
            PrimarySlot::Spare
        } else {
            PrimarySlot::Drop
        }
    }

    /// Records that the stream started on the host in use: it works.
    pub async fn stream_started(&self) {
        self.current.lock().await.starting_since = None;
    }

    /// Records that the stream has received nothing since `since`: its server counts as
    /// failing from then, unless it answers the next session — or, `stranded` (a standby
    /// that answers but receives no WAL), as one where the stream cannot run.
    pub async fn went_silent(&self, since: Instant, stranded: bool) {
        let mut current = self.current.lock().await;
        if stranded {
            current.starting_since = Some(since);
        } else {
            current.failing_since.get_or_insert(since);
        }
    }

    /// Records whether the server the stream is decoded on is a primary (a fall back, or a
    /// standby promoted in place): a standby's caught-up spare then takes the stream.
    pub fn decoded_on_primary(&self, primary: bool) {
        self.on_primary.store(primary, Ordering::Relaxed);
    }

    /// Records the history (`system_identifier:timeline`) of the server the stream is
    /// decoded on, as the stream follows it.
    pub fn decoded_history(&self, history: &str) {
        *self.history.lock().unwrap_or_else(PoisonError::into_inner) = Some(history.to_owned());
    }

    /// Whether the server of `sql` (`host`) has the history the stream is decoded on: a
    /// standby still on the old timeline after a promotion does not.
    async fn follows_stream(&self, sql: &SqlSession, host: usize) -> anyhow::Result<bool> {
        let server = ReplicationHost {
            dsn: &self.dsn,
            host,
            slot: &self.slot,
            publication: &self.publication,
        };
        let theirs = database::history(sql, Some(server)).await?;
        let ours = self
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Ok(ours.is_some_and(|ours| ours == theirs))
    }

    /// Records that the stream's slot is acknowledged up to `position`: the spare slots
    /// follow it.
    pub fn acknowledged(&self, position: Timestamp) {
        self.acknowledged.fetch_max(position.0, Ordering::Relaxed);
    }

    /// Records that the stream starts again at `position` (after a gap, or on a history
    /// that went back), below what it acknowledged before: the spares must not be advanced
    /// past what the nodes have now, and one already past it is no longer usable.
    pub fn restart_acknowledged(&self, position: Timestamp) {
        self.acknowledged.store(position.0, Ordering::Relaxed);
        for spare in &self.spares {
            spare.store(false, Ordering::Relaxed);
        }
    }

    /// Forever, every second, tends the hosts the stream is not decoded on: each standby
    /// keeps a spare slot of `--slot`'s name, advanced to what the stream's slot
    /// acknowledged, so that the stream moves there without a gap; each primary (one listed,
    /// or a standby promoted) loses its idle slot of that name, which would keep its WAL —
    /// or, with `--decode-primary-slot spare`, keeps a spare as a standby does.
    /// `primary_dsn` is where the running transactions a standby's slot creation waits for
    /// are logged. Nothing is done outside `term`: an agent whose lease ran out must not
    /// create, move or drop slots under the one that took over.
    pub async fn tend_other_hosts(self: Arc<Self>, primary_dsn: String, term: Arc<Term>) {
        let mut problems: Vec<Option<String>> = vec![None; self.hosts.len()];
        let mut sessions: Vec<Option<SqlSession>> = (0..self.hosts.len()).map(|_| None).collect();
        let mut tick = tokio::time::interval(SPARE_INTERVAL);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !term.valid() {
                continue;
            }
            let hosts = problems.iter_mut().zip(sessions.iter_mut()).enumerate();
            for (host, (known, session)) in hosts {
                // A tick may outlast the lease: nothing is done for a term that ended.
                if !term.valid() {
                    break;
                }
                let tend = self.tend(host, session, &primary_dsn);
                let problem = match tokio::time::timeout(TEND_TIMEOUT, tend).await {
                    Ok(Ok(false)) => continue, // not a spare now: nothing to report
                    Ok(Ok(true)) => None,
                    Ok(Err(error)) => Some(format!("{error:#}")),
                    Err(_) => Some(format!("no answer within {TEND_TIMEOUT:?}")),
                };
                if problem.is_some() {
                    *session = None;
                    self.spares[host].store(false, Ordering::Relaxed);
                }

                if problem != *known {
                    let name = &self.hosts[host];
                    match &problem {
                        Some(error) => {
                            tracing::warn!(host = %name, error = %error, "cannot keep a spare replication slot on a --decode-from host: a move of the stream there resets every cache node")
                        }
                        None => {
                            tracing::info!(host = %name, "a --decode-from host is tended again")
                        }
                    }
                }
                *known = problem;
            }
        }
    }

    /// Keeps `host`'s spare slot (a standby, or a primary with `--decode-primary-slot
    /// spare`) or drops its idle slot (another primary), over its `session` (opened if need
    /// be), unless the stream is decoded there or looking for a host to move to (`Ok(false)`:
    /// nothing was tended). With the stream decoded on a primary, a standby whose spare is
    /// caught up and that follows the stream's history is where it should move.
    async fn tend(
        &self,
        host: usize,
        session: &mut Option<SqlSession>,
        primary_dsn: &str,
    ) -> anyhow::Result<bool> {
        let Some(spare) = self.is_spare(host) else {
            // Moving: nothing is tended until the stream runs again.
            return Ok(false);
        };
        if !spare {
            *session = None;
            return Ok(false);
        }
        let sql = match session {
            Some(sql) => sql,
            None => session.insert(connect::connect_host(&self.dsn, host, SPARE_SESSION).await?),
        };
        let sql = &*sql;
        let primary = self.is_primary(sql).await?;
        if primary && !self.primary_spare {
            self.spares[host].store(false, Ordering::Relaxed);
            if database::drop_idle_slot(sql, &self.slot).await? {
                tracing::warn!(host = %self.hosts[host], slot = %self.slot,
                    "dropped the replication slot on a --decode-from host that is a primary the stream is not decoded on (it kept that server's WAL; --decode-primary-slot spare keeps one there instead)");
            }
            return Ok(true);
        }
        database::require_decoding_server(&self.primary, sql).await?;
        self.ensure_spare_slot(host, sql, primary, primary_dsn)
            .await?;
        self.advance_spare(host, sql, primary).await?;
        Ok(true)
    }

    /// Creates the spare slot on `host` (`sql`; a `primary`) if it has none, or only one
    /// the stream cannot use: lost, or on a primary a failover slot (`txcache setup`'s),
    /// which standbys synchronizing slots would copy over the names their own slots need.
    async fn ensure_spare_slot(
        &self,
        host: usize,
        sql: &SqlSession,
        primary: bool,
        primary_dsn: &str,
    ) -> anyhow::Result<()> {
        let found = database::find_slot(sql, &self.slot).await?;
        if let Some(state) = &found {
            if !(state.lost || (primary && state.failover)) {
                return Ok(());
            }
            if !database::drop_idle_slot(sql, &self.slot).await? {
                bail!(
                    "replication slot {:?} there is in use by another process: the agent \
                     cannot replace it with its spare (a lost slot, or a failover one on a \
                     primary)",
                    self.slot
                );
            }
        }
        let primary_session = connect_sql(primary_dsn, SPARE_SESSION).await?;
        // The creation waits for the primary's running transactions to end; cut off by the
        // tending's timeout, the server finishes it alone (a slot confirmed nowhere
        // meanwhile, which counts as unusable). With a session to the primary the slot is
        // never a failover one.
        let at = database::create_slot(sql, &self.slot, Some(&primary_session)).await?;
        tracing::info!(host = %self.hosts[host], role = role(primary), position = %at,
            "created a spare replication slot on a --decode-from host: the stream can move there without resetting the cache nodes");
        Ok(())
    }

    /// Advances `host`'s spare slot (`sql`; a `primary`) to what the stream acknowledged,
    /// and records whether it is usable.
    async fn advance_spare(
        &self,
        host: usize,
        sql: &SqlSession,
        primary: bool,
    ) -> anyhow::Result<()> {
        let acknowledged = Timestamp(self.acknowledged.load(Ordering::Relaxed));
        if acknowledged == Timestamp::ZERO {
            return Ok(());
        }
        database::advance_slot(sql, &self.slot, acknowledged).await?;
        let Some(spare) = database::find_slot(sql, &self.slot).await? else {
            self.spares[host].store(false, Ordering::Relaxed);
            return Ok(());
        };
        // Usable: on the stream's history, the stream can resume there without skipping
        // what it acknowledged (read again: a restart of the stream may have lowered it).
        let now = Timestamp(self.acknowledged.load(Ordering::Relaxed));
        let on_history = self.follows_stream(sql, host).await?;
        let usable = on_history
            && !spare.lost
            && spare.confirmed != Timestamp::ZERO
            && spare.confirmed <= now;
        if self.spares[host].swap(usable, Ordering::Relaxed) != usable {
            // Whether a failure moves the stream after `--decode-spare-after` or only after
            // `--decode-failover-after` turns on this: say when and why it changes.
            tracing::info!(host = %self.hosts[host], role = role(primary), usable, on_history,
                lost = spare.lost, spare_position = %spare.confirmed, acknowledged = %now,
                "the spare slot on a --decode-from host changed usability");
        }
        // A standby's spare caught up, and on the stream's history: a move there off a
        // primary repeats and skips nothing (read now: the stream may have moved since the
        // tick began). A primary's spare is only for when the standbys fail.
        let caught_up = on_history && !spare.lost && spare.confirmed == now;
        if caught_up && !primary && self.on_primary.load(Ordering::Relaxed) {
            if let Ok(mut current) = self.current.try_lock() {
                current.wanted.get_or_insert(host);
            }
        }
        Ok(())
    }

    /// Whether `host` holds a spare: the stream is decoded elsewhere. `None` while the
    /// stream is failing or choosing a host (the state is locked for as long as that
    /// takes: connections to hosts that may not answer), when the spares stay as they are.
    fn is_spare(&self, host: usize) -> Option<bool> {
        let current = self.current.try_lock().ok()?;
        if current.failing_since.is_some() {
            return None;
        }
        if current.host == Some(host) {
            self.spares[host].store(false, Ordering::Relaxed);
        }
        Some(current.host.is_some_and(|current| current != host))
    }
}

/// The application name of the sessions that tend the spare slots.
const SPARE_SESSION: &str = "txcache-agent spare slot";

/// How a log line names a host's role.
fn role(primary: bool) -> &'static str {
    if primary {
        "primary"
    } else {
        "standby"
    }
}

/// How often the spare slots are advanced.
const SPARE_INTERVAL: Duration = Duration::from_secs(1);

/// How long one host may take to be tended before the next is.
const TEND_TIMEOUT: Duration = Duration::from_secs(15);

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

/// How good a move of the stream to a host would be, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostRank {
    /// A standby whose slot is on the stream's history and not ahead of what the stream
    /// acknowledged: the stream resumes there without resetting a node.
    UsableSlot,
    /// A primary whose spare slot (`--decode-primary-slot spare`) is on the stream's history
    /// and not ahead of what it acknowledged: no node reset, but decoding on the primary.
    PrimarySpare,
    /// A standby whose slot is not ahead, on another history (a failover's new timeline):
    /// the stream follows it if it continues the old one past what was delivered, else
    /// rewinds every node.
    SlotBehind,
    /// A standby whose slot is ahead (every node reset), or the host that failed.
    OtherSlot,
    /// A standby without a slot: one is created there, and every node reset.
    NoSlot,
    /// A primary without a usable spare slot.
    Primary,
}

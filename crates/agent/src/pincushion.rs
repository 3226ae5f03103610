//! The pincushion: certified snapshots that read-only transactions may run at.
//!
//! A few long READ COMMITTED *pinner sessions* export one snapshot per statement; each
//! statement also writes a fence message, and the pin is certified when the stream decodes
//! that fence (see `certify.rs`); an unclean snapshot is discarded and another taken.
//! A new pin is taken every `pin_interval` when something committed since the newest; while
//! nothing commits, heartbeats move the newest pin's "current as of" time forward.
//!
//! Every pin holds the primary's vacuum horizon, so a pin lives only while it is of use: the
//! newest always; an older one `lease` after it stopped being current, renewed for another
//! `lease` each time a library reports a transaction ran at it (`PINS used`), but never
//! longer than `max_staleness + lease` after it stopped being current (no library may choose
//! it then). New pins go to a fresh session every `rotation` (at most `MAX_SESSIONS` live),
//! and a session's transaction ends when its last pin expires; its connection waits for a
//! later rotation, which begins a new transaction on it rather than connecting again. When
//! no pin at all was used or asked for (`PIN`) for a `lease`, the pinner lets every pin go
//! and takes none until the next `PIN`: a primary nobody reads through txcache has its
//! vacuum horizon held by nothing. `PIN`s queued while a pin is taken share the next one.
//!
//! Without DDL event triggers (`--ddl-tracking fingerprint`) nothing reports a schema change,
//! so each export statement also computes the catalog fingerprint in its snapshot, and a
//! clean pin is listed only once the check admits it (`fingerprint_check.rs`). Each pin also
//! carries the fence the pinner's previous statement wrote ([`Pin::after`]): with it a library
//! tells that a pin was taken after one of its queries ended.
//!
//! The same machinery pins on hot standbys (`--standby`, [`PinSource::Standby`]; one
//! pincushion per standby): there a snapshot is taken with replay paused, and placed on the
//! stream by its replay position instead of a fence (`standby.rs`). Standby pins are taken
//! only at the ticks (`PIN` is the primary's), kept and let go by the same rules, and a
//! standby that refuses lists none until it answers again.

use crate::assemble::unix_micros_now;
use crate::certify::{Certification, Snapshot};
use crate::connect::{answer_timeout, connect_sql, NoAnswer, SqlSession, HOST_ANSWER_TIMEOUT};
use crate::database::DatabaseIdentity;
use crate::fingerprint_check::FingerprintCheck;
use crate::standby::{self, Health, Refusal, StandbySnapshot};
use crate::tracker::{Progress, ReplayPoint, StreamTracker};
use anyhow::{bail, Context as _};
use pgwire_replication::Lsn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::Instrument as _;
use txcache_model::{Timestamp, WallClock};

/// The prefix of fence messages.
pub const FENCE_PREFIX: &str = "txcache-fence";

/// How long a fence may take to be decoded before the pin is given up.
const FENCE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most pins listed; the oldest go first beyond it.
const MAX_PINS: usize = 10_000;

/// Attempts at a clean snapshot before a fresh-pin request fails.
const MAX_ATTEMPTS: usize = 50;

/// Snapshots taken on a standby per tick when none can be placed on the stream: each
/// pauses replay, and the next tick comes soon enough.
const STANDBY_ATTEMPTS: usize = 2;

/// Most pinner sessions (PostgreSQL connections) at once: while this many hold pins in use,
/// new pins go to the newest session instead of a fresh one.
const MAX_SESSIONS: usize = 8;

/// A certified snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The commit point it shows: the LSN of the last commit it sees.
    pub ts: Timestamp,
    /// `SET TRANSACTION SNAPSHOT` takes this.
    pub snapshot_id: String,
    /// The snapshot's contents, `pg_current_snapshot()` of the exporting statement
    /// (`xmin:xmax:xip,…`): an importer compares it with what it imported, because after a
    /// PostgreSQL restart another snapshot can carry the same id.
    pub snapshot: String,
    /// The wall-clock time up to which it is known to be the current state.
    pub current_as_of: WallClock,
    /// When a library last reported a transaction that ran at it.
    pub last_used: Option<WallClock>,
    /// With `--ddl-tracking fingerprint`, the catalog fingerprint its snapshot shows
    /// (`txcache.schema_fingerprint(true)`, computed by the exporting statement); `None`
    /// otherwise.
    pub fingerprint: Option<String>,
    /// The LSN the fence of the pinner's previous export statement returned, whatever
    /// became of that one (unclean, withheld or listed); `None` for the first statement
    /// since the pinner started. The pinner runs its statements one after another, so this
    /// pin's snapshot was taken after that fence was written: a library that read
    /// `pg_current_wal_insert_lsn()` = L after a query and sees `L < after` knows the pin's
    /// snapshot was taken after its query ended. Sent with `--ddl-tracking fingerprint`
    /// only.
    pub after: Option<Timestamp>,
    session: u64,
}

/// Settings of the pincushion.
#[derive(Clone, Debug)]
pub struct PinSettings {
    /// How often a new pin is taken when something committed.
    pub pin_interval: Duration,
    /// The largest staleness any library uses.
    pub max_staleness: Duration,
    /// How long a pin stays importable after it stopped being current or was last used.
    pub lease: Duration,
    /// Whether pins are taken only when asked for (`--primary-pins on-demand`): none at the
    /// ticks or after a barrier, and none kept only for being the newest.
    pub on_demand: bool,
}

impl PinSettings {
    /// Whether `pin`, no longer the newest, is still kept at `now`: within `lease` of when
    /// it stopped being current or was last used, and within `max_staleness + lease` of
    /// the former. Pinning on demand, one nobody used goes two pin intervals (at most a
    /// lease) after it stopped being current: the agent's own (the schema check's) are
    /// read at once, and none is kept for a library that might want it.
    pub fn keeps(&self, pin: &Pin, now: WallClock) -> bool {
        let lease = micros(self.lease);
        let unused = if self.on_demand {
            micros(self.pin_interval * 2).min(lease)
        } else {
            lease
        };
        let since_current = now.0.saturating_sub(pin.current_as_of.0);
        let since_used = pin.last_used.map(|used| now.0.saturating_sub(used.0));
        since_current < micros(self.max_staleness) + lease
            && (since_current < unused || since_used.is_some_and(|since| since < lease))
    }

    /// How often new pins move to a fresh session: a session's horizon is its first pin,
    /// held until its last pin expires, so sessions turn over about twice per lease.
    fn rotation(&self) -> Duration {
        (self.lease / 2).max(Duration::from_secs(1))
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Counters of pin certification.
#[derive(Debug, Default)]
pub struct PinStats {
    /// Pins certified clean.
    pub certified: AtomicU64,
    /// Snapshots discarded as unclean.
    pub unclean: AtomicU64,
    /// Snapshots discarded because a transaction running at startup had not finished.
    pub below_floor: AtomicU64,
}

impl PinStats {
    /// The counters now.
    pub fn read(&self) -> PinCounts {
        // Destructured whole: a counter added above is a compile error here until it is read.
        let Self {
            certified,
            unclean,
            below_floor,
        } = self;
        PinCounts {
            certified: certified.load(Ordering::Relaxed),
            unclean: unclean.load(Ordering::Relaxed),
            below_floor: below_floor.load(Ordering::Relaxed),
        }
    }
}

/// The pinner's counters, read at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct PinCounts {
    /// Pins certified clean.
    pub certified: u64,
    /// Snapshots discarded as unclean.
    pub unclean: u64,
    /// Snapshots discarded below the floor.
    pub below_floor: u64,
}

/// A standby's pins and counters, read at one moment (the metrics' per-standby series).
#[derive(Clone, Debug, Default)]
pub struct StandbyCounts {
    /// Its `--standby` name.
    pub name: String,
    /// Pins listed.
    pub pins: u64,
    /// Snapshots placed on the stream: pins taken.
    pub certified: u64,
    /// Snapshots discarded: their replay position could not be placed on the stream.
    pub unplaced: u64,
}

/// Where a pincushion's snapshots come from.
pub enum PinSource {
    /// The primary `--dsn` names: fenced snapshots, certified against the decoded commits;
    /// with `fingerprints` (`--ddl-tracking fingerprint`) each clean pin's catalog
    /// fingerprint is checked before it is listed.
    Primary {
        /// The check of every clean pin's catalog, without DDL triggers (boxed: it holds
        /// a session, and the other variant is small).
        fingerprints: Option<Box<FingerprintCheck>>,
    },
    /// A hot standby of it (`--standby NAME=CONNINFO`): snapshots taken with replay paused,
    /// placed on the stream by their replay position.
    Standby {
        /// Its `--standby` name.
        name: String,
        /// The primary's database: the standby must be a replica of it.
        primary: DatabaseIdentity,
    },
}

/// A request for a pin taken now: where to answer, and whether a library asked (its pin is
/// then in use, and counts as demand).
struct FreshRequest {
    reply: oneshot::Sender<anyhow::Result<Pin>>,
    library: bool,
}

/// The handle libraries' requests go through.
pub struct Pincushion {
    pins: Mutex<Vec<Pin>>,
    tracker: Arc<StreamTracker>,
    requests: mpsc::Sender<FreshRequest>,
    /// When a library last used a pin or asked for one (unix µs): without demand for a
    /// lease, the pinner holds none.
    demand: AtomicU64,
    /// The standby's name, `None` for the primary's pincushion.
    standby: Option<String>,
    /// Wakes a standby pinner that let its pins go when a library asks for a pin again.
    wake: Notify,
    /// Certification counters.
    pub stats: PinStats,
    /// Standby snapshots discarded: their replay position could not be placed.
    unplaced: AtomicU64,
}

impl Pincushion {
    /// Starts the pinner task taking snapshots from `source` over `dsn`.
    pub fn start(
        dsn: String,
        settings: PinSettings,
        tracker: Arc<StreamTracker>,
        source: PinSource,
    ) -> Arc<Self> {
        let (requests, receiver) = mpsc::channel(64);
        let (fingerprints, standby) = match source {
            PinSource::Primary { fingerprints } => (fingerprints.map(|check| *check), None),
            PinSource::Standby { name, primary } => {
                (None, Some(StandbyPinning::new(name, primary, &dsn)))
            }
        };
        let name = standby
            .as_ref()
            .map(|standby| standby.health.name().to_owned());
        let pincushion = Arc::new(Self {
            pins: Mutex::new(Vec::new()),
            tracker: Arc::clone(&tracker),
            requests,
            demand: AtomicU64::new(unix_micros_now()),
            standby: name.clone(),
            wake: Notify::new(),
            stats: PinStats::default(),
            unplaced: AtomicU64::new(0),
        });
        let pinner = Pinner {
            dsn,
            settings,
            tracker,
            cushion: Arc::clone(&pincushion),
            fingerprints,
            standby,
            resting: false,
            sessions: Vec::new(),
            idle: Vec::new(),
            next_pin: 1,
            next_session: 1,
            last_fence: None,
        };
        // A standby pinner's every log line names its standby.
        let span = match &name {
            Some(name) => tracing::info_span!("standby", name = %name),
            None => tracing::Span::none(),
        };
        tokio::spawn(pinner.run(receiver).instrument(span));
        pincushion
    }

    /// The standby's `--standby` name; `None` for the primary's pincushion.
    pub fn standby_name(&self) -> Option<&str> {
        self.standby.as_deref()
    }

    /// A standby pincushion's pins and counters (`None` for the primary's).
    pub fn standby_counts(&self) -> Option<StandbyCounts> {
        let name = self.standby.clone()?;
        Some(StandbyCounts {
            name,
            pins: self.pin_count() as u64,
            certified: self.stats.certified.load(Ordering::Relaxed),
            unplaced: self.unplaced.load(Ordering::Relaxed),
        })
    }

    /// The live pins, oldest first, none older than the newest barrier (a schema change or
    /// a `TRUNCATE`): a transaction begun at such a pin could read a truncated table empty,
    /// or an old state under new definitions. Transactions already running at one are the
    /// library's to guard.
    pub fn pins(&self) -> Vec<Pin> {
        let listed = self.listed();
        let progress = self.tracker.progress();
        self.lock()
            .iter()
            .filter(|pin| listed(pin))
            .map(|pin| current_now(pin, &progress))
            .collect()
    }

    /// How many pins [`Pincushion::pins`] lists now, without copying them.
    pub fn pin_count(&self) -> usize {
        let listed = self.listed();
        self.lock().iter().filter(|pin| listed(pin)).count()
    }

    /// Whether a pin is listed now: not older than the newest barrier. The barrier is read
    /// here, before the caller takes the pins' lock, so the two locks are never nested.
    fn listed(&self) -> impl Fn(&Pin) -> bool {
        let barrier = self.tracker.newest_barrier();
        move |pin| pin.ts >= barrier
    }

    /// Renews the lease of the pins at the commit points in `used` (a library's
    /// transactions ran at them).
    pub fn note_used(&self, used: &[Timestamp]) {
        if used.is_empty() {
            return;
        }
        let now = WallClock(unix_micros_now());
        self.demand.store(now.0, Ordering::Relaxed);
        for pin in self.lock().iter_mut().filter(|pin| used.contains(&pin.ts)) {
            pin.last_used = Some(now);
        }
    }

    /// Notes that a library wants pins now (its `PIN`): a standby pincushion that let its
    /// pins go for want of use takes one at once, instead of waiting for the next use.
    pub fn note_demand(&self) {
        self.demand.store(unix_micros_now(), Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// A pin taken and certified now (the library's ★); the primary's only.
    pub async fn fresh(&self) -> anyhow::Result<Pin> {
        self.request(true).await
    }

    /// A pin taken and certified now for the agent's own use (the schema check): unlike
    /// [`Pincushion::fresh`] it is no library's demand and is not marked used, so pins
    /// still go once libraries stop reading.
    pub async fn take_now(&self) -> anyhow::Result<Pin> {
        self.request(false).await
    }

    async fn request(&self, library: bool) -> anyhow::Result<Pin> {
        if let Some(name) = &self.standby {
            bail!("standby {name}: pins are taken on demand on the primary only");
        }
        if library {
            self.demand.store(unix_micros_now(), Ordering::Relaxed);
        }
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(FreshRequest { reply, library })
            .await
            .context("the pinner has stopped")?;
        answer.await.context("the pinner dropped the request")?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pin>> {
        self.pins
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct PinnerSession {
    id: u64,
    sql: SqlSession,
    opened: Instant,
}

/// What a standby's pinner knows of it beyond the primary's.
struct StandbyPinning {
    /// The primary's database, which it must be a replica of.
    primary: DatabaseIdentity,
    /// How it answered last (each change is logged once); its name.
    health: Health,
    /// How long each call there may wait for its answer: its conninfo's `connect_timeout`.
    answer_wait: Duration,
    /// An export got no answer: replay is resumed before the next one.
    resume_owed: bool,
}

impl StandbyPinning {
    fn new(name: String, primary: DatabaseIdentity, dsn: &str) -> Self {
        Self {
            primary,
            health: Health::new(&name),
            answer_wait: answer_timeout(dsn).unwrap_or(HOST_ANSWER_TIMEOUT),
            resume_owed: false,
        }
    }
}

/// The task that owns the pinner sessions.
struct Pinner {
    dsn: String,
    settings: PinSettings,
    tracker: Arc<StreamTracker>,
    cushion: Arc<Pincushion>,
    /// With `--ddl-tracking fingerprint`, the check every clean pin passes to be listed.
    fingerprints: Option<FingerprintCheck>,
    /// For a standby's pincushion: the standby.
    standby: Option<StandbyPinning>,
    /// Whether it let every pin go for want of use (a standby's pinner then wakes at the
    /// next `PIN`).
    resting: bool,
    sessions: Vec<PinnerSession>,
    /// Connections of sessions whose pins all expired, their transaction ended: the next
    /// rotation begins its transaction on one of them instead of connecting again.
    idle: Vec<SqlSession>,
    next_pin: u64,
    next_session: u64,
    /// The fence the last export statement returned (each pin's [`Pin::after`]).
    last_fence: Option<Timestamp>,
}

/// What one export statement returned.
struct Export {
    /// The pin's number, named in its fence.
    id: u64,
    session: u64,
    /// The wall-clock time before the statement: the pin is current as of then.
    taken_at: WallClock,
    snapshot: Snapshot,
    snapshot_text: String,
    snapshot_id: String,
    fence: Timestamp,
    /// The timeline the fence was written on.
    timeline: Option<u32>,
    fingerprint: Option<String>,
    after: Option<Timestamp>,
}

impl Export {
    /// The pin it makes once certified clean at `ts`.
    fn into_pin(self, ts: Timestamp) -> Pin {
        Pin {
            ts,
            snapshot_id: self.snapshot_id,
            snapshot: self.snapshot_text,
            current_as_of: self.taken_at,
            last_used: None,
            fingerprint: self.fingerprint,
            after: self.after,
            session: self.session,
        }
    }
}

/// The statement that exports a snapshot: its contents, its id, the LSN of its fence
/// (flushed, from PostgreSQL 17 on) and, when `fingerprint`, the catalog fingerprint.
/// `txcache.schema_fingerprint` is STABLE, so it is computed in the statement's snapshot:
/// the exported one.
fn export_statement(server_version_num: u32, fingerprint: bool) -> &'static str {
    // A primary's timeline is the first 8 hex digits of its WAL segments' names. The text
    // is static so that each session prepares it once.
    macro_rules! export {
        ($fence:literal, $fingerprint:literal) => {
            concat!(
                "SELECT pg_current_snapshot()::text, pg_export_snapshot(), ",
                $fence,
                "::text, substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8)",
                $fingerprint
            )
        };
    }
    match (server_version_num >= 170_000, fingerprint) {
        (true, false) => export!("pg_logical_emit_message(false, $1, $2, true)", ""),
        (true, true) => export!(
            "pg_logical_emit_message(false, $1, $2, true)",
            ", txcache.schema_fingerprint(true)"
        ),
        (false, false) => export!("pg_logical_emit_message(false, $1, $2)", ""),
        (false, true) => export!(
            "pg_logical_emit_message(false, $1, $2)",
            ", txcache.schema_fingerprint(true)"
        ),
    }
}

impl Pinner {
    async fn run(mut self, mut requests: mpsc::Receiver<FreshRequest>) {
        let mut ticker = tokio::time::interval(self.settings.pin_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                request = requests.recv() => match request {
                    Some(first) => self.answer_fresh(first, &mut requests).await,
                    None => return,
                },
                _ = ticker.tick() => {
                    if let Err(error) = self.tick().await {
                        tracing::warn!(error = format!("{error:#}"), "pinner: could not take a pin; retrying");
                    }
                }
                // Pins older than a barrier are no longer listed: offer a newer one at once
                // (unless nobody wants pins: the next PIN takes one). The primary's only: a
                // standby replays the barrier later, and its next tick pins past it.
                _ = self.tracker.barrier_raised(), if self.standby.is_none() && !self.settings.on_demand => {
                    if self.unwanted() {
                        continue;
                    }
                    if let Err(error) = self.take_certified().await {
                        tracing::warn!(error = format!("{error:#}"), "pinner: could not take a pin after a barrier; retrying at the next tick");
                    }
                }
                // A library asks for pins again: a resting standby pinner pins at once.
                _ = self.cushion.wake.notified(), if self.resting => {
                    if let Err(error) = self.tick().await {
                        tracing::warn!(error = format!("{error:#}"), "pinner: could not take a pin; retrying");
                    }
                }
            }
        }
    }

    /// Answers `first` and every request queued behind it with one pin: each was made
    /// before the snapshot is taken, so the pin is fresh for all of them. A burst of
    /// read-your-writes transactions costs the database one export, not one per request,
    /// and none of them waits behind the others' certifications.
    async fn answer_fresh(
        &mut self,
        first: FreshRequest,
        requests: &mut mpsc::Receiver<FreshRequest>,
    ) {
        let mut batch = vec![first];
        while let Ok(queued) = requests.try_recv() {
            batch.push(queued);
        }
        let result = self.take_certified().await;
        match result {
            Ok(pin) => {
                if batch.iter().any(|request| request.library) {
                    self.cushion.note_used(&[pin.ts]); // asked for, so in use
                }
                for request in batch {
                    let _ = request.reply.send(Ok(pin.clone()));
                }
            }
            Err(error) => {
                let message = format!("{error:#}");
                for request in batch {
                    let _ = request.reply.send(Err(anyhow::anyhow!(message.clone())));
                }
            }
        }
    }

    /// Periodic work: refresh the newest pin, pin again if something committed, expire.
    async fn tick(&mut self) -> anyhow::Result<()> {
        self.resting = self.unwanted();
        if self.resting {
            self.let_go();
            return Ok(());
        }
        self.forget_dead_sessions();
        self.refresh_current();
        let retired = self.expire();
        self.recycle(retired).await;
        let progress = self.tracker.progress();
        let newest = self.cushion.lock().last().map(|pin| pin.ts);
        // Re-pin when something committed, and when the active session is due to rotate
        // (else an idle database would keep one session, and its horizon, forever). Without
        // DDL triggers, at every tick: a schema change alone commits nothing the stream
        // decodes, and only a new pin finds it (and verifies the values libraries hold back).
        let checking = self.fingerprints.is_some();
        let due = newest.is_none_or(|ts| progress.commit > ts) || self.rotation_due() || checking;
        if due && !self.settings.on_demand {
            self.pin_again().await?;
        }
        Ok(())
    }

    /// Takes the tick's new pin: on the primary, certified (or an error); on a standby, one
    /// if it can be placed, and on a refusal none of the standby's pins stay listed.
    async fn pin_again(&mut self) -> anyhow::Result<()> {
        if self.standby.is_none() {
            return self.take_certified().await.map(drop);
        }
        self.take_on_standby().await;
        Ok(())
    }

    /// Drops sessions whose connection ended, and delists their pins: a pin is listed only
    /// while its exporting session lives (else `SET TRANSACTION SNAPSHOT` would fail).
    fn forget_dead_sessions(&mut self) {
        let before = self.sessions.len();
        self.sessions
            .retain(|session| !session.sql.client.is_closed());
        if self.sessions.len() == before {
            return;
        }
        tracing::warn!(
            lost = before - self.sessions.len(),
            "pinner session ended; its pins are withdrawn"
        );
        let alive: Vec<u64> = self.sessions.iter().map(|session| session.id).collect();
        self.cushion
            .lock()
            .retain(|pin| alive.contains(&pin.session));
    }

    fn rotation_due(&self) -> bool {
        self.sessions.len() < MAX_SESSIONS
            && self
                .sessions
                .last()
                .is_some_and(|session| session.opened.elapsed() > self.settings.rotation())
    }

    /// While nothing committed after the newest pin, it is current as of the last heartbeat.
    fn refresh_current(&self) {
        let progress = self.tracker.progress();
        let mut pins = self.cushion.lock();
        if let Some(newest) = pins.last_mut() {
            if progress.commit <= newest.ts && progress.heartbeat > newest.ts {
                newest.current_as_of = newest.current_as_of.max(progress.heartbeat_time);
            }
        }
    }

    /// Whether no library used a pin or asked for one for a lease.
    fn unwanted(&self) -> bool {
        let demand = self.cushion.demand.load(Ordering::Relaxed);
        unix_micros_now().saturating_sub(demand) >= micros(self.settings.lease)
    }

    /// Lets every pin and pinner session go (nobody uses them; the next `PIN` takes one).
    fn let_go(&mut self) {
        let pins = self.cushion.lock().len();
        if pins > 0 {
            tracing::debug!(pins, "no pin used for a lease: letting every pin go");
        }
        self.drop_all();
    }

    /// Delists every pin and closes every pinner connection (their transactions end).
    fn drop_all(&mut self) {
        self.cushion.lock().clear();
        self.sessions.clear();
        self.idle.clear();
    }

    /// Forgets pins no longer kept ([`PinSettings::keeps`]) and returns the sessions that
    /// hold none (but the active one).
    fn expire(&mut self) -> Vec<PinnerSession> {
        let now = WallClock(unix_micros_now());
        let mut pins = self.cushion.lock();
        // Pinning at intervals, the newest pin and the session new pins go to are kept
        // whatever their age; on demand, nothing is kept but for its use.
        let on_demand = self.settings.on_demand;
        let newest = (!on_demand).then(|| pins.len().saturating_sub(1));
        let mut index = 0;
        pins.retain(|pin| {
            index += 1;
            Some(index - 1) == newest || self.settings.keeps(pin, now)
        });
        // A flood of fresh-pin requests must not grow the list without bound.
        let excess = pins.len().saturating_sub(MAX_PINS);
        pins.drain(..excess);
        let active = self.sessions.last().map(|session| session.id);
        let active = active.filter(|_| !on_demand);
        let (kept, retired) = std::mem::take(&mut self.sessions)
            .into_iter()
            .partition(|session| {
                Some(session.id) == active || pins.iter().any(|pin| pin.session == session.id)
            });
        self.sessions = kept;
        retired
    }

    /// Ends the transaction of each `retired` session, which releases its snapshots and
    /// with them the vacuum horizon they held, and keeps its connection for a later
    /// rotation (up to `MAX_SESSIONS` of them): a new backend costs the server a few
    /// milliseconds of CPU, once per rotation. A connection that cannot end its
    /// transaction is closed.
    async fn recycle(&mut self, retired: Vec<PinnerSession>) {
        let wait = self.answer_wait();
        let mut hung = false;
        for session in retired {
            if self.idle.len() >= MAX_SESSIONS {
                break;
            }
            if hung {
                session.sql.cut(); // the server hangs: one wait is enough
                continue;
            }
            let ended = tokio::time::timeout(wait, session.sql.client.batch_execute("COMMIT"));
            match ended.await {
                Ok(Ok(())) => self.idle.push(session.sql),
                Ok(Err(error)) => tracing::debug!(
                    error = format!("{error:#}"),
                    "pinner session could not end its transaction; closing it"
                ),
                Err(_) => {
                    tracing::debug!(?wait, "pinner session did not end its transaction in time; closing it and the other retired ones");
                    session.sql.cut();
                    hung = true;
                }
            }
        }
    }

    /// Takes snapshots until one certifies clean.
    async fn take_certified(&mut self) -> anyhow::Result<Pin> {
        self.forget_dead_sessions();
        for _ in 0..MAX_ATTEMPTS {
            if let Some(pin) = self.take_one().await? {
                self.cushion.stats.certified.fetch_add(1, Ordering::Relaxed);
                self.cushion.lock().push(pin.clone());
                return Ok(pin);
            }
        }
        bail!("no clean snapshot in {MAX_ATTEMPTS} attempts")
    }

    /// One snapshot taken: the pin, if it certifies clean and shows the schema the caches
    /// know.
    async fn take_one(&mut self) -> anyhow::Result<Option<Pin>> {
        let export = self.export().await?;
        let Some(pin) = self.certify(export).await? else {
            return Ok(None);
        };
        Ok(self.schema_known(&pin).await?.then_some(pin))
    }

    /// Runs an export statement in the session new pins go to.
    async fn export(&mut self) -> anyhow::Result<Export> {
        let id = self.next_pin;
        self.next_pin += 1;
        let index = self.session_index().await?;
        let session = &self.sessions[index];
        let checked = self.fingerprints.is_some();
        let statement = export_statement(session.sql.server_version_num, checked);
        let taken_at = WallClock(unix_micros_now());
        let row = session
            .sql
            .query_one_prepared(statement, &[&FENCE_PREFIX, &id.to_string()])
            .await?;
        let fence = Timestamp(Lsn::parse(row.get::<_, &str>(2))?.as_u64());
        let after = self.last_fence.replace(fence);
        let snapshot_text: String = row.get(0);
        let timeline = u32::from_str_radix(row.get::<_, &str>(3), 16).ok();
        let fingerprint = checked.then(|| row.try_get(4)).transpose();
        let fingerprint = fingerprint.context("the export statement gave no fingerprint")?;
        Ok(Export {
            id,
            session: session.id,
            taken_at,
            snapshot: Snapshot::parse(&snapshot_text)?,
            snapshot_text,
            snapshot_id: row.get(1),
            fence,
            timeline,
            fingerprint,
            after,
        })
    }

    /// The pin `export` makes, once its fence is decoded, if its snapshot is clean.
    async fn certify(&self, export: Export) -> anyhow::Result<Option<Pin>> {
        let (id, fence) = (export.id, export.fence);
        let verdict = self
            .tracker
            .certify(fence, export.timeline, &export.snapshot, FENCE_TIMEOUT)
            .await;
        let Some(verdict) = verdict else {
            bail!("the fence of pin {id} (at {fence}) was not decoded within {FENCE_TIMEOUT:?}: is the stream running?");
        };
        let stats = &self.cushion.stats;
        Ok(match verdict {
            Certification::Clean(ts) => Some(export.into_pin(ts)),
            Certification::Unclean { missing, visible } => {
                stats.unclean.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%missing, %visible, "pin discarded: its snapshot is not a prefix of commit order");
                None
            }
            Certification::BelowFloor => {
                stats.below_floor.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
                None
            }
        })
    }

    /// Whether the clean `pin` shows the schema the caches know: always with the DDL
    /// triggers, which report every change; without them, as the fingerprint check finds
    /// ([`FingerprintCheck::admits`], which announces a change it finds).
    async fn schema_known(&mut self, pin: &Pin) -> anyhow::Result<bool> {
        let Some(check) = &mut self.fingerprints else {
            return Ok(true);
        };
        let fingerprint = pin.fingerprint.as_deref();
        let fingerprint = fingerprint.context("a pin without its catalog fingerprint")?;
        check.admits(pin.ts, fingerprint).await
    }

    /// Takes a pin on the standby: up to [`STANDBY_ATTEMPTS`] snapshots until one is placed
    /// on the stream. A refusal lets every pin of the standby go (retried at the next tick).
    async fn take_on_standby(&mut self) {
        let mut last_replay = None;
        for _ in 0..STANDBY_ATTEMPTS {
            match self.standby_pin().await {
                Ok((_, Some(pin))) => return self.listed_standby_pin(pin),
                Ok((replay, None)) => {
                    self.cushion.unplaced.fetch_add(1, Ordering::Relaxed);
                    last_replay = Some(replay);
                }
                Err(refusal) => return self.standby_refused(refusal).await,
            }
        }
        if let (Some(standby), Some(replay)) = (&mut self.standby, last_replay) {
            standby.health.unplaced(replay);
        }
    }

    /// One snapshot taken on the standby, and the pin it makes once placed on the stream
    /// (`None` when it cannot be: the snapshot is discarded).
    async fn standby_pin(&mut self) -> Result<(Timestamp, Option<Pin>), Refusal> {
        let (session, exported) = self.standby_export().await?;
        let replay = exported.replay;
        let Some(timeline) = self.tracker.timeline() else {
            return Ok((replay, None)); // the stream has not connected yet: nothing is placed
        };
        standby::check_timeline(exported.receiver, timeline)?;
        let placed = self.tracker.replay_point(replay, FENCE_TIMEOUT).await;
        let pin = placed.map(|point| standby_pin(exported, point, session));
        if pin.is_none() {
            tracing::debug!(%replay, "standby snapshot discarded: its replay position is not placed on the stream");
        }
        Ok((replay, pin))
    }

    /// A snapshot exported on the standby, and the session holding it. A standby that
    /// accepted the connection and hangs (stopped, overloaded, cut off) answers nothing:
    /// each call waits at most its `connect_timeout` (the export also the time
    /// `txcache.standby_snapshot()` may wait for replay to pause), then fails as
    /// [`Refusal::NoAnswer`].
    async fn standby_export(&mut self) -> Result<(u64, StandbySnapshot), Refusal> {
        let wait = self.answer_wait();
        self.resume_owed_replay(wait).await?;
        let opened = tokio::time::timeout(wait, self.session_index()).await;
        let index = opened
            .map_err(|_| Refusal::NoAnswer(wait))?
            .map_err(Refusal::from_opening)?;
        let sql = &self.sessions[index].sql;
        let exported =
            tokio::time::timeout(wait + standby::REPLAY_PAUSE_DEADLINE, standby::export(sql));
        let exported = exported.await.map_err(|_| Refusal::NoAnswer(wait))??;
        Ok((self.sessions[index].id, exported))
    }

    /// After an export that got no answer (it may have paused replay before the standby
    /// hung), resumes replay before anything else once the standby answers again: else the
    /// next export would take that pause for an operator's and pin where replay stopped.
    async fn resume_owed_replay(&mut self, wait: Duration) -> Result<(), Refusal> {
        if !self
            .standby
            .as_ref()
            .is_some_and(|standby| standby.resume_owed)
        {
            return Ok(());
        }
        let outcome = standby::resume_replay(None, &self.dsn, wait).await;
        if let Err(error) = outcome {
            return Err(match error.downcast::<NoAnswer>() {
                Ok(_) => Refusal::NoAnswer(wait),
                Err(error) => Refusal::Unreachable(error),
            });
        }
        standby::log_resume(&outcome, true);
        if let Some(standby) = &mut self.standby {
            standby.resume_owed = false;
        }
        Ok(())
    }

    /// How long a call to the standby may wait for its answer (the primary's pinner: the
    /// default, which only ending a session's transaction uses).
    fn answer_wait(&self) -> Duration {
        self.standby
            .as_ref()
            .map_or(HOST_ANSWER_TIMEOUT, |standby| standby.answer_wait)
    }

    /// Lists a standby pin placed on the stream, and counts it.
    fn listed_standby_pin(&mut self, pin: Pin) {
        if let Some(standby) = &mut self.standby {
            standby.health.pinning();
        }
        self.cushion.stats.certified.fetch_add(1, Ordering::Relaxed);
        self.cushion.lock().push(pin);
    }

    /// The standby refused: logged once per change with what to do; replay resumed if the
    /// call may have left it paused; every pin and session of the standby let go.
    async fn standby_refused(&mut self, refusal: Refusal) {
        let Some(standby) = &mut self.standby else {
            return;
        };
        let new = standby.health.refused(&refusal);
        if let Refusal::NoAnswer(_) = refusal {
            // The call that hung ran in the newest session (`session_index`): its
            // connection would wait for the answer as long as TCP keeps it. Replay is
            // resumed once the standby answers ([`Self::resume_owed_replay`]).
            if let Some(session) = self.sessions.last() {
                session.sql.cut();
            }
            standby.resume_owed = true;
        } else if refusal.may_have_paused() {
            // The failed call ran in the newest session (`session_index`).
            let session = self.sessions.last().map(|session| &session.sql);
            let outcome = standby::resume_replay(session, &self.dsn, standby.answer_wait).await;
            standby::log_resume(&outcome, new);
        }
        self.drop_all();
    }

    /// The index of the session new pins go to, opening a new one every rotation period.
    async fn session_index(&mut self) -> anyhow::Result<usize> {
        if self.sessions.is_empty() || self.rotation_due() {
            let session = self.open_session().await?;
            self.sessions.push(session);
        }
        Ok(self.sessions.len() - 1)
    }

    async fn open_session(&mut self) -> anyhow::Result<PinnerSession> {
        let id = self.next_session;
        self.next_session += 1;
        while let Some(sql) = self.idle.pop() {
            let begun = sql
                .client
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                .await;
            match begun {
                Ok(()) => {
                    return Ok(PinnerSession {
                        id,
                        sql,
                        opened: Instant::now(),
                    })
                }
                Err(error) => tracing::debug!(
                    error = format!("{error:#}"),
                    "idle pinner connection is gone; trying another"
                ),
            }
        }
        let application = match &self.standby {
            Some(standby) => format!(
                "txcache-agent standby {} pinner {id}",
                standby.health.name()
            ),
            None => format!("txcache-agent pinner {id}"),
        };
        let sql = connect_sql(&self.dsn, &application).await?;
        if let Some(standby) = &self.standby {
            standby::check_identity(&sql, &standby.primary).await?;
        }
        // The session idles in its transaction by design: no timeout may end it.
        sql.client
            .batch_execute("SET idle_in_transaction_session_timeout = 0")
            .await?;
        if sql.server_version_num >= 170_000 {
            sql.client
                .batch_execute("SET transaction_timeout = 0")
                .await?;
        }
        sql.client
            .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            .await?;
        Ok(PinnerSession {
            id,
            sql,
            opened: Instant::now(),
        })
    }
}

/// `pin` as listed now: while the stream decoded no commit after it, it is the current state
/// as of the last heartbeat decoded past it (as [`Pinner::refresh_current`] records at each
/// tick; listed so, a library's staleness is measured from the heartbeat, not the tick).
fn current_now(pin: &Pin, progress: &Progress) -> Pin {
    let mut pin = pin.clone();
    if progress.commit <= pin.ts && progress.heartbeat > pin.ts {
        pin.current_as_of = pin.current_as_of.max(progress.heartbeat_time);
    }
    pin
}

/// The pin a standby's snapshot makes, placed on the stream at `point`.
fn standby_pin(exported: StandbySnapshot, point: ReplayPoint, session: u64) -> Pin {
    Pin {
        ts: point.ts,
        snapshot_id: exported.snapshot_id,
        snapshot: exported.snapshot,
        current_as_of: point.current_as_of,
        last_used: None,
        fingerprint: None,
        after: None,
        session,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000;

    fn settings(max_staleness: u64, lease: u64) -> PinSettings {
        PinSettings {
            pin_interval: Duration::from_secs(1),
            max_staleness: Duration::from_secs(max_staleness),
            lease: Duration::from_secs(lease),
            on_demand: false,
        }
    }

    fn pin(current_as_of: u64, last_used: Option<u64>) -> Pin {
        Pin {
            ts: Timestamp(1),
            snapshot_id: String::new(),
            snapshot: String::new(),
            current_as_of: WallClock(current_as_of * SECOND),
            last_used: last_used.map(|at| WallClock(at * SECOND)),
            fingerprint: None,
            after: None,
            session: 1,
        }
    }

    impl Pincushion {
        /// A pincushion without a pinner task, for tests elsewhere (the commands): its pins
        /// are the ones [`Pincushion::push_for_test`] adds; `standby` names a standby's.
        pub(crate) fn without_pinner(
            tracker: Arc<StreamTracker>,
            standby: Option<&str>,
        ) -> Arc<Self> {
            let (requests, _) = mpsc::channel(1);
            Arc::new(Self {
                pins: Mutex::new(Vec::new()),
                tracker,
                requests,
                demand: AtomicU64::new(0),
                standby: standby.map(str::to_owned),
                wake: Notify::new(),
                stats: PinStats::default(),
                unplaced: AtomicU64::new(0),
            })
        }

        /// Lists `pin` as the newest.
        pub(crate) fn push_for_test(&self, pin: Pin) {
            self.lock().push(pin);
        }

        /// When pins were last wanted (unix µs).
        pub(crate) fn demand_for_test(&self) -> u64 {
            self.demand.load(Ordering::Relaxed)
        }
    }

    #[tokio::test]
    async fn a_standby_pincushion_takes_no_pin_on_demand_but_notes_the_demand() {
        let tracker = Arc::new(StreamTracker::new(Timestamp(100), 0));
        let standby = Pincushion::without_pinner(tracker, Some("replica1"));
        assert_eq!(standby.standby_name(), Some("replica1"));
        let refused = standby.fresh().await.unwrap_err().to_string();
        assert!(refused.contains("on the primary only"), "{refused}");
        assert_eq!(
            standby.demand_for_test(),
            0,
            "fresh() is no standby's demand"
        );
        standby.note_demand();
        assert!(standby.demand_for_test() > 0);
    }

    #[test]
    fn a_standby_pin_is_at_its_replay_point_without_fingerprint_or_fence() {
        let exported = StandbySnapshot {
            replay: Timestamp(600),
            snapshot: "10:10:".to_owned(),
            snapshot_id: "00000004-00000001-1".to_owned(),
            receiver: standby::Receiver::Streams(1),
        };
        let point = ReplayPoint {
            ts: Timestamp(550),
            current_as_of: WallClock(7),
        };
        let pin = standby_pin(exported, point, 3);
        assert_eq!((pin.ts, pin.current_as_of), (Timestamp(550), WallClock(7)));
        assert_eq!((pin.snapshot.as_str(), pin.session), ("10:10:", 3));
        assert_eq!(
            (pin.fingerprint, pin.after, pin.last_used),
            (None, None, None)
        );
    }

    impl Pin {
        /// A pin at `ts` for tests elsewhere (the replies), with `fingerprint` and `after`.
        pub(crate) fn sample(ts: u64, fingerprint: Option<&str>, after: Option<u64>) -> Self {
            Pin {
                ts: Timestamp(ts),
                snapshot_id: "00000003-00000002-1".to_owned(),
                snapshot: "10:12:10".to_owned(),
                current_as_of: WallClock(1_700_000_000_000_000),
                last_used: None,
                fingerprint: fingerprint.map(str::to_owned),
                after: after.map(Timestamp),
                session: 1,
            }
        }
    }

    #[test]
    fn the_export_statement_computes_the_fingerprint_only_when_it_is_checked() {
        let timeline = "substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8)";
        assert_eq!(
            export_statement(160_004, false),
            format!(
                "SELECT pg_current_snapshot()::text, pg_export_snapshot(), \
                 pg_logical_emit_message(false, $1, $2)::text, {timeline}"
            )
        );
        assert_eq!(
            export_statement(180_000, true),
            format!(
                "SELECT pg_current_snapshot()::text, pg_export_snapshot(), \
                 pg_logical_emit_message(false, $1, $2, true)::text, {timeline}, \
                 txcache.schema_fingerprint(true)"
            )
        );
    }

    #[test]
    fn a_pin_nobody_uses_lives_one_lease_after_it_stopped_being_current() {
        let settings = settings(120, 2);
        let unused = pin(100, None);
        assert!(settings.keeps(&unused, WallClock(101 * SECOND)));
        assert!(!settings.keeps(&unused, WallClock(102 * SECOND)));
    }

    #[test]
    fn a_pin_no_commit_followed_is_listed_current_as_of_the_last_heartbeat_past_it() {
        let listed = pin(100, None);
        let progress = |commit: u64, heartbeat: u64| Progress {
            commit: Timestamp(commit),
            commit_time: WallClock(0),
            heartbeat: Timestamp(heartbeat),
            heartbeat_time: WallClock(105 * SECOND),
        };
        let at = |progress: Progress| current_now(&listed, &progress).current_as_of;
        assert_eq!(at(progress(1, 50)), WallClock(105 * SECOND));
        assert_eq!(
            at(progress(2, 50)),
            listed.current_as_of,
            "a commit followed it"
        );
        assert_eq!(
            at(progress(1, 1)),
            listed.current_as_of,
            "no heartbeat past it"
        );
    }

    #[test]
    fn pinning_on_demand_a_pin_nobody_uses_lives_two_intervals_at_most_a_lease() {
        let on_demand = PinSettings {
            on_demand: true,
            ..settings(120, 30)
        };
        let unused = pin(100, None);
        assert!(on_demand.keeps(&unused, WallClock(101 * SECOND)));
        assert!(!on_demand.keeps(&unused, WallClock(102 * SECOND)));
        assert!(on_demand.keeps(&pin(100, Some(125)), WallClock(154 * SECOND)));
        let short_lease = PinSettings {
            on_demand: true,
            ..settings(120, 1)
        };
        assert!(!short_lease.keeps(&unused, WallClock(101 * SECOND)));
    }

    #[test]
    fn each_use_renews_the_lease_up_to_max_staleness_plus_lease() {
        let settings = settings(120, 2);
        assert!(settings.keeps(&pin(100, Some(150)), WallClock(151 * SECOND)));
        assert!(!settings.keeps(&pin(100, Some(150)), WallClock(152 * SECOND)));
        assert!(settings.keeps(&pin(100, Some(221)), WallClock(221 * SECOND)));
        assert!(!settings.keeps(&pin(100, Some(222)), WallClock(222 * SECOND)));
    }

    #[test]
    fn sessions_turn_over_twice_a_lease_but_not_more_than_once_a_second() {
        assert_eq!(settings(120, 30).rotation(), Duration::from_secs(15));
        assert_eq!(settings(120, 0).rotation(), Duration::from_secs(1));
    }
}

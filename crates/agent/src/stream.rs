//! The invalidation stream: logical decoding in, one invalidation per commit out.
//!
//! ```text
//!  slot (pgoutput) ─▶ BEGIN / changes / DDL notice / COMMIT ─▶ Assembler ─▶ Fanout ─▶ nodes
//!                 └─▶ heartbeat message at LSN L ────────────────────────▶ Fanout (N = L)
//!  every 100 ms: acknowledge the slot up to what every connected node has received
//! ```
//! Delivery is at-least-once: after a crash or reconnect the slot resumes at the last
//! acknowledged position and repeats what followed; nodes ignore `ts <= N`.

use crate::assemble::Assembler;
use crate::catalog::Catalog;
use crate::config::{Config, PrimarySlot};
use crate::connect::{
    self, application_name, connect_sql, replication_config, ReplicationHost, SqlSession,
};
use crate::database::{self, SlotState};
use crate::decoding::DecodingServers;
use crate::digest_table::DDL_PREFIX;
use crate::fanout::Fanout;
use crate::heartbeat::HEARTBEAT_PREFIX;
use crate::message::StreamMessage;
use crate::pincushion::FENCE_PREFIX;
use crate::retry::Backoff;
use crate::schema_digests::{SchemaDigests, SCHEMA_PREFIX};
use crate::stream_stats::StreamStats;
use crate::term::Term;
use crate::timeline;
use crate::tracker::StreamTracker;
use anyhow::{bail, Context as _};
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcache_model::{Timestamp, WallClock};

/// The prefix of manual invalidations (`fn.invalidate(...)` in the library): tags, one per
/// line, invalidated at the commit of the transaction that wrote them.
pub const INVALIDATE_PREFIX: &str = "txcache-invalidate";

/// How often the slot is acknowledged.
const ACK_INTERVAL: Duration = Duration::from_millis(100);

/// How long a silent server has to answer a query before it counts as failing. One that
/// answers late is only reconnected to: a move needs its connections to fail too.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The probe of a silent server: whether it is a standby receiving no WAL (no WAL receiver
/// streaming: another standby, streaming, would not be silent). A receiver whose status
/// the role may not see (`pg_read_all_stats`) counts as streaming.
const STRANDED: &str = "SELECT pg_catalog.pg_is_in_recovery() AND NOT EXISTS (
    SELECT FROM pg_catalog.pg_stat_wal_receiver WHERE status IS NULL OR status = 'streaming')";

/// How long a stream session's start may take before the agent checks, again at this
/// interval, that the decoding host (and the primary beside it) still answer new sessions.
const HANG_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// How often, decoding on a standby, the stream asks whether its server was promoted.
const HISTORY_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// The decoding side of the agent.
pub struct Stream {
    config: Config,
    servers: Arc<DecodingServers>,
    fanout: Arc<Fanout>,
    tracker: Arc<StreamTracker>,
    stats: Arc<StreamStats>,
    term: Arc<Term>,
    schema_digests: Arc<SchemaDigests>,
    assembler: Assembler,
    catalog: Catalog,
    acknowledged: Timestamp,
    /// The end of the WAL as of the last keepalive seen between transactions.
    idle_end: Option<Timestamp>,
}

impl Stream {
    /// A stream decoded on one of `servers`, feeding `fanout`, recording into `tracker` (and
    /// each commit's schema digest into `schema_digests`) and counting into `stats`, for as
    /// long as `term` is valid.
    pub fn new(
        config: Config,
        servers: Arc<DecodingServers>,
        fanout: Arc<Fanout>,
        tracker: Arc<StreamTracker>,
        stats: Arc<StreamStats>,
        term: Arc<Term>,
        schema_digests: Arc<SchemaDigests>,
    ) -> Self {
        Self {
            config,
            servers,
            fanout,
            tracker,
            stats,
            term,
            schema_digests,
            assembler: Assembler::default(),
            catalog: Catalog::default(),
            acknowledged: Timestamp::ZERO,
            idle_end: None,
        }
    }

    /// Streams forever, reconnecting after any failure.
    pub async fn run(mut self) {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let started = Instant::now();
            if let Err(error) = self.run_session().await {
                tracing::error!(
                    error = format!("{error:#}"),
                    "invalidation stream interrupted; reconnecting"
                );
            }
            self.assembler.abandon();
            self.stats.count_reconnect();
            if started.elapsed() > Duration::from_secs(10) {
                backoff.reset();
            }
            backoff.wait().await;
        }
    }

    async fn run_session(&mut self) -> anyhow::Result<()> {
        // An agent whose lease ran out must not take the slot (or recreate it) from the one
        // that took over.
        self.term.check()?;
        let server = self.servers.open("txcache-agent catalog").await?;
        let (sql, host) = (server.sql, server.host);
        // Decoding on a standby, the primary is asked what only it knows: its WAL position
        // (a standby restarting replays from behind what it decoded before) and its xids.
        let primary_session = match self.config.decode_from {
            Some(_) => {
                Some(connect::connect_sql_within(&self.config.dsn, "txcache-agent primary").await?)
            }
            None => None,
        };
        let (decoding_dsn, primary_dsn) = (
            self.config.decoding_dsn().to_owned(),
            self.config.dsn.clone(),
        );
        let mut watched = vec![Watched {
            session: &sql,
            dsn: &decoding_dsn,
            host: Some(host),
        }];
        if let Some(primary) = &primary_session {
            watched.push(Watched {
                session: primary,
                dsn: &primary_dsn,
                host: None,
            });
        }
        let moved = server.moved_from.is_some();
        let starting = self.start_stream(&sql, host, primary_session.as_ref(), moved);
        let Some(mut client) = cut_if_hung(&watched, starting).await? else {
            return Ok(());
        };
        let mut ack_timer = tokio::time::interval(ACK_INTERVAL);
        let mut last_received = Instant::now();
        let mut history_watch = tokio::time::interval(HISTORY_WATCH_INTERVAL);
        let first_pushed = self.fanout.newest();
        loop {
            tokio::select! {
                event = client.recv() => match event? {
                    Some(event) => {
                        last_received = Instant::now();
                        self.handle(event, &sql).await?;
                    }
                    None => bail!("the server ended the replication stream"),
                },
                _ = ack_timer.tick() => {
                    self.acknowledge(&client);
                    self.check_silence(&mut last_received, &sql).await?;
                    if self.servers.move_wanted().await {
                        // Off the primary, to a standby's spare slot: the next session.
                        self.follow_promotion(&sql, host, first_pushed).await?;
                        return Ok(());
                    }
                }
                _ = history_watch.tick(), if self.config.decode_from.is_some() => {
                    // A silent server is the silence check's to judge (a promoted one writes
                    // the heartbeats: it is not silent), and a query hung on it would hold
                    // back the check's own.
                    if last_received.elapsed() > HISTORY_WATCH_INTERVAL {
                        continue;
                    }
                    let watched = self.follow_promotion(&sql, host, first_pushed);
                    if let Ok(followed) = tokio::time::timeout(HISTORY_WATCH_INTERVAL, watched).await {
                        followed?;
                    }
                }
            }
        }
    }

    /// A stream session's start on the decoding host's session `sql` (`host`), with the
    /// primary's session when `sql` is a standby's: the slot, the database's position and
    /// history, the catalog, then the replication stream. `None` when the session ends
    /// there (the slot was recreated).
    async fn start_stream(
        &mut self,
        sql: &SqlSession,
        host: usize,
        primary: Option<&SqlSession>,
        moved: bool,
    ) -> anyhow::Result<Option<ReplicationClient>> {
        let Some(slot) = database::find_slot(sql, &self.config.slot).await? else {
            let loss = if moved {
                SlotLoss::Moved
            } else {
                SlotLoss::Dropped
            };
            self.recreate_slot(sql, primary, loss).await?;
            return Ok(None);
        };
        if slot.lost {
            self.recreate_slot(sql, primary, SlotLoss::Lost).await?;
            return Ok(None);
        }
        let primary = primary.unwrap_or(sql);
        if slot.confirmed > self.streamed() {
            // Only this agent moves the slot, never past what it streamed and acknowledged
            // (the end of WAL while idle: one past the newest): a slot ahead was dropped and
            // created again, and the commits in between were never read.
            tracing::error!(slot = %self.config.slot, slot_position = %slot.confirmed, stream_position = %self.fanout.newest(),
                "THE REPLICATION SLOT IS AHEAD OF THE STREAM (dropped and created again while the agent ran?): the changes in between were never read; every cache node is reset");
            self.restart_after_gap(primary, slot.confirmed).await?;
        }
        let database = database::position(primary).await?;
        self.fanout.set_database_position(database);
        let history = database::history(sql, Some(self.replication_host(host))).await?;
        let went_back = database < self.fanout.newest();
        let changed = self.fanout.history().filter(|old| **old != *history);
        if went_back {
            tracing::error!(database_position = %database, stream_position = %self.fanout.newest(),
                "THE DATABASE'S POSITIONS WENT BACK (restored from a backup, or failed over to a standby that was behind): restarting the stream at the slot; every cache node is rewound and loses its versioned entries");
            self.fanout.declare_gap(slot.confirmed);
        }
        if let Some(old) = &changed {
            self.change_history(old, &history, host, &slot, went_back)
                .await?;
        }
        if went_back || changed.is_some() {
            self.restart_acknowledged(slot.confirmed);
            self.stats.count_database_change();
            let floor = database::floor_xid(primary).await?;
            self.tracker.restart(slot.confirmed, floor);
        }
        // A new history restarts the buffer at the slot too.
        self.fanout.follow_history(&history, slot.confirmed);
        self.servers.decoded_history(&history);
        if let Some(timeline) = timeline::timeline_of(&history) {
            self.tracker.follow_timeline(timeline);
        }
        self.read_catalog(sql).await?;
        let start = Lsn::from_u64(slot.confirmed.0);
        self.stats.resume_at(slot.confirmed);
        let replication = replication_config(
            self.config.decoding_dsn(),
            host,
            &self.config.slot,
            &self.config.publication,
            start,
        )?
        .with_application_name(application_name("txcache-agent stream"));
        let mut client = ReplicationClient::connect(replication).await?;
        let wait = connect::answer_timeout(self.config.decoding_dsn())?;
        let starting = async |client: &mut ReplicationClient| client.wait_started().await;
        connect::answered_within(&mut client, wait, "starting replication", starting).await?;
        // The slot is this session's now: if an agent whose lease lapsed acknowledged it
        // further between the reading above and the start, PostgreSQL resumes there, past
        // commits the nodes never received. A gap: every node is reset. (A spare slot
        // advanced meanwhile, to no more than was acknowledged, skips nothing.)
        if let Some(now) = database::find_slot(sql, &self.config.slot).await? {
            if now.confirmed > slot.confirmed && now.confirmed > self.streamed() {
                tracing::error!(slot = %self.config.slot, read = %slot.confirmed, started = %now.confirmed,
                    "THE REPLICATION SLOT MOVED BEFORE THE STREAM STARTED (another agent acknowledged it): the changes in between were never read; every cache node is reset");
                self.restart_after_gap(primary, now.confirmed).await?;
                bail!("restarting the stream after the gap");
            }
        }
        tracing::info!(slot = %self.config.slot, resume = %start, "invalidation stream started");
        self.servers.stream_started().await;
        Ok(Some(client))
    }

    /// The `host`-th decoding host, for questions over a replication session.
    fn replication_host(&self, host: usize) -> ReplicationHost<'_> {
        ReplicationHost {
            dsn: self.config.decoding_dsn(),
            host,
            slot: &self.config.slot,
            publication: &self.config.publication,
        }
    }

    /// Reads the catalog at a session's start. The first reading applies from the start:
    /// every commit a previous agent delivered committed before this agent started, so every
    /// pin this agent certifies sees it, and the invalidations after such a pin are all this
    /// agent's. It may reflect DDL the stream has yet to replay, so the commits below where
    /// it was read are tagged coarsely. A later reading only adds to it, but can include a
    /// DDL committed while the stream was down, after commits the previous session delivered
    /// without its columns: it applies from where it was read.
    async fn read_catalog(&mut self, sql: &SqlSession) -> anyhow::Result<()> {
        let first_reading = self.tracker.catalogs().is_empty();
        self.catalog
            .refresh(&sql.client)
            .await
            .context("reading tag columns")?;
        let read_at = database::position(sql).await?;
        if first_reading {
            let coarse_below = self.replayed_schema_change(sql, read_at).await;
            self.assembler.tag_coarsely_below(coarse_below.0);
        }
        let since = if first_reading {
            Timestamp::ZERO
        } else {
            read_at
        };
        self.tracker.catalog(since, self.catalog.published());
        Ok(())
    }

    /// Just past the commit of the newest schema change the stream will replay below
    /// `read_at` (found by peeking at the slot, which this session has not started on yet):
    /// the commits up to it were made under a catalog the first reading may not show. Zero
    /// when there is none; `read_at` itself when the slot cannot be peeked at (sound, coarser).
    async fn replayed_schema_change(&self, sql: &SqlSession, read_at: Timestamp) -> Timestamp {
        let config = &self.config;
        let found = database::newest_replayed_message_commit(
            sql,
            &config.slot,
            &config.publication,
            read_at,
            DDL_PREFIX,
        )
        .await;
        match found {
            Ok(commit) => commit.map_or(Timestamp::ZERO, |lsn| Timestamp(lsn.0 + 1)),
            Err(error) => {
                tracing::warn!(error = %error, "could not look for schema changes in the replayed stream; commits below the catalog reading are tagged coarsely");
                read_at
            }
        }
    }

    async fn handle(&mut self, event: ReplicationEvent, sql: &SqlSession) -> anyhow::Result<()> {
        // The metrics' stream position: the end of each record handled (a commit's, a
        // message's) and, between transactions, a keepalive's end of what was sent.
        let end = match &event {
            ReplicationEvent::Commit { end_lsn, .. } => Some(end_lsn.as_u64()),
            ReplicationEvent::Message {
                transactional: false,
                lsn,
                ..
            } => Some(lsn.as_u64()),
            ReplicationEvent::KeepAlive { wal_end, .. } if !self.assembler.in_transaction() => {
                Some(wal_end.as_u64())
            }
            _ => None,
        };
        match event {
            ReplicationEvent::Begin { xid, final_lsn, .. } => {
                self.assembler.begin(xid, final_lsn.as_u64())
            }
            ReplicationEvent::XLogData { data, .. } => {
                self.assembler.change(&data, &self.catalog)?
            }
            ReplicationEvent::Message {
                transactional: true,
                prefix,
                content,
                ..
            } if prefix == DDL_PREFIX => {
                self.assembler.ddl_notice(&content, &mut self.catalog)?;
            }
            ReplicationEvent::Message {
                transactional: true,
                prefix,
                content,
                ..
            } if prefix == INVALIDATE_PREFIX => {
                self.assembler.manual_invalidation(&content)?;
            }
            ReplicationEvent::Message {
                transactional: true,
                prefix,
                content,
                ..
            } if prefix == SCHEMA_PREFIX => {
                self.assembler.schema_digest(&content)?;
            }
            ReplicationEvent::Message {
                transactional: false,
                prefix,
                content,
                lsn,
            } if prefix == HEARTBEAT_PREFIX => {
                // A message's LSN is the end of its record, where a commit record may start:
                // the heartbeat vouches for every commit strictly below it, so for L - 1.
                let ts = Timestamp(lsn.as_u64().saturating_sub(1));
                let time = WallClock(parse_number(&content));
                self.tracker.heartbeat(ts, time);
                self.fanout.push(StreamMessage::Heartbeat { ts, time });
            }
            ReplicationEvent::Message {
                transactional: false,
                prefix,
                lsn,
                ..
            } if prefix == FENCE_PREFIX => {
                self.tracker.fence(Timestamp(lsn.as_u64()));
            }
            ReplicationEvent::Commit {
                lsn,
                commit_time_micros,
                ..
            } => {
                self.commit(lsn.as_u64(), commit_time_micros, sql).await?;
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => self.keepalive(wal_end.as_u64()),
            _ => {}
        }
        if let Some(end) = end {
            self.stats.decoded(Timestamp(end));
        }
        Ok(())
    }

    async fn commit(&mut self, lsn: u64, commit_time: i64, sql: &SqlSession) -> anyhow::Result<()> {
        let Some(committed) = self.assembler.commit(lsn, commit_time) else {
            return Ok(());
        };
        tracing::trace!(ts = lsn, tags = committed.invalidation.tags.len(), "commit");
        if committed.untracked_schema_change {
            self.stats.count_untracked_schema_change();
        }
        if let Some(digest) = committed.schema_digest.clone() {
            let before = committed.schema_before.clone();
            self.schema_digests.record(Timestamp(lsn), before, digest);
        }
        let invalidation = &committed.invalidation;
        self.tracker
            .commit(invalidation.ts, committed.xid, invalidation.commit_time);
        // The new catalog version is published before any node hears of the DDL: a library
        // that sees a node past the DDL finds the tag columns it brought (TAGCOLUMNS).
        if committed.changed_schema {
            database::wait_until_visible(sql, committed.xid).await?;
            self.catalog
                .refresh(&sql.client)
                .await
                .context("reloading tag columns after DDL")?;
            self.assembler.catalog_changed();
            // The reading may include DDL committed after this one (the stream lags): it
            // applies from where it was read, not from this commit, so that no snapshot
            // between the two derives tags from columns the writes before it lacked.
            let read_at = database::position(sql).await?;
            self.tracker
                .schema_changed(read_at.max(Timestamp(lsn)), self.catalog.published());
        }
        if committed.barrier {
            // Before any node hears of it: from now on no pin older than it is offered.
            self.tracker.barrier(Timestamp(lsn));
        }
        self.fanout
            .push(StreamMessage::Invalidate(Arc::new(committed.invalidation)));
        Ok(())
    }

    /// A keepalive between transactions: the server has sent everything decoded below
    /// `wal_end`, so it is a heartbeat at `wal_end - 1`, like one written into the WAL. Once
    /// every node has it, the slot can be acknowledged at `wal_end` itself — what a server
    /// shutting down waits for (an agent that never confirmed the end of the WAL held a
    /// fast shutdown until `wal_sender_timeout`), and what lets a quiet publication release
    /// WAL.
    ///
    /// It moves the position on, never the time: its clock is the sender's when it ran out
    /// of WAL to decode, and commits beyond `wal_end` may have been made (and seen) before
    /// then — on a standby every one its replay has yet to apply, on a primary those
    /// committed asynchronously and not yet flushed. Only heartbeats written into the WAL
    /// tell when the database was at a position.
    fn keepalive(&mut self, wal_end: u64) {
        let ts = Timestamp(wal_end.saturating_sub(1));
        let newest = self.fanout.newest();
        if self.assembler.in_transaction() || wal_end == 0 || ts < newest {
            return;
        }
        if ts > newest {
            let time = self.tracker.progress().heartbeat_time;
            self.tracker.heartbeat(ts, time);
            self.fanout.push(StreamMessage::Heartbeat { ts, time });
        }
        self.idle_end = Some(Timestamp(wal_end));
    }

    /// Acknowledges what every connected node has received (never more).
    fn acknowledge(&mut self, client: &ReplicationClient) {
        // An agent whose lease lapsed delivers nothing, so every node counts as gone and
        // "delivered everywhere" would be everything decoded: it must not move the slot
        // past what the nodes have, under the agent that takes over.
        if !self.term.valid() {
            return;
        }
        let delivered = self.fanout.delivered_everywhere();
        let mut position = delivered;
        // Everything below an idle end is delivered once its heartbeat is: confirm the end.
        if let Some(end) = self
            .idle_end
            .filter(|end| delivered.0.saturating_add(1) >= end.0)
        {
            position = position.max(end);
        }
        if position > self.acknowledged {
            client.update_applied_lsn(Lsn::from_u64(position.0));
            self.acknowledged = position;
            self.servers.acknowledged(position);
        }
    }

    /// Records whether the server the stream is decoded on (over `sql`, `host` of the
    /// decoding servers) is a primary, and follows its promotion under the stream: its
    /// walsender decodes on across the new timeline, so what this session pushed past the
    /// switch point is the new history's, and the nodes keep their entries — when nothing
    /// an earlier session pushed (before `first_pushed`) lies past the switch point.
    /// Otherwise the session ends, and the next one rewinds every node (`change_history`).
    async fn follow_promotion(
        &mut self,
        sql: &SqlSession,
        host: usize,
        first_pushed: Timestamp,
    ) -> anyhow::Result<()> {
        let primary = !database::in_recovery(sql).await?;
        self.servers.decoded_on_primary(primary);
        // For `txcache status`: with the slot on a standby, none on the primary is missing.
        let spare = self.servers.primary_slot() == PrimarySlot::Spare;
        self.stats.decoding_on(!primary, spare);
        let history = match database::history(sql, Some(self.replication_host(host))).await {
            Ok(history) => history,
            // A replication session refused or unanswered says nothing of the stream's.
            Err(error) if error.downcast_ref::<database::TimelineUnknown>().is_some() => {
                tracing::debug!(
                    error = format!("{error:#}"),
                    "the decoding standby's timeline is not known this time"
                );
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        let Some(old) = self.fanout.history().filter(|old| **old != *history) else {
            return Ok(());
        };
        let switch = timeline::switch_point(self.replication_host(host), &old, &history).await?;
        match switch {
            Some(switch) if first_pushed < switch => {
                tracing::warn!(old_history = %old, new_history = %history, switch_point = %switch,
                    "the server the stream is decoded on took a new timeline (it was promoted, or followed its upstream's promotion): the stream follows it, and the cache nodes keep their entries");
                self.fanout.adopt_history(&history, switch);
                self.servers.decoded_history(&history);
                if let Some(timeline) = timeline::timeline_of(&history) {
                    self.tracker.follow_timeline(timeline);
                }
                Ok(())
            }
            _ => bail!("the history of the server the stream is decoded on changed from {old} to {history} under the stream; starting again"),
        }
    }

    /// With another server to move to: once the stream has received nothing (not even the
    /// heartbeats the primary writes every `--heartbeat-interval`) for
    /// `--decode-failover-after`, asks its server over `sql`. One that answers is alive, its
    /// replay behind (the silence starts again), unless it is a standby receiving no WAL
    /// (left on the old timeline by a failover, say) while a primary answers; one that does
    /// not within
    /// [`PROBE_TIMEOUT`] (stopped, or cut off without a reset) fails the session and counts
    /// as failing since the silence began.
    async fn check_silence(
        &self,
        last_received: &mut Instant,
        sql: &SqlSession,
    ) -> anyhow::Result<()> {
        let Some(limit) = self.servers.silence_limit() else {
            return Ok(());
        };
        if last_received.elapsed() < limit {
            return Ok(());
        }
        let asked = sql.query_one_prepared(STRANDED, &[]);
        let answer = match tokio::time::timeout(PROBE_TIMEOUT, asked).await {
            Ok(Ok(row)) => Some(row.get::<_, bool>(0)),
            _ => None,
        };
        if answer == Some(false) {
            tracing::info!(silent_for = ?last_received.elapsed(), "the server the stream is decoded on sends nothing but answers: its replay is behind (paused, or slow); the stream stays there");
            *last_received = Instant::now();
            return Ok(());
        }
        if answer == Some(true) && !self.primary_answers().await {
            tracing::warn!(silent_for = ?last_received.elapsed(), "the standby the stream is decoded on receives no WAL, but no primary answers either (down, or being failed over): every standby would be as silent, so the stream stays there");
            *last_received = Instant::now();
            return Ok(());
        }
        self.servers
            .went_silent(*last_received, answer.is_some())
            .await;
        let why = match answer {
            Some(_) => "receives no WAL: a standby cut off from its upstream (left on another timeline by a failover, or pointed nowhere)",
            None => "does not answer",
        };
        bail!(
            "the server the stream is decoded on sent nothing for {:?} and {why}",
            last_received.elapsed()
        )
    }

    /// Whether a primary answers `--dsn` within [`PROBE_TIMEOUT`]: if none does, a standby
    /// receiving no WAL is no worse than any other.
    async fn primary_answers(&self) -> bool {
        let probe = async {
            let sql = connect_sql(&self.config.dsn, "txcache-agent primary probe").await?;
            database::in_recovery(&sql).await
        };
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, probe).await,
            Ok(Ok(false))
        )
    }

    /// The slot lost WAL it needed, or is gone: commits in the gap are gone for good.
    /// Recreate the slot and reset every node, so none keeps an entry the gap may have made
    /// stale.
    /// `primary`: the primary's session when `sql` is the decoding standby's.
    async fn recreate_slot(
        &mut self,
        sql: &SqlSession,
        primary: Option<&SqlSession>,
        loss: SlotLoss,
    ) -> anyhow::Result<()> {
        match loss {
            SlotLoss::Lost => tracing::error!(slot = %self.config.slot,
                "REPLICATION SLOT LOST: PostgreSQL removed WAL the agent had not read (raise max_slot_wal_keep_size, or keep the agent running), or invalidated the slot (on a decoding standby: is hot_standby_feedback on?). Recreating the slot and resetting every cache node."),
            SlotLoss::Moved => tracing::error!(slot = %self.config.slot,
                "THE STREAM MOVED to a --decode-from host without the slot: the changes since the old host's slot are not decoded there. Creating the slot and resetting every cache node."),
            SlotLoss::Dropped => tracing::error!(slot = %self.config.slot,
                "REPLICATION SLOT DROPPED while the agent ran (by an operator, a managed service's clean-up, or a failover that did not keep it): the changes since were never read. Recreating the slot and resetting every cache node."),
        }
        let position =
            database::recreate_slot(sql, &self.config.slot, primary, self.servers.primary_slot())
                .await?;
        self.restart_after_gap(primary.unwrap_or(sql), position)
            .await
    }

    /// The database's history changed from `old` to `new`: a promoted standby whose timeline
    /// continues the old one past everything streamed keeps the nodes' entries; anything
    /// else (another cluster, a standby that was behind) rewinds every node.
    async fn change_history(
        &mut self,
        old: &str,
        new: &str,
        host: usize,
        slot: &SlotState,
        went_back: bool,
    ) -> anyhow::Result<()> {
        let switch = if went_back {
            None
        } else {
            timeline::switch_point(self.replication_host(host), old, new)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(%error, "cannot read the new timeline's history: the nodes are rewound");
                None
            })
        };
        match switch {
            Some(switch) if self.fanout.continue_history(new, switch, slot.confirmed) => {
                tracing::warn!(old_history = %old, new_history = %new, switch_point = %switch, stream_position = %self.fanout.newest(),
                    "the database failed over to a standby whose timeline continues the old one past everything streamed: the cache nodes keep their entries");
            }
            _ => tracing::error!(old_history = %old, new_history = %new,
                "THE DATABASE'S HISTORY CHANGED (a failover to a standby that was behind, a restore to a new timeline, or another database): restarting the stream at the slot; every cache node is rewound and loses its versioned entries"),
        }
        Ok(())
    }

    /// Restarts the stream at `position`, past changes it never read: every node is reset.
    /// `primary` gives the floor of the certification.
    async fn restart_after_gap(
        &mut self,
        primary: &SqlSession,
        position: Timestamp,
    ) -> anyhow::Result<()> {
        self.tracker
            .restart(position, database::floor_xid(primary).await?);
        self.fanout.declare_gap(position);
        self.restart_acknowledged(position);
        self.stats.count_slot_recreation();
        Ok(())
    }

    /// How far the nodes have what the stream read: one past the newest pushed, or the
    /// acknowledged position (the end of WAL while idle), whichever is further. A slot
    /// confirmed past it skips commits no node received.
    fn streamed(&self) -> Timestamp {
        Timestamp(self.fanout.newest().0.saturating_add(1)).max(self.acknowledged)
    }

    /// The stream starts again at `position`, below what it acknowledged on the history or
    /// slot it leaves: what the nodes have is acknowledged from there on, and the spare
    /// slots follow that, never the old position.
    fn restart_acknowledged(&mut self, position: Timestamp) {
        self.acknowledged = position;
        self.servers.restart_acknowledged(position);
    }
}

/// A decimal number from a message's content; 0 when it is not one.
fn parse_number(content: &[u8]) -> u64 {
    std::str::from_utf8(content)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

/// Why the slot must be created again.
#[derive(Clone, Copy, Debug)]
enum SlotLoss {
    /// PostgreSQL removed WAL it needed (`wal_status` lost) or invalidated it.
    Lost,
    /// It no longer exists.
    Dropped,
    /// The stream moved to another `--decode-from` host, which holds none.
    Moved,
}

/// A session a stream session's start runs statements on: the decoding host's, or the
/// primary's beside it.
struct Watched<'a> {
    session: &'a SqlSession,
    /// Whose connection string.
    dsn: &'a str,
    /// Which of its hosts; `None`: the one its settings choose (the primary).
    host: Option<usize>,
}

/// `starting`, a stream session's start over the `watched` sessions: a start that takes
/// long (a slot's creation waits for the transactions running on the primary) is waited
/// for while their servers answer new sessions; once one does not (it hangs, or was cut off
/// after the handshake), every watched session is cut, and `starting` fails at its next
/// statement on one. The stream's silence check runs only once the stream does: without
/// this a server that hangs now would hold the stream forever.
async fn cut_if_hung<T>(
    watched: &[Watched<'_>],
    starting: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let mut starting = std::pin::pin!(starting);
    tokio::select! {
        started = &mut starting => started,
        hung = first_hung(watched) => {
            tracing::warn!(dsn = %hung.dsn, host = ?hung.host, "a server stopped answering while the stream session started: cutting the session");
            for each in watched {
                each.session.cut();
            }
            starting.await
        }
    }
}

/// The first of `watched` whose server, asked every [`HANG_CHECK_INTERVAL`], does not
/// answer a new session and a query on it; never returns while they all do.
async fn first_hung<'a>(watched: &'a [Watched<'a>]) -> &'a Watched<'a> {
    loop {
        tokio::time::sleep(HANG_CHECK_INTERVAL).await;
        for each in watched {
            if hangs(each).await {
                return each;
            }
        }
    }
}

/// Whether `watched`'s server leaves a new session, or a query on it, unanswered within
/// its `connect_timeout` and [`PROBE_TIMEOUT`]. An answer, even a refusal (too many
/// connections, say), is no hang.
async fn hangs(watched: &Watched<'_>) -> bool {
    const PROBE: &str = "txcache-agent host probe";
    // Every step is bounded, and says so with `NoAnswer`.
    let probe = async {
        let sql = match watched.host {
            Some(host) => connect::connect_host(watched.dsn, host, PROBE).await?,
            None => connect::connect_sql_within(watched.dsn, PROBE).await?,
        };
        tokio::time::timeout(PROBE_TIMEOUT, sql.client.simple_query("SELECT 1"))
            .await
            .map_err(|_| connect::NoAnswer {
                within: PROBE_TIMEOUT,
            })??;
        anyhow::Ok(())
    };
    probe
        .await
        .is_err_and(|error| error.downcast_ref::<connect::NoAnswer>().is_some())
}

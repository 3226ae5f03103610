//! The lease in PostgreSQL that lets exactly one of several agents act: a row of
//! `txcache.agent_lease` per slot, naming its holder, an epoch raised by every takeover, the
//! holder's lease session and when the lease expires (the database's clock).
//!
//! - A standby takes the lease when it expired, or when the holder's lease session is gone
//!   and has not renewed for [`HANDOVER_GRACE`] (a killed agent's sessions end with it, so
//!   a crash is taken over in about a second, a hung agent after the lease's duration).
//! - The active agent renews it every [`LeaseSettings::interval`] and counts itself valid
//!   only until three quarters of the duration after it *sent* the last renewal that
//!   succeeded ([`Term`]): by the time a standby can take the lease, the old holder has
//!   stopped acting by its own clock.
//! - The one taking over ends the old holder's walsender and lease session, so the slot is
//!   free at once; nodes refuse the old epoch from then on (`TXEPOCH`).

use crate::connect::{connect_sql, SqlSession};
use crate::term::{Holder, Term};
use anyhow::Context as _;
use std::time::{Duration, Instant};

/// How long a holder whose lease session is gone keeps the lease: the moment between a
/// standby winning it and the new term's own session renewing it.
pub const HANDOVER_GRACE: Duration = Duration::from_secs(1);

/// Takes the lease if it is free, expired or its holder's session is gone; returns the new
/// epoch (no row: another agent holds it).
const ACQUIRE: &str = "
    WITH me AS (
        SELECT pid, backend_start FROM pg_catalog.pg_stat_activity
        WHERE pid = pg_catalog.pg_backend_pid())
    INSERT INTO txcache.agent_lease AS lease
        (slot, holder, epoch, pid, backend_start, renewed_at, expires_at)
    SELECT $1, $2, 1, me.pid, me.backend_start, pg_catalog.clock_timestamp(),
        pg_catalog.clock_timestamp() + $3::float8 * interval '1 millisecond'
    FROM me
    ON CONFLICT (slot) DO UPDATE SET holder = excluded.holder, epoch = lease.epoch + 1,
        pid = excluded.pid, backend_start = excluded.backend_start,
        renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
    WHERE lease.expires_at < pg_catalog.clock_timestamp()
       OR (lease.renewed_at < pg_catalog.clock_timestamp() - $4::float8 * interval '1 millisecond'
           AND NOT EXISTS (
               SELECT FROM pg_catalog.pg_stat_activity a
               WHERE a.pid = lease.pid
                 AND (a.backend_start IS NULL OR a.backend_start = lease.backend_start)))
    RETURNING epoch";

/// Extends the lease of `$2` at epoch `$4` from this session; no row: it was taken over.
const RENEW: &str = "
    UPDATE txcache.agent_lease SET
        pid = pg_catalog.pg_backend_pid(),
        backend_start = (SELECT backend_start FROM pg_catalog.pg_stat_activity
                         WHERE pid = pg_catalog.pg_backend_pid()),
        renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + $3::float8 * interval '1 millisecond'
    WHERE slot = $1 AND holder = $2 AND epoch = $4";

/// Lets the lease go at once (a clean shutdown): a standby takes it at its next look.
const RELEASE: &str = "
    UPDATE txcache.agent_lease SET expires_at = '-infinity', pid = NULL
    WHERE slot = $1 AND holder = $2 AND epoch = $3";

/// Ends the sessions of the agent taken over from: the slot's walsender and its lease
/// session (only a holder's own role, or one with pg_signal_backend, may).
const EVICT: &str = "
    SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid))::int8 FROM (
        SELECT active_pid AS pid FROM pg_catalog.pg_replication_slots
        WHERE slot_name = $1 AND active_pid IS NOT NULL
        UNION
        SELECT $2::int4 WHERE $2::int4 IS NOT NULL) sessions
    WHERE pid <> pg_catalog.pg_backend_pid()";

/// How long a takeover waits for the old walsender to let the slot go.
const SLOT_RELEASE_WAIT: Duration = Duration::from_secs(10);

/// What the lease is and who asks for it.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// The database.
    pub dsn: String,
    /// The slot the lease is for: agents of one slot compete, others do not.
    pub slot: String,
    /// How this agent names itself (libraries are told it by standbys).
    pub holder: String,
    /// How long a lease lasts unless renewed (`--lease`).
    pub duration: Duration,
}

impl LeaseSettings {
    /// How often the holder renews and a standby looks: an eighth of the lease, at most
    /// half a second.
    pub fn interval(&self) -> Duration {
        (self.duration / 8).min(Duration::from_millis(500))
    }

    /// How long after a renewal was sent this agent still counts itself the holder: three
    /// quarters of the lease, so that it stops before a standby can start.
    pub fn valid_for(&self) -> Duration {
        self.duration * 3 / 4
    }

    fn duration_ms(&self) -> f64 {
        self.duration.as_secs_f64() * 1000.0
    }
}

/// The lease just taken: its epoch, and the previous holder's lease session.
#[derive(Clone, Copy, Debug)]
pub struct Acquired {
    /// The new epoch.
    pub epoch: u64,
    /// The previous holder's lease session, ended by [`evict`].
    pub previous_pid: Option<i32>,
    /// When the request that took it was sent.
    pub sent_at: Instant,
}

/// Refuses to start without the lease table, naming the fix.
pub async fn require_table(sql: &SqlSession) -> anyhow::Result<()> {
    let row = sql
        .client
        .query_one(
            "WITH t(oid) AS (SELECT pg_catalog.to_regclass('txcache.agent_lease')::oid) \
             SELECT t.oid IS NOT NULL, coalesce( \
                 pg_catalog.has_table_privilege(t.oid, 'SELECT') \
                 AND pg_catalog.has_table_privilege(t.oid, 'INSERT') \
                 AND pg_catalog.has_table_privilege(t.oid, 'UPDATE'), false) FROM t",
            &[],
        )
        .await
        .context("cannot read txcache.agent_lease")?;
    match (row.get::<_, bool>(0), row.get::<_, bool>(1)) {
        (true, true) => Ok(()),
        (true, false) => anyhow::bail!(
            "the agent's role may not write txcache.agent_lease, the lease agents take turns by: grant it SELECT, INSERT, UPDATE (`txcache setup --print-sql` prints the statement)"
        ),
        (false, _) => anyhow::bail!(
            "txcache.agent_lease does not exist: run `txcache setup` again to create it (agents take turns by a lease in it)"
        ),
    }
}

/// Waits, as a standby, until this agent holds the lease; records who holds it meanwhile.
pub async fn acquire(settings: &LeaseSettings, holder: &Holder) -> Acquired {
    let mut session: Option<SqlSession> = None;
    let mut standing_by_for: Option<String> = None;
    let mut failing = false;
    loop {
        match try_acquire(settings, &mut session).await {
            Ok(Ok(acquired)) => return acquired,
            Ok(Err(current)) => {
                failing = false;
                let description = current
                    .as_ref()
                    .map(|(name, epoch)| format!("{name}, epoch {epoch}"));
                if description != standing_by_for {
                    tracing::info!(
                        active = description.as_deref().unwrap_or("none"),
                        "standing by: another agent holds the lease"
                    );
                    standing_by_for = description;
                }
                holder.set(current);
            }
            Err(error) => {
                // Once per outage: a restarting database would log it twice a second.
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(
                        error = format!("{error:#}"),
                        "cannot read the agents' lease; trying again"
                    );
                }
                session = None;
            }
        }
        tokio::time::sleep(settings.interval()).await;
    }
}

/// One attempt: `Ok(Ok(_))` taken, `Ok(Err(holder))` held by another.
async fn try_acquire(
    settings: &LeaseSettings,
    session: &mut Option<SqlSession>,
) -> anyhow::Result<Result<Acquired, Option<(String, u64)>>> {
    if session.is_none() {
        *session = Some(connect_sql(&settings.dsn, "txcache-agent lease").await?);
    }
    let sql = session.as_ref().expect("connected above");
    let previous = sql
        .client
        .query_opt(
            "SELECT holder, epoch, pid FROM txcache.agent_lease WHERE slot = $1",
            &[&settings.slot],
        )
        .await?;
    let sent_at = Instant::now();
    let grace_ms = HANDOVER_GRACE.as_secs_f64() * 1000.0;
    let taken = sql
        .client
        .query_opt(
            ACQUIRE,
            &[
                &settings.slot,
                &settings.holder,
                &settings.duration_ms(),
                &grace_ms,
            ],
        )
        .await
        .context("taking the lease")?;
    if let Some(row) = taken {
        let epoch: i64 = row.get(0);
        return Ok(Ok(Acquired {
            epoch: epoch.unsigned_abs(),
            previous_pid: previous.as_ref().and_then(|row| row.get(2)),
            sent_at,
        }));
    }
    Ok(Err(previous.map(|row| {
        let epoch: i64 = row.get(1);
        (row.get(0), epoch.unsigned_abs())
    })))
}

/// Ends the previous holder's walsender and lease session and waits (bounded) until the
/// slot is free; a refusal is logged with its fix, and the stream then waits for the
/// walsender to time out instead.
pub async fn evict(sql: &SqlSession, slot: &str, previous_pid: Option<i32>) {
    if let Err(error) = sql.client.query_one(EVICT, &[&slot, &previous_pid]).await {
        tracing::warn!(error = %error, "cannot end the previous agent's sessions (give every agent the same role, or grant pg_signal_backend); the slot is free only once its walsender times out (wal_sender_timeout)");
        return;
    }
    let deadline = Instant::now() + SLOT_RELEASE_WAIT;
    while Instant::now() < deadline {
        let active = sql
            .client
            .query_opt(
                "SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await;
        match active {
            Ok(Some(row)) if row.get::<_, bool>(0) => {}
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!(
        slot,
        "the previous agent's walsender still holds the slot; the stream retries"
    );
}

/// Renews the lease while it is held; returns when it was taken over (the term then
/// ended). A renewal that fails (the database unreachable) is retried; the term runs out
/// meanwhile by its own clock.
pub async fn keep(settings: &LeaseSettings, term: &Term) {
    let mut session: Option<SqlSession> = None;
    let mut lapsed = false;
    loop {
        let sent_at = Instant::now();
        match renew(settings, term.epoch(), &mut session).await {
            Ok(true) => {
                term.extend(sent_at + settings.valid_for());
                if std::mem::take(&mut lapsed) {
                    tracing::warn!(epoch = term.epoch(), "the lease is renewed: acting again");
                }
            }
            Ok(false) => {
                term.end();
                return;
            }
            Err(error) => {
                if !term.valid() && !std::mem::replace(&mut lapsed, true) {
                    tracing::warn!(
                        error = format!("{error:#}"),
                        "cannot renew the lease: acting no more (no delivery, no slot, libraries told STANDBY) until it is renewed"
                    );
                }
                session = None;
            }
        }
        tokio::time::sleep(settings.interval()).await;
    }
}

/// One renewal: `Ok(false)` when another agent holds the lease now.
async fn renew(
    settings: &LeaseSettings,
    epoch: u64,
    session: &mut Option<SqlSession>,
) -> anyhow::Result<bool> {
    if session.is_none() {
        let connect = connect_sql(&settings.dsn, "txcache-agent lease");
        *session = Some(
            tokio::time::timeout(settings.valid_for(), connect)
                .await
                .context("connecting timed out")??,
        );
    }
    let sql = session.as_ref().expect("connected above");
    let (epoch, duration_ms) = (
        i64::try_from(epoch).unwrap_or(i64::MAX),
        settings.duration_ms(),
    );
    let parameters: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&settings.slot, &settings.holder, &duration_ms, &epoch];
    let update = sql.client.execute(RENEW, &parameters);
    let renewed = tokio::time::timeout(settings.valid_for(), update)
        .await
        .context("renewing timed out")??;
    Ok(renewed == 1)
}

/// Lets the lease go (a clean shutdown), so that a standby takes over at its next look.
pub async fn release(settings: &LeaseSettings, epoch: u64) {
    let release = async {
        let sql = connect_sql(&settings.dsn, "txcache-agent lease").await?;
        let epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
        sql.client
            .execute(RELEASE, &[&settings.slot, &settings.holder, &epoch])
            .await?;
        anyhow::Ok(())
    };
    match tokio::time::timeout(Duration::from_secs(2), release).await {
        Ok(Ok(())) => tracing::info!("lease released"),
        Ok(Err(error)) => tracing::warn!(
            error = format!("{error:#}"),
            "cannot release the lease; a standby takes it when it expires"
        ),
        Err(_) => {
            tracing::warn!("releasing the lease timed out; a standby takes it when it expires")
        }
    }
}

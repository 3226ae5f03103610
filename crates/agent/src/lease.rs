//! The lease in PostgreSQL that lets exactly one of several agents act: a row of
//! `txcache.agent_lease` per slot, naming its holder, an epoch raised by every takeover, the
//! holder's lease session and when the lease expires (the database's clock).
//!
//! - A standby takes the lease when it expired, or when the holder's lease session is gone
//!   and it has not renewed for [`LeaseSettings::valid_for`] (a killed agent's sessions end
//!   with it: a crash is taken over then, a hung agent once the lease expires). Either way
//!   the old holder's own clock has run out first (below).
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
        backend_start = (SELECT backend_start
                         FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid())),
        renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + $3::float8 * interval '1 millisecond'
    WHERE slot = $1 AND holder = $2 AND epoch = $4";

/// Lets the lease go at once (a clean shutdown): a standby takes it at its next look.
const RELEASE: &str = "
    UPDATE txcache.agent_lease SET expires_at = '-infinity', pid = NULL
    WHERE slot = $1 AND holder = $2 AND epoch = $3";

/// Ends the walsender holding slot `$1` (the agent taken over from). A statement of its
/// own: a refusal here must not keep the other sessions alive.
const END_WALSENDER: &str = "
    SELECT pg_catalog.pg_terminate_backend(active_pid) FROM pg_catalog.pg_replication_slots
    WHERE slot_name = $1 AND active_pid IS NOT NULL AND active_pid <> pg_catalog.pg_backend_pid()";

/// Ends the other sessions of the agent taken over from: its lease session `$1` (if it is
/// still that agent's: a pid is reused) and every session named for its epoch `$2`
/// (pinners hold snapshots, and with them the vacuum horizon; `connect::application_name`)
/// — those this role may signal (its own role's, or any with pg_signal_backend).
const END_SESSIONS: &str = "
    SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid))::int8
    FROM pg_catalog.pg_stat_activity
    WHERE pid <> pg_catalog.pg_backend_pid() AND application_name LIKE 'txcache-agent%'
      AND ((pid = $1::int4 AND application_name LIKE 'txcache-agent lease%')
           OR ($2::int8 > 0 AND application_name LIKE '% e' || $2::int8::text))
      AND (pg_catalog.pg_has_role(usesysid, 'MEMBER')
           OR pg_catalog.pg_has_role('pg_signal_backend', 'MEMBER'))";

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
    /// The previous holder's epoch (0: none), whose sessions [`evict`] ends.
    pub previous_epoch: u64,
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
    let sql = lease_session(settings, session).await?;
    let previous = sql
        .client
        .query_opt(
            "SELECT holder, epoch, pid FROM txcache.agent_lease WHERE slot = $1",
            &[&settings.slot],
        )
        .await?;
    let sent_at = Instant::now();
    let silent_ms = settings.valid_for().as_secs_f64() * 1000.0;
    let taken = sql
        .client
        .query_opt(
            ACQUIRE,
            &[
                &settings.slot,
                &settings.holder,
                &settings.duration_ms(),
                &silent_ms,
            ],
        )
        .await
        .context("taking the lease")?;
    if let Some(row) = taken {
        let epoch: i64 = row.get(0);
        return Ok(Ok(Acquired {
            epoch: epoch.unsigned_abs(),
            previous_pid: previous.as_ref().and_then(|row| row.get(2)),
            previous_epoch: previous
                .as_ref()
                .map_or(0, |row| row.get::<_, i64>(1).unsigned_abs()),
            sent_at,
        }));
    }
    Ok(Err(previous.map(|row| {
        let epoch: i64 = row.get(1);
        (row.get(0), epoch.unsigned_abs())
    })))
}

/// Ends the previous holder's sessions (its walsender, lease session and every session
/// named for its epoch) and waits (bounded) until the slot is free; a refusal is logged with its fix, and the stream then waits for the
/// walsender to time out instead.
pub async fn evict(sql: &SqlSession, slot: &str, acquired: &Acquired) {
    let epoch = i64::try_from(acquired.previous_epoch).unwrap_or(0);
    let parameters: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
        [&acquired.previous_pid, &epoch];
    if let Err(error) = sql.client.query_one(END_SESSIONS, &parameters).await {
        tracing::warn!(error = %error, "cannot end the previous agent's sessions; its pinners hold their snapshots until PostgreSQL sees them gone");
    }
    if let Err(error) = sql.client.query(END_WALSENDER, &[&slot]).await {
        tracing::warn!(error = %error, "cannot end the previous agent's walsender (give every agent the same role, or grant pg_signal_backend); the slot is free only once it times out (wal_sender_timeout)");
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

/// The lease session, connected first if it is not (within the validity span: a renewal
/// that cannot connect in time is one that failed).
async fn lease_session<'a>(
    settings: &LeaseSettings,
    session: &'a mut Option<SqlSession>,
) -> anyhow::Result<&'a SqlSession> {
    if session.is_none() {
        let connect = connect_sql(&settings.dsn, "txcache-agent lease");
        let sql = tokio::time::timeout(settings.valid_for(), connect)
            .await
            .context("connecting timed out")??;
        *session = Some(sql);
    }
    Ok(session.as_ref().expect("connected above"))
}

/// One renewal: `Ok(false)` when another agent holds the lease now.
async fn renew(
    settings: &LeaseSettings,
    epoch: u64,
    session: &mut Option<SqlSession>,
) -> anyhow::Result<bool> {
    let sql = lease_session(settings, session).await?;
    let (epoch, duration_ms) = (
        i64::try_from(epoch).unwrap_or(i64::MAX),
        settings.duration_ms(),
    );
    let parameters: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&settings.slot, &settings.holder, &duration_ms, &epoch];
    let update = sql.execute_prepared(RENEW, &parameters);

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

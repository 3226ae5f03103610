//! Connections to PostgreSQL: plain SQL sessions and the replication stream, both over
//! TLS as the `--dsn`'s `sslmode` says ([`crate::conninfo`]).

use crate::conninfo::{self, Conninfo};
use crate::retry::Backoff;
use anyhow::{bail, Context as _};
use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, TlsConfig};
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Connection, NoTls, Row, Socket, Statement};
use txcache_metrics::log::{self, Repeats, Report};

use tokio_postgres_rustls::MakeRustlsConnect;
use txcache_tls::Verify;

/// An SQL session, with the server's version.
pub struct SqlSession {
    /// The client; its connection runs on a spawned task.
    pub client: Client,
    /// `server_version_num`, e.g. 180006.
    pub server_version_num: u32,
    /// The statements [`SqlSession::prepared`] prepared on this session, with their text:
    /// a few per session, so a list.
    statements: Mutex<Vec<(&'static str, Statement)>>,
    /// The task its connection runs on.
    connection: tokio::task::AbortHandle,
}

impl SqlSession {
    /// Ends the connection at once: every statement waiting for an answer, and every later
    /// one, fails. For a server that hangs, whose statements would wait forever.
    pub fn cut(&self) {
        self.connection.abort();
    }

    /// `text` prepared once on this session, for the statements a task runs again and
    /// again (heartbeats, lease renewals, digests): the server parses it once and may keep
    /// its plan, and each run saves the round trip a one-off statement's preparation costs.
    pub async fn prepared(&self, text: &'static str) -> Result<Statement, tokio_postgres::Error> {
        let known = self
            .statements()
            .iter()
            .find(|(known, _)| *known == text)
            .cloned();
        if let Some((_, statement)) = known {
            return Ok(statement);
        }
        let statement = self.client.prepare(text).await?;
        self.statements().push((text, statement.clone()));
        Ok(statement)
    }

    /// [`Client::query_one`] of `text`, [prepared](SqlSession::prepared) once.
    pub async fn query_one_prepared(
        &self,
        text: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        let statement = self.prepared(text).await?;
        self.client.query_one(&statement, parameters).await
    }

    /// [`Client::query`] of `text`, [prepared](SqlSession::prepared) once.
    pub async fn query_prepared(
        &self,
        text: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.prepared(text).await?;
        self.client.query(&statement, parameters).await
    }

    /// [`Client::execute`] of `text`, [prepared](SqlSession::prepared) once.
    pub async fn execute_prepared(
        &self,
        text: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let statement = self.prepared(text).await?;
        self.client.execute(&statement, parameters).await
    }

    fn statements(&self) -> MutexGuard<'_, Vec<(&'static str, Statement)>> {
        // A map of prepared statements stays valid whatever panicked while holding it.
        self.statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The lease epoch this process acts in (0 while it stands by), named in every session it
/// opens: the agent taking over ends a stopped or cut-off predecessor's sessions by it.
static SESSIONS_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Names every session opened from now on for the term of `epoch` (0: standing by).
pub fn name_sessions_for(epoch: u64) {
    SESSIONS_EPOCH.store(epoch, Ordering::Relaxed);
}

/// `base`, and the term's epoch when this process is active (`txcache-agent pinner 3 e7`):
/// what `pg_stat_activity.application_name` shows for the agent's sessions.
pub fn application_name(base: &str) -> String {
    match SESSIONS_EPOCH.load(Ordering::Relaxed) {
        0 => base.to_owned(),
        epoch => format!("{base} e{epoch}"),
    }
}

/// Opens an SQL session named `application` (visible in `pg_stat_activity`, with the
/// term's epoch: [`application_name`]).
pub async fn connect_sql(dsn: &str, application: &str) -> anyhow::Result<SqlSession> {
    let conninfo = conninfo::parse(dsn)?;
    let config = tokio_postgres::Config::from_str(&conninfo.rest).context("invalid --dsn")?;
    connect_config(config, &conninfo, application).await
}

/// The longest wait between two attempts of a background task to connect.
pub const RECONNECT_CAP: Duration = Duration::from_secs(1);

/// How often a connection that keeps failing is logged again, as one summary line.
pub const RECONNECT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Opens an SQL session named `application`, trying again with a backoff (doubling to
/// [`RECONNECT_CAP`]) until it opens: for the background tasks that outlive the database's
/// absences. The first failure is logged, then a summary every [`RECONNECT_LOG_INTERVAL`]
/// while it lasts, and the reconnection.
pub async fn connect_sql_until_open(dsn: &str, application: &str) -> SqlSession {
    retry_until_ok(application, || connect_sql(dsn, application)).await
}

/// `attempt`'s value, tried again as [`connect_sql_until_open`] says until it succeeds.
async fn retry_until_ok<T, F>(application: &str, mut attempt: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    // Quick retries for a restart, then every second, as before the log was summarised: a
    // failover's new primary is found as soon; the log gets no flood of lines.
    let mut backoff = Backoff::new(Duration::from_millis(100), RECONNECT_CAP);
    let mut failures = Repeats::new(RECONNECT_LOG_INTERVAL);
    loop {
        let error = match attempt().await {
            Ok(value) => {
                if let Some((attempts, failing_for)) = failures.ended(Instant::now()) {
                    let failing_for = log::rounded(failing_for);
                    tracing::info!(attempts, ?failing_for, "{application}: connected again");
                }
                return value;
            }
            Err(error) => error,
        };
        let error = format!("{error:#}");
        match failures.occurred(Instant::now()) {
            Report::First => tracing::warn!(
                error,
                "{application}: cannot connect; retrying every {RECONNECT_CAP:?} at most \
                 (a summary every {RECONNECT_LOG_INTERVAL:?} while it fails): is the \
                 database up, and --dsn right?"
            ),
            Report::Summary {
                total, failing_for, ..
            } => {
                let failing_for = log::rounded(failing_for);
                tracing::warn!(
                    error,
                    attempts = total,
                    ?failing_for,
                    "{application}: still cannot connect; retrying"
                );
            }
            Report::Quiet => {}
        }
        backoff.wait().await;
    }
}

/// Opens an SQL session with `config` and `conninfo`'s TLS settings.
async fn connect_config(
    mut config: tokio_postgres::Config,
    conninfo: &Conninfo,
    application: &str,
) -> anyhow::Result<SqlSession> {
    config.application_name(application_name(application));
    let (client, connection) = match conninfo.tls.verify()? {
        None => open(&config, NoTls).await?,
        Some(verify) => {
            let identity = conninfo.tls.identity.as_ref();
            let identity = identity.map(|(cert, key)| (cert.as_path(), key.as_path()));
            let tls = txcache_tls::client_config(&verify, identity).context("--dsn")?;
            open(&config, MakeRustlsConnect::new((*tls).clone())).await?
        }
    };
    let version: String = client
        .query_one("SHOW server_version_num", &[])
        .await?
        .get(0);
    Ok(SqlSession {
        client,
        server_version_num: version.parse().unwrap_or(0),
        statements: Mutex::default(),
        connection,
    })
}

/// Connects with `tls`, running the connection on a spawned task (which the handle ends).
async fn open<T>(
    config: &tokio_postgres::Config,
    tls: T,
) -> anyhow::Result<(Client, tokio::task::AbortHandle)>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, connection): (Client, Connection<Socket, T::Stream>) =
        config.connect(tls).await.map_err(|error| {
            let reason = describe(&error);
            let hint = if reason.contains("invalid peer certificate") {
                " (is --dsn's sslrootcert the CA that signed the server's certificate, and \
                 does that certificate name the host --dsn connects to?)"
            } else {
                ""
            };
            anyhow::anyhow!("cannot connect to PostgreSQL: {reason}{hint}")
        })?;
    let task = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "SQL connection ended");
        }
    });
    Ok((client, task.abort_handle()))
}

/// An error with its causes, so a refused certificate says why ("invalid peer certificate:
/// UnknownIssuer") instead of just "error performing TLS handshake".
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Which of `dsn`'s hosts the SQL session `sql` reached: the replication stream opens on
/// the same one. A DSN naming several hosts (a primary and its standbys, for failover) must
/// ask for `target_session_attrs=read-write`, so that every session reaches the primary;
/// the host is then found by the server's address and port, or, where a proxy or a port
/// mapping stands between (the addresses differ), by asking each host whether it is the
/// very server the session reached.
pub async fn reached_host(dsn: &str, sql: &SqlSession) -> anyhow::Result<usize> {
    let conninfo = conninfo::parse(dsn)?;
    let config = conninfo.postgres_config()?;
    let hosts = config.get_hosts();
    if hosts.len() <= 1 {
        return Ok(0);
    }
    if config.get_target_session_attrs() != TargetSessionAttrs::ReadWrite {
        bail!(
            "--dsn names {} hosts but not target_session_attrs=read-write: add it, so that \
             the agent streams from and pins on the primary, whichever host it is",
            hosts.len()
        );
    }
    let row = sql
        .client
        .query_one(
            "SELECT host(inet_server_addr()), current_setting('port')::int",
            &[],
        )
        .await?;
    let (address, port): (Option<String>, i32) = (row.get(0), row.get(1));
    let address = address.and_then(|text| text.parse::<IpAddr>().ok());
    for (index, host) in hosts.iter().enumerate() {
        if host_port(&config, index) != u16::try_from(port).unwrap_or(0) {
            continue;
        }
        let reached = match (host, address) {
            (Host::Unix(_), None) => true,
            (Host::Tcp(name), Some(address)) => resolves_to(name, address).await,
            _ => false,
        };
        if reached {
            return Ok(index);
        }
    }
    let reached: String = sql.client.query_one(SERVER_IDENTITY, &[]).await?.get(0);
    let mut same = Vec::new();
    for index in 0..hosts.len() {
        if identity_of(&config, &conninfo, index).await.as_deref() == Some(reached.as_str()) {
            same.push(index);
        }
    }
    match same[..] {
        [index] => Ok(index),
        _ => bail!(
            "cannot tell which of --dsn's hosts the primary is (it answers on {address:?} port \
             {port}, and {} of the hosts say they are that server): name each server once",
            same.len()
        ),
    }
}

/// What tells one running server from every other: its port, when its postmaster started
/// (to the microsecond) and whether it is a primary.
const SERVER_IDENTITY: &str =
    "SELECT format('%s %s %s', current_setting('port'), pg_postmaster_start_time(), \
                   pg_is_in_recovery())";

/// [`SERVER_IDENTITY`] of `config`'s `index`-th host alone; `None` if it cannot be asked.
async fn identity_of(
    config: &tokio_postgres::Config,
    conninfo: &Conninfo,
    index: usize,
) -> Option<String> {
    let one = one_host(config, index, Duration::from_secs(5))?;
    let session = connect_config(one, conninfo, "txcache-agent host probe")
        .await
        .ok()?;
    let row = session.client.query_one(SERVER_IDENTITY, &[]).await.ok()?;
    Some(row.get(0))
}

/// How long a host of a connection string naming several is given to answer, unless it
/// sets `connect_timeout`: a stopped server accepts the TCP connection and never answers.
pub const HOST_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens an SQL session named `application` with `dsn`'s `index`-th host alone, which must
/// answer within its `connect_timeout` (10 s without one), start-up included.
pub async fn connect_host(
    dsn: &str,
    index: usize,
    application: &str,
) -> anyhow::Result<SqlSession> {
    let conninfo = conninfo::parse(dsn)?;
    let config = conninfo.postgres_config()?;
    let wait = answer_wait(&config);
    let one = one_host(&config, index, wait).context("no such host")?;
    tokio::time::timeout(wait, connect_config(one, &conninfo, application))
        .await
        .map_err(|_| NoAnswer { within: wait })?
}

/// Opens an SQL session with the server of `dsn` that its settings choose (as
/// [`connect_sql`]), which must answer within its hosts' `connect_timeout` each.
pub async fn connect_sql_within(dsn: &str, application: &str) -> anyhow::Result<SqlSession> {
    let hosts = u32::try_from(hosts_of(dsn)?.len().max(1)).unwrap_or(u32::MAX);
    let wait = answer_timeout(dsn)?.saturating_mul(hosts);
    tokio::time::timeout(wait, connect_sql(dsn, application))
        .await
        .map_err(|_| NoAnswer { within: wait })?
}

/// A server that accepted a connection and did not answer in time: stopped, or cut off
/// after the handshake (an answer, even a refusal, is no hang).
#[derive(Debug, thiserror::Error)]
#[error("no answer within {within:?}")]
pub struct NoAnswer {
    /// How long it was given.
    pub within: Duration,
}

/// How long a host of `dsn` is given to answer: its `connect_timeout`, else 10 s.
pub fn answer_timeout(dsn: &str) -> anyhow::Result<Duration> {
    let conninfo = conninfo::parse(dsn)?;
    let config = conninfo.postgres_config()?;
    Ok(answer_wait(&config))
}

fn answer_wait(config: &tokio_postgres::Config) -> Duration {
    config
        .get_connect_timeout()
        .copied()
        .unwrap_or(HOST_ANSWER_TIMEOUT)
}

/// `ask`'s answer on `client`'s replication session, which must come within `wait`: a
/// server that accepted the connection and then hangs (stopped, or cut off after the
/// handshake) would hold the caller forever. On a timeout the session is aborted.
pub async fn answered_within<T>(
    client: &mut ReplicationClient,
    wait: Duration,
    what: &str,
    ask: impl AsyncFnOnce(&mut ReplicationClient) -> pgwire_replication::Result<T>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(wait, ask(client)).await {
        Ok(answer) => answer.with_context(|| what.to_owned()),
        Err(_) => {
            client.abort();
            let error = anyhow::Error::new(NoAnswer { within: wait });
            Err(error.context(format!("{what}: the server accepted the replication connection but did not answer (the host's connect_timeout)")))
        }
    }
}

/// One host of a connection string, for the replication sessions that ask its walsender
/// what only a walsender says (`IDENTIFY_SYSTEM`, `TIMELINE_HISTORY`).
#[derive(Clone, Copy, Debug)]
pub struct ReplicationHost<'a> {
    /// The connection string.
    pub dsn: &'a str,
    /// Which of its hosts.
    pub host: usize,
    /// The slot and publication a replication session names (unused by the questions).
    pub slot: &'a str,
    /// See `slot`.
    pub publication: &'a str,
}

impl ReplicationHost<'_> {
    /// `ask`'s answer on a replication session opened for it (no stream started) and closed
    /// after, within the host's `connect_timeout` ([`answered_within`]).
    pub async fn ask<T>(
        &self,
        what: &str,
        ask: impl AsyncFnOnce(&mut ReplicationClient) -> pgwire_replication::Result<T>,
    ) -> anyhow::Result<T> {
        let start = Lsn::from_u64(0);
        let config = replication_config(self.dsn, self.host, self.slot, self.publication, start)?
            .with_application_name(application_name("txcache-agent timeline"));
        let mut asking = Asking {
            client: ReplicationClient::connect_gated(config).await?,
            answered: false,
        };
        let wait = answer_timeout(self.dsn)?;
        let answer = answered_within(&mut asking.client, wait, what, ask).await;
        asking.answered = true;
        answer
    }
}

/// A gated replication session asked one question: dropped once answered, it ends
/// gracefully; dropped before (its caller gave up), it is aborted, since the session's
/// worker heeds no stop while it connects or waits for an answer.
struct Asking {
    client: ReplicationClient,
    answered: bool,
}

impl Drop for Asking {
    fn drop(&mut self) {
        if !self.answered {
            self.client.abort();
        }
    }
}

/// How many hosts `dsn` names, and each as `host:port`, for messages.
pub fn hosts_of(dsn: &str) -> anyhow::Result<Vec<String>> {
    let conninfo = conninfo::parse(dsn)?;
    let config = conninfo.postgres_config()?;
    let names = config.get_hosts().iter().enumerate().map(|(index, host)| {
        let port = host_port(&config, index);
        match host {
            Host::Tcp(name) => format!("{name}:{port}"),
            Host::Unix(path) => format!("{}:{port}", path.display()),
        }
    });
    Ok(names.collect())
}

/// `config` with its `index`-th host alone (its user, database, password, options and
/// `sslmode`), connecting within `wait`; `None` when there is no such host.
fn one_host(
    config: &tokio_postgres::Config,
    index: usize,
    wait: Duration,
) -> Option<tokio_postgres::Config> {
    let mut one = tokio_postgres::Config::new();
    if let Some(user) = config.get_user() {
        one.user(user);
    }
    if let Some(dbname) = config.get_dbname() {
        one.dbname(dbname);
    }
    if let Some(password) = config.get_password() {
        one.password(password);
    }
    if let Some(options) = config.get_options() {
        one.options(options);
    }
    match config.get_hosts().get(index)? {
        Host::Tcp(name) => one.host(name),
        Host::Unix(path) => one.host_path(path),
    };
    // A host cut off (not one that merely hangs: its kernel still acknowledges) fails
    // the session's statements within `wait`, rather than after the system's keepalive
    // default of two hours.
    one.port(host_port(config, index))
        .ssl_mode(config.get_ssl_mode())
        .connect_timeout(wait)
        .keepalives_idle(wait)
        .keepalives_interval(Duration::from_secs(1))
        .tcp_user_timeout(wait);
    Some(one)
}

/// The port of the `index`-th host: libpq's rule, one port for all or one per host.
fn host_port(config: &tokio_postgres::Config, index: usize) -> u16 {
    let ports = config.get_ports();
    let one = ports.first().copied().unwrap_or(5432);
    if ports.len() > 1 {
        ports.get(index).copied().unwrap_or(one)
    } else {
        one
    }
}

/// Whether host `name` is, or resolves to, `address`.
async fn resolves_to(name: &str, address: IpAddr) -> bool {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return ip == address;
    }
    tokio::net::lookup_host((name, 0))
        .await
        .is_ok_and(|mut found| found.any(|each| each.ip() == address))
}

/// The replication settings for `dsn`'s `host`-th host ([`reached_host`]), streaming `slot`
/// over `publication` from `start`.
pub fn replication_config(
    dsn: &str,
    host: usize,
    slot: &str,
    publication: &str,
    start: Lsn,
) -> anyhow::Result<ReplicationConfig> {
    let conninfo = conninfo::parse(dsn)?;
    let config = tokio_postgres::Config::from_str(&conninfo.rest).context("invalid --dsn")?;
    let user = config.get_user().context("--dsn names no user")?;
    let password = config
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let database = config.get_dbname().unwrap_or(user);
    let port = host_port(&config, host);
    let (host, tls) = match config.get_hosts().get(host) {
        Some(Host::Tcp(host)) => (host.clone(), replication_tls(&conninfo, host)?),
        // As libpq: no TLS over a Unix socket.
        Some(Host::Unix(path)) => (path.to_string_lossy().into_owned(), TlsConfig::disabled()),
        None => bail!("--dsn names no host"),
    };
    Ok(
        ReplicationConfig::new(host, user, password, database, slot, publication)
            .with_port(port)
            .with_tls(tls)
            .with_start_lsn(start)
            .with_status_interval(Duration::from_millis(100))
            .with_wakeup_interval(Duration::from_secs(1)),
    )
}

/// The replication stream's TLS, checking what the SQL connections check. The host is
/// passed as the name to verify, so an IP address is checked against the certificate's IP
/// names (as libpq does) instead of being refused.
fn replication_tls(conninfo: &Conninfo, host: &str) -> anyhow::Result<TlsConfig> {
    use pgwire_replication::SslMode as Mode;
    let verify = conninfo.tls.verify()?;
    let mode = match (&verify, conninfo.tls.mode) {
        (None, _) => return Ok(TlsConfig::disabled()),
        (Some(Verify::Nothing), mode) if !mode.requires_tls() => Mode::Prefer,
        (Some(Verify::Nothing), _) => Mode::Require,
        (Some(Verify::Full(_)), _) => Mode::VerifyFull,
    };
    let ca_pem_path = match &verify {
        Some(Verify::Full(txcache_tls::Trust::File(path))) => Some(path.clone()),
        _ => None,
    };
    let (client_cert_pem_path, client_key_pem_path) = match &conninfo.tls.identity {
        Some((cert, key)) => (Some(cert.clone()), Some(key.clone())),
        None => (None, None),
    };
    Ok(TlsConfig {
        mode,
        ca_pem_path,
        sni_hostname: Some(host.to_owned()),
        client_cert_pem_path,
        client_key_pem_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A database down for 34 s (the probe's outage) is tried about every second, and the
    /// session opens within the cap once it is back.
    #[tokio::test(start_paused = true)]
    async fn a_background_connection_backs_off_while_the_database_is_down() {
        let start = Instant::now();
        let back_at = start + Duration::from_secs(34);
        let attempts = Cell::new(0);
        let opened = retry_until_ok("txcache-agent test", || {
            attempts.set(attempts.get() + 1);
            let up = Instant::now() >= back_at;
            async move {
                if up {
                    Ok(Instant::now())
                } else {
                    anyhow::bail!("connection refused")
                }
            }
        })
        .await;
        assert!(opened - back_at <= RECONNECT_CAP, "{:?}", opened - back_at);
        // 0.1 + 0.2 + 0.4 + 0.8 s, then every second: about 37 attempts to cover 34 s.
        assert!((30..=40).contains(&attempts.get()), "{}", attempts.get());
    }
}

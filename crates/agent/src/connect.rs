//! Connections to PostgreSQL: plain SQL sessions and the replication stream.

use anyhow::{bail, Context as _};
use pgwire_replication::{Lsn, ReplicationConfig};
use std::str::FromStr;
use std::time::Duration;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, NoTls};

/// An SQL session, with the server's version.
pub struct SqlSession {
    /// The client; its connection runs on a spawned task.
    pub client: Client,
    /// `server_version_num`, e.g. 180006.
    pub server_version_num: u32,
}

/// Opens an SQL session named `application` (visible in `pg_stat_activity`).
pub async fn connect_sql(dsn: &str, application: &str) -> anyhow::Result<SqlSession> {
    let mut config = tokio_postgres::Config::from_str(dsn).context("invalid --dsn")?;
    config.application_name(application);
    let (client, connection) = config
        .connect(NoTls)
        .await
        .context("cannot connect to PostgreSQL")?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "SQL connection ended");
        }
    });
    let version: String = client
        .query_one("SHOW server_version_num", &[])
        .await?
        .get(0);
    Ok(SqlSession {
        client,
        server_version_num: version.parse().unwrap_or(0),
    })
}

/// The replication settings for `dsn`, streaming `slot` over `publication` from `start`.
pub fn replication_config(
    dsn: &str,
    slot: &str,
    publication: &str,
    start: Lsn,
) -> anyhow::Result<ReplicationConfig> {
    let config = tokio_postgres::Config::from_str(dsn).context("invalid --dsn")?;
    let user = config.get_user().context("--dsn names no user")?;
    let password = config
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let database = config.get_dbname().unwrap_or(user);
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.to_string_lossy().into_owned(),
        None => bail!("--dsn names no host"),
    };
    Ok(
        ReplicationConfig::new(host, user, password, database, slot, publication)
            .with_port(port)
            .with_start_lsn(start)
            .with_status_interval(Duration::from_millis(100))
            .with_wakeup_interval(Duration::from_secs(1)),
    )
}

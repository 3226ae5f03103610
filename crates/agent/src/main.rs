//! txcache-agent: the database side of txcache.

use anyhow::Context as _;
use clap::Parser;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;
use txcache_agent::cmd::Endpoint;
use txcache_agent::config::Config;
use txcache_agent::connect::{connect_sql, reached_host};
use txcache_agent::fanout::{Fanout, LinkSettings};
use txcache_agent::metrics::{self, Sources};
use txcache_agent::node_link::NodeAddress;
use txcache_agent::pincushion::{PinSettings, Pincushion};
use txcache_agent::stream::Stream;
use txcache_agent::stream_stats::StreamStats;
use txcache_agent::tracker::StreamTracker;
use txcache_agent::{database, heartbeat, server, shared_catalog};

fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    txcache_tls::install_default_provider();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&config.log)?)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    let started = Instant::now();
    let node_tls = node_tls(&config).context("--node-tls-ca")?;
    let endpoint_tls = txcache_tls::acceptor(config.tls_cert.as_deref(), config.tls_key.as_deref())
        .context("cannot serve TLS")?;
    // Check the database once up front, so a wrong setting fails loudly at start.
    let sql = connect_sql(&config.dsn, "txcache-agent").await?;
    reached_host(&config.dsn, &sql).await?;
    let slot = database::slot_state(&sql, &config.slot).await?;
    database::require_ddl_tracking(&sql).await?;
    // Transactions running now may have committed below the resume point without being
    // visible yet: pins wait until they are seen finished (certify.rs, the floor).
    let pending_xid = database::floor_xid(&sql).await?;
    let tracker = Arc::new(StreamTracker::new(slot.confirmed, pending_xid));
    let fanout = Fanout::new(&config.nodes, slot.confirmed, config.replay_buffer);
    // Before any node connects: a node past this position is past the database.
    fanout.set_database_position(database::position(&sql).await?);
    fanout.follow_history(&database::history(&sql).await?, slot.confirmed);
    let database = database::identity(&sql).await?;
    drop(sql);
    fanout.spawn_nodes(LinkSettings {
        password: config.node_password.clone(),
        tls: node_tls,
        spacing: config.delivery_spacing,
        dsn: config.dsn.clone(),
    });
    let stream_stats = Arc::new(StreamStats::default());
    tokio::spawn(heartbeat::run(
        config.dsn.clone(),
        config.heartbeat_interval,
        Arc::clone(&stream_stats),
    ));
    tokio::spawn(shared_catalog::run(
        config.dsn.clone(),
        config.shared_catalog_interval,
    ));
    let settings = PinSettings {
        pin_interval: config.pin_interval,
        max_staleness: config.max_staleness,
        lease: config.pin_lease,
    };
    let pincushion = Pincushion::start(config.dsn.clone(), settings, Arc::clone(&tracker));
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {} (try --listen)", config.listen))?;
    tracing::info!(address = %listener.local_addr()?, nodes = config.nodes.len(), slot = %config.slot, tls = endpoint_tls.is_some(), "txcache-agent listening");
    let clients = Arc::new(AtomicUsize::new(0));
    let sources = Arc::new(Sources {
        started,
        clients: Arc::clone(&clients),
        stream: Arc::clone(&stream_stats),
        tracker: Arc::clone(&tracker),
        fanout: Arc::clone(&fanout),
        pincushion: Arc::clone(&pincushion),
    });
    let endpoint = Arc::new(Endpoint {
        pincushion,
        tracker: Arc::clone(&tracker),
        database,
        password: config.password.clone(),
        metrics: Arc::clone(&sources),
    });
    if let Some(port) = config.metrics_port {
        let address = SocketAddr::new(config.listen.ip(), port);
        let metrics_listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| {
                format!("cannot listen for metrics on {address} (try --metrics-port)")
            })?;
        tracing::info!(address = %metrics_listener.local_addr()?, "metrics at /metrics");
        let render = move || metrics::REGISTRY.prometheus(&metrics::collect(&sources));
        tokio::spawn(txcache_metrics::http::serve(metrics_listener, render));
    }
    tokio::spawn(server::run(listener, endpoint, clients, endpoint_tls));
    tokio::select! {
        () = Stream::new(config, fanout, tracker, stream_stats).run() => Ok(()),
        signal = shutdown_signal() => {
            tracing::info!(signal, "shutting down");
            Ok(())
        }
    }
}

/// How the agent checks `rediss://` nodes; `None` when every node is plain (a bad address
/// is refused here, before anything starts).
fn node_tls(config: &Config) -> anyhow::Result<Option<Arc<txcache_tls::ClientConfig>>> {
    let mut any_tls = false;
    for address in &config.nodes {
        any_tls |= NodeAddress::parse(address)?.tls;
    }
    if !any_tls {
        return Ok(None);
    }
    let trust = match &config.node_tls_ca {
        Some(path) => txcache_tls::Trust::File(path.clone()),
        None => txcache_tls::Trust::PublicRoots,
    };
    let verify = txcache_tls::Verify::Full(trust);
    Ok(Some(txcache_tls::client_config(&verify, None)?))
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

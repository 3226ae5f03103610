//! txcache-agent: the database side of txcache.

use anyhow::Context as _;
use clap::Parser;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;
use txcache_agent::cmd::{Active, Endpoint, Role};
use txcache_agent::config::Config;
use txcache_agent::connect::{connect_sql, reached_host};
use txcache_agent::fanout::{Fanout, LinkSettings};
use txcache_agent::lease::{self, Acquired, LeaseSettings};
use txcache_agent::metrics::{self, Sources};
use txcache_agent::node_link::NodeAddress;
use txcache_agent::pincushion::{PinSettings, Pincushion};
use txcache_agent::stream::Stream;
use txcache_agent::stream_stats::StreamStats;
use txcache_agent::term::{Holder, Term};
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
    let started = Instant::now();
    let listeners = Listeners::bind(&config)?;
    tracing::info!(address = %listeners.address, nodes = config.nodes.len(), slot = %config.slot, tls = config.tls_cert.is_some(), "txcache-agent listening");
    let lease = LeaseSettings {
        dsn: config.dsn.clone(),
        slot: config.slot.clone(),
        holder: format!("{} (pid {})", listeners.address, std::process::id()),
        duration: config.lease,
    };
    // Each standby wait and each term runs on a runtime of its own: dropping it ends every
    // task and session of the term at once, so nothing of a lost term acts on.
    loop {
        let Some(acquired) = runtime()?.block_on(stand_by(&config, &listeners, &lease))? else {
            return Ok(());
        };
        match runtime()?.block_on(run(&config, &listeners, &lease, acquired, started)) {
            Ok(TermEnd::Shutdown) => return Ok(()),
            Ok(TermEnd::TakenOver) => {}
            // The lease goes with the term's sessions: another agent may take it, or this
            // one again after a pause; a wrong setting fails the standby's checks instead.
            Err(error) => {
                tracing::error!(
                    error = format!("{error:#}"),
                    "the term as the active agent failed to start; standing by again"
                );
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// How a term ended.
#[derive(Debug, PartialEq, Eq)]
enum TermEnd {
    /// A signal: the lease was released and the agent exits.
    Shutdown,
    /// Another agent took the lease: this one stands by again.
    TakenOver,
}

/// The addresses the agent serves, bound once for every term: libraries and scrapers find
/// it at one address whether it is active or standing by.
struct Listeners {
    library: std::net::TcpListener,
    metrics: Option<std::net::TcpListener>,
    address: SocketAddr,
}

impl Listeners {
    fn bind(config: &Config) -> anyhow::Result<Self> {
        let library = std::net::TcpListener::bind(config.listen)
            .with_context(|| format!("cannot listen on {} (try --listen)", config.listen))?;
        library.set_nonblocking(true)?;
        let address = library.local_addr()?;
        let metrics = match config.metrics_port {
            None => None,
            Some(port) => {
                let address = SocketAddr::new(config.listen.ip(), port);
                let listener = std::net::TcpListener::bind(address).with_context(|| {
                    format!("cannot listen for metrics on {address} (try --metrics-port)")
                })?;
                listener.set_nonblocking(true)?;
                tracing::info!(address = %listener.local_addr()?, "metrics at /metrics");
                Some(listener)
            }
        };
        Ok(Self {
            library,
            metrics,
            address,
        })
    }

    /// The libraries' listener, for the running runtime.
    fn library(&self) -> anyhow::Result<tokio::net::TcpListener> {
        Ok(tokio::net::TcpListener::from_std(
            self.library.try_clone()?,
        )?)
    }

    /// Serves `render` at `GET /metrics` on the running runtime, if a port was given.
    fn serve_metrics(
        &self,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> anyhow::Result<()> {
        if let Some(listener) = &self.metrics {
            let listener = tokio::net::TcpListener::from_std(listener.try_clone()?)?;
            tokio::spawn(txcache_metrics::http::serve(listener, render));
        }
        Ok(())
    }
}

/// Checks the database (a wrong setting fails loudly at start, on a standby too), then
/// answers libraries with `STANDBY` until this agent takes the lease; `None` on a signal.
async fn stand_by(
    config: &Config,
    listeners: &Listeners,
    lease: &LeaseSettings,
) -> anyhow::Result<Option<Acquired>> {
    let sql = connect_sql(&config.dsn, "txcache-agent").await?;
    reached_host(&config.dsn, &sql).await?;
    database::slot_state(&sql, &config.slot).await?;
    database::require_ddl_tracking(&sql).await?;
    lease::require_table(&sql).await?;
    drop(sql);
    let holder = Arc::new(Holder::default());
    let endpoint = Arc::new(Endpoint {
        password: config.password.clone(),
        role: Role::Standby(Arc::clone(&holder)),
    });
    let tls = endpoint_tls(config)?;
    let clients = Arc::new(AtomicUsize::new(0));
    tokio::spawn(server::run(listeners.library()?, endpoint, clients, tls));
    listeners.serve_metrics(metrics::standby_text)?;
    tokio::select! {
        acquired = lease::acquire(lease, &holder) => Ok(Some(acquired)),
        signal = shutdown_signal() => {
            tracing::info!(signal, "shutting down");
            Ok(None)
        }
    }
}

/// One term as the active agent: streams, pins and delivers until the lease is taken over
/// or a signal comes.
async fn run(
    config: &Config,
    listeners: &Listeners,
    lease: &LeaseSettings,
    acquired: Acquired,
    started: Instant,
) -> anyhow::Result<TermEnd> {
    let term = Arc::new(Term::new(
        acquired.epoch,
        lease.holder.clone(),
        acquired.sent_at + lease.valid_for(),
    ));
    // At once, from this term's own session: the standby's ended with its runtime.
    let keeper = tokio::spawn({
        let (lease, term) = (lease.clone(), Arc::clone(&term));
        async move { lease::keep(&lease, &term).await }
    });
    tracing::info!(epoch = acquired.epoch, holder = %lease.holder, "this agent holds the lease: it is the active agent");
    let node_tls = node_tls(config).context("--node-tls-ca")?;
    let sql = connect_sql(&config.dsn, "txcache-agent").await?;
    lease::evict(&sql, &config.slot, acquired.previous_pid).await;
    let slot = database::slot_state(&sql, &config.slot).await?;
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
        term: Arc::clone(&term),
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
    let clients = Arc::new(AtomicUsize::new(0));
    let sources = Arc::new(Sources {
        started,
        clients: Arc::clone(&clients),
        stream: Arc::clone(&stream_stats),
        tracker: Arc::clone(&tracker),
        fanout: Arc::clone(&fanout),
        pincushion: Arc::clone(&pincushion),
        term: Arc::clone(&term),
    });
    let endpoint = Arc::new(Endpoint {
        password: config.password.clone(),
        role: Role::Active(Active {
            pincushion,
            tracker: Arc::clone(&tracker),
            database,
            metrics: Arc::clone(&sources),
            term: Arc::clone(&term),
        }),
    });
    listeners.serve_metrics(move || metrics::REGISTRY.prometheus(&metrics::collect(&sources)))?;
    tokio::spawn(server::run(
        listeners.library()?,
        endpoint,
        clients,
        endpoint_tls(config)?,
    ));
    let stream = Stream::new(
        config.clone(),
        fanout,
        tracker,
        stream_stats,
        Arc::clone(&term),
    );
    tokio::select! {
        () = stream.run() => unreachable!("the stream reconnects forever"),
        _ = keeper => {
            tracing::error!(epoch = term.epoch(), "LEASE TAKEN OVER: another agent is active now; this one stops streaming and delivering and stands by (nodes refuse its epoch)");
            Ok(TermEnd::TakenOver)
        }
        signal = shutdown_signal() => {
            tracing::info!(signal, "shutting down");
            term.end();
            lease::release(lease, term.epoch()).await;
            Ok(TermEnd::Shutdown)
        }
    }
}

/// How libraries' connections are secured (`--tls-cert`), `None` for plain TCP.
fn endpoint_tls(config: &Config) -> anyhow::Result<Option<txcache_tls::TlsAcceptor>> {
    txcache_tls::acceptor(config.tls_cert.as_deref(), config.tls_key.as_deref())
        .context("cannot serve TLS")
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

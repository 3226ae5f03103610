//! txcache-agent: the database side of txcache.

use anyhow::Context as _;
use clap::Parser;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, Signal, SignalKind};
use txcache_agent::cmd::{Active, Endpoint, Role};
use txcache_agent::config::{Config, DdlTracking, Membership, PrimaryPins};
use txcache_agent::connect::{self, connect_sql_within, reached_host};
use txcache_agent::decoding::{self, DecodingServers};
use txcache_agent::fanout::{Fanout, LinkSettings};
use txcache_agent::fingerprint_check::FingerprintCheck;
use txcache_agent::lease::{self, Acquired, LeaseSettings};
use txcache_agent::membership;
use txcache_agent::metrics::{self, Sources};
use txcache_agent::node_link::NodeAddress;
use txcache_agent::pincushion::{PinSettings, PinSource, Pincushion};
use txcache_agent::schema_digests::SchemaDigests;
use txcache_agent::schema_watch;
use txcache_agent::stream::Stream;
use txcache_agent::stream_stats::StreamStats;
use txcache_agent::term::{Holder, Term};
use txcache_agent::tracker::StreamTracker;
use txcache_agent::{database, heartbeat, server, shared_catalog};

/// The targets the agent's lines are logged under, which `--log` may name alone.
const LOG_TARGETS: [&str; 9] = [
    "txcache_agent",
    "txcache_resp",
    "txcache_tls",
    "txcache_metrics",
    "txcache_model",
    "tokio_postgres",
    "pgwire_replication",
    "rustls",
    "tokio",
];

fn main() -> anyhow::Result<()> {
    let config = Config::parse()
        .without_blank_nodes()
        .checked()
        .unwrap_or_else(|error| error.exit());
    txcache_tls::install_default_provider();
    let log_filter = txcache_metrics::log::filter(&config.log, "--log (TXCACHE_LOG)", &LOG_TARGETS)
        .unwrap_or_else(|message| {
            eprintln!("txcache-agent: {message}");
            std::process::exit(2);
        });
    txcache_metrics::log::init(log_filter);
    let started = Instant::now();
    let listeners = Listeners::bind(&config)?;
    tracing::info!(address = %listeners.address, membership = config.membership().as_str(), nodes = config.nodes.len(), slot = %config.slot, tls = config.tls_cert.is_some(), standbys = config.standbys.len(), "txcache-agent listening");
    // Checked once, before anything: a wrong file fails the start, not every term.
    let tls = Tls {
        nodes: node_tls(&config)?,
        libraries: endpoint_tls(&config)?,
    };
    let lease = LeaseSettings {
        dsn: config.dsn.clone(),
        slot: config.slot.clone(),
        holder: format!(
            "{} on {} (pid {})",
            listeners.address,
            hostname(),
            std::process::id()
        ),
        duration: config.lease,
    };
    // Each standby wait and each term runs on a runtime of its own: dropping it ends every
    // task and session of the term at once, so nothing of a lost term acts on.
    let mut started_once = false;
    loop {
        let acquired = match runtime()?.block_on(stand_by(&config, &listeners, &lease, &tls)) {
            Ok(Some(acquired)) => acquired,
            Ok(None) => return Ok(()),
            // At start a failed check is a wrong setting; later, the database restarting.
            Err(error) if !started_once => return Err(error),
            Err(error) => {
                tracing::error!(
                    error = format!("{error:#}"),
                    "cannot stand by; trying again"
                );
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        started_once = true;
        match runtime()?.block_on(run(&config, &listeners, &lease, &tls, acquired, started)) {
            Ok(TermEnd::Shutdown) => return Ok(()),
            Ok(TermEnd::TakenOver) => {}
            // The lease goes with the term's sessions: another agent may take it, or this
            // one again after a pause.
            Err(error) => {
                tracing::error!(
                    error = format!("{error:#}"),
                    "the term as the active agent failed to start; standing by again"
                );
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// How the agent speaks TLS, read once at start.
struct Tls {
    /// To `rediss://` nodes (`--node-tls-ca`); `None` when every node is plain.
    nodes: Option<Arc<txcache_tls::ClientConfig>>,
    /// To libraries (`--tls-cert`); `None` for plain TCP.
    libraries: Option<txcache_tls::TlsAcceptor>,
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
    tls: &Tls,
) -> anyhow::Result<Option<Acquired>> {
    let mut shutdown = Shutdown::listen();
    connect::name_sessions_for(0);
    tracing::info!("checking the database (each host must answer within its connect_timeout, 10 s without one)");
    tokio::select! {
        checked = check_database(config) => checked?,
        signal = shutdown.recv() => {
            tracing::info!(signal, "shutting down");
            return Ok(None);
        }
    }
    let holder = Arc::new(Holder::default());
    let endpoint = Arc::new(Endpoint {
        password: config.password.clone(),
        role: Role::Standby(Arc::clone(&holder)),
    });
    let clients = Arc::new(AtomicUsize::new(0));
    let libraries_tls = tls.libraries.clone();
    tokio::spawn(server::run(
        listeners.library()?,
        endpoint,
        clients,
        libraries_tls,
    ));
    listeners.serve_metrics(metrics::standby_text)?;
    tokio::select! {
        acquired = lease::acquire(lease, &holder) => Ok(Some(acquired)),
        signal = shutdown.recv() => {
            tracing::info!(signal, "shutting down");
            Ok(None)
        }
    }
}

/// What the agent needs of the database, checked before it stands by: a wrong setting
/// fails loudly at start. Every host must answer within its `connect_timeout` (10 s
/// without one): a server that accepts connections and never answers is no reason to hang.
async fn check_database(config: &Config) -> anyhow::Result<()> {
    let sql = connect_sql_within(&config.dsn, "txcache-agent").await?;
    reached_host(&config.dsn, &sql).await?;
    match &config.decode_from {
        None => {
            database::slot_state(&sql, &config.slot).await?;
        }
        Some(dsn) => {
            decoding::require_decoding_hosts(dsn, &database::identity(&sql).await?).await?;
        }
    }
    database::require_ddl_tracking(&sql, config.ddl_tracking).await?;
    lease::require_table(&sql).await?;
    if config.membership() == Membership::Database {
        membership::require_table(&sql).await?;
    }
    Ok(())
}

/// One term as the active agent: streams, pins and delivers until the lease is taken over
/// or a signal comes (a signal while the term starts too).
async fn run(
    config: &Config,
    listeners: &Listeners,
    lease: &LeaseSettings,
    tls: &Tls,
    acquired: Acquired,
    started: Instant,
) -> anyhow::Result<TermEnd> {
    let mut shutdown = Shutdown::listen();
    connect::name_sessions_for(acquired.epoch);
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
    let stream = tokio::select! {
        stream = start_term(config, listeners, tls, &acquired, &term, started) => stream?,
        signal = shutdown.recv() => return Ok(shut_down(signal, &term, lease).await),
    };
    tokio::select! {
        () = stream.run() => unreachable!("the stream reconnects forever"),
        _ = keeper => {
            tracing::error!(epoch = term.epoch(), "LEASE TAKEN OVER: another agent is active now; this one stops streaming and delivering and stands by (nodes refuse its epoch)");
            Ok(TermEnd::TakenOver)
        }
        signal = shutdown.recv() => Ok(shut_down(signal, &term, lease).await),
    }
}

/// Ends the term on a signal: nothing more is sent, and the lease is released for a
/// standby to take at once.
async fn shut_down(signal: &str, term: &Term, lease: &LeaseSettings) -> TermEnd {
    tracing::info!(signal, "shutting down");
    term.end();
    lease::release(lease, term.epoch()).await;
    TermEnd::Shutdown
}

/// Starts a term's work — the stream's position, the nodes' delivery, the pins, the
/// library endpoint — and returns the stream to run.
async fn start_term(
    config: &Config,
    listeners: &Listeners,
    tls: &Tls,
    acquired: &Acquired,
    term: &Arc<Term>,
    started: Instant,
) -> anyhow::Result<Stream> {
    let sql = connect_sql_within(&config.dsn, "txcache-agent").await?;
    lease::evict(&sql, &config.slot, acquired).await;
    let database = database::identity(&sql).await?;
    let decoding = Arc::new(DecodingServers::new(config, database.clone())?);
    let slot = match &config.decode_from {
        None => database::slot_state(&sql, &config.slot).await?,
        Some(_) => {
            let server = decoding.open("txcache-agent slot").await?;
            // The previous agent's walsender (and sessions) there hold the slot.
            lease::evict(&server.sql, &config.slot, acquired).await;
            database::standby_slot(&sql, &server.sql, &config.slot, decoding.primary_slot()).await?
        }
    };
    if decoding.silence_limit().is_some() {
        let tending = Arc::clone(&decoding).tend_other_hosts(config.dsn.clone(), Arc::clone(term));
        tokio::spawn(tending);
    }
    // Transactions running now may have committed below the resume point without being
    // visible yet: pins wait until they are seen finished (certify.rs, the floor).
    let pending_xid = database::floor_xid(&sql).await?;
    let tracker = Arc::new(StreamTracker::new(slot.confirmed, pending_xid));
    let (nodes, watch) = match config.membership() {
        Membership::Static => (config.nodes.clone(), None),
        Membership::Database => {
            let (watch, nodes) = membership::Watch::start(&sql, &config.slot).await?;
            (nodes, Some(watch))
        }
    };
    let fanout = Fanout::new(&nodes, slot.confirmed, config.replay_buffer);
    // Before any node connects: a node past this position is past the database.
    fanout.set_database_position(database::position(&sql).await?);
    fanout.follow_history(&database::history(&sql, None).await?, slot.confirmed);
    drop(sql);
    fanout.spawn_nodes(LinkSettings {
        password: config.node_password.clone(),
        tls: tls.nodes.clone(),
        spacing: config.delivery_spacing,
        dsn: config.dsn.clone(),
        database: database.stream_name(),
        term: Arc::clone(term),
    });
    if let Some(watch) = watch {
        let (dsn, interval) = (config.dsn.clone(), config.membership_interval);
        tokio::spawn(watch.run(dsn, interval, Arc::clone(&fanout)));
    }
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
        on_demand: config.primary_pins == PrimaryPins::OnDemand,
    };
    // Without the DDL triggers every pin's fingerprint is checked; with them, the schema
    // at a pin taken every --schema-check-interval.
    let fingerprints = (config.ddl_tracking == DdlTracking::Fingerprint)
        .then(|| FingerprintCheck::new(config.dsn.clone(), Arc::clone(&stream_stats)))
        .map(Box::new);
    let pincushion = Pincushion::start(
        config.dsn.clone(),
        settings.clone(),
        Arc::clone(&tracker),
        PinSource::Primary { fingerprints },
    );
    let standbys = standby_pincushions(config, &settings, &tracker, &database);
    let schema_digests = Arc::new(SchemaDigests::default());
    if config.ddl_tracking == DdlTracking::Triggers {
        tokio::spawn(schema_watch::run(
            config.dsn.clone(),
            config.schema_check_interval,
            Arc::clone(&pincushion),
            Arc::clone(&schema_digests),
            Arc::clone(&stream_stats),
        ));
    }
    let clients = Arc::new(AtomicUsize::new(0));
    let sources = Arc::new(Sources {
        started,
        clients: Arc::clone(&clients),
        stream: Arc::clone(&stream_stats),
        tracker: Arc::clone(&tracker),
        fanout: Arc::clone(&fanout),
        pincushion: Arc::clone(&pincushion),
        standbys: standbys.clone(),
        term: Arc::clone(term),
    });
    let endpoint = Arc::new(Endpoint {
        password: config.password.clone(),
        role: Role::Active(Active {
            pincushion,
            standbys,
            tracker: Arc::clone(&tracker),
            database,
            nodes: Arc::clone(&fanout),
            membership: config.membership(),
            metrics: Arc::clone(&sources),
            term: Arc::clone(term),
        }),
    });
    listeners.serve_metrics(move || metrics::REGISTRY.prometheus(&metrics::collect(&sources)))?;
    tokio::spawn(server::run(
        listeners.library()?,
        endpoint,
        clients,
        tls.libraries.clone(),
    ));
    Ok(Stream::new(
        config.clone(),
        decoding,
        fanout,
        tracker,
        stream_stats,
        Arc::clone(term),
        schema_digests,
    ))
}

/// One pincushion per `--standby`, in the flags' order, placing their snapshots on the
/// primary's stream.
fn standby_pincushions(
    config: &Config,
    settings: &PinSettings,
    tracker: &Arc<StreamTracker>,
    primary: &database::DatabaseIdentity,
) -> Vec<Arc<Pincushion>> {
    let start = |standby: &txcache_agent::config::StandbyServer| {
        let source = PinSource::Standby {
            name: standby.name.clone(),
            primary: primary.clone(),
        };
        let dsn = standby.dsn.clone();
        // A standby is pinned at every interval: that is where misses are meant to run.
        let settings = PinSettings {
            on_demand: false,
            ..settings.clone()
        };
        Pincushion::start(dsn, settings, Arc::clone(tracker), source)
    };
    config.standbys.iter().map(start).collect()
}

/// How libraries' connections are secured (`--tls-cert`), `None` for plain TCP.
fn endpoint_tls(config: &Config) -> anyhow::Result<Option<txcache_tls::TlsAcceptor>> {
    txcache_tls::acceptor(config.tls_cert.as_deref(), config.tls_key.as_deref())
        .context("cannot serve TLS")
}

/// How the agent checks `rediss://` nodes; `None` when every `--node` is plain (a bad
/// address is refused here, before anything starts). With the membership from the
/// database, always: a `rediss://` node may join at any time (the public roots cost nothing
/// to load, they are compiled in).
fn node_tls(config: &Config) -> anyhow::Result<Option<Arc<txcache_tls::ClientConfig>>> {
    let mut any_tls = config.membership() == Membership::Database;
    for address in &config.nodes {
        let parsed =
            NodeAddress::parse(address).map_err(|error| anyhow::anyhow!("--node {error}"))?;
        any_tls |= parsed.tls;
    }
    if !any_tls {
        return Ok(None);
    }
    let trust = match &config.node_tls_ca {
        Some(path) => txcache_tls::Trust::File(path.clone()),
        None => txcache_tls::Trust::PublicRoots,
    };
    let verify = txcache_tls::Verify::Full(trust);
    let config = txcache_tls::client_config(&verify, None).context("--node-tls-ca")?;
    Ok(Some(config))
}

/// SIGINT and SIGTERM, listened for from the start of a runtime's work: tokio drops a
/// signal that arrives while nothing of the running runtime listens.
struct Shutdown(Option<(Signal, Signal)>);

impl Shutdown {
    /// Starts listening (on the running runtime).
    fn listen() -> Self {
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(interrupt), Ok(terminate)) => Self(Some((interrupt, terminate))),
            _ => Self(None),
        }
    }

    /// The next signal's name.
    async fn recv(&mut self) -> &'static str {
        let Some((interrupt, terminate)) = &mut self.0 else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        }
    }
}

/// The machine's name, for the lease's holder (agents in containers share pids and
/// addresses; which agent acts rests on the epoch, not on this name).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "unknown host".to_owned())
}

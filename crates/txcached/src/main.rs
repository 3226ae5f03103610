//! txcached: one txcache cache node.
//!
//! ```text
//!   clients (RESP) ──▶ server (accept) ──▶ connection task ──▶ cmd::execute
//!                                                                 │ lock one shard by key hash
//!   agent (RESP) ───▶ TXINVALIDATE / TXHEARTBEAT / TXRESET ──────▶ broadcast: every shard, in order
//! ```
//! Threads: a tokio runtime with one worker per core but one; each shard is a synchronous
//! `txcache_store::Store` behind its own mutex, never held across an await. A task sweeps
//! expired plain keys from the shards ten times a second.

mod cmd;
mod config;
mod connection;
mod fdlimit;
mod metrics;
mod node;
mod server;
mod shards;

use anyhow::Context as _;
use clap::Parser;
use config::Config;
use node::Node;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The targets txcached's lines are logged under, which `--log` may name alone.
const LOG_TARGETS: [&str; 8] = [
    "txcached",
    "txcache_store",
    "txcache_resp",
    "txcache_tls",
    "txcache_metrics",
    "txcache_model",
    "rustls",
    "tokio",
];

fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let log_filter =
        txcache_metrics::log::filter(&config.log, "--log (TXCACHED_LOG)", &LOG_TARGETS);
    let log_filter = config.check().and(log_filter).unwrap_or_else(|message| {
        eprintln!("txcached: {message}");
        std::process::exit(2);
    });
    txcache_metrics::log::init(log_filter);
    // Before any socket: the limit decides how many clients can connect at all.
    fdlimit::raise_for(config.max_clients);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads())
        .enable_all()
        .build()
        .context("could not start the runtime")?
        .block_on(run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    let address = SocketAddr::new(config.bind, config.port);
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} (port in use? try --port)"))?;
    let local = listener.local_addr()?;
    let tls = txcache_tls::acceptor(config.tls_cert.as_deref(), config.tls_key.as_deref())
        .context("cannot serve TLS")?;
    let node = Arc::new(Node::new(config));
    tracing::info!(
        address = %local,
        max_memory = node.max_memory(),
        shards = node.shards.len(),
        threads = node.config.worker_threads(),
        auth = node.config.password.is_some(),
        tls = tls.is_some(),
        "txcached listening"
    );
    if let Some(port) = node.config.metrics_port {
        let metrics_address = SocketAddr::new(node.config.bind, port);
        let metrics_listener = TcpListener::bind(metrics_address)
            .await
            .with_context(|| format!("cannot listen for metrics on {metrics_address}"))?;
        tracing::info!(address = %metrics_listener.local_addr()?, "metrics at /metrics");
        let node = Arc::clone(&node);
        let render = move || metrics::prometheus(&node);
        tokio::spawn(txcache_metrics::http::serve(metrics_listener, render));
    }
    tokio::spawn(sweep_expired(Arc::clone(&node)));
    tokio::select! {
        () = server::run(listener, node, tls) => Ok(()),
        signal = shutdown_signal() => {
            tracing::info!(signal, "shutting down");
            Ok(())
        }
    }
}

/// Removes expired plain keys nobody reads, ten times a second (as often as Redis's active
/// expiry cycle): a bounded batch per shard, and another batch at once while a shard had more
/// than that due.
async fn sweep_expired(node: Arc<Node>) {
    const BATCH: usize = 256;
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        while node.shards.expire_due(node.now_ms(), BATCH) == BATCH {
            // Let the clients' requests in between two batches.
            tokio::task::yield_now().await;
        }
    }
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

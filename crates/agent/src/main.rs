//! txcache-agent: the database side of txcache.

use clap::Parser;
use txcache_agent::config::Config;
use txcache_agent::fanout::Fanout;
use txcache_agent::stream::{slot_state, Stream};
use txcache_agent::{connect::connect_sql, heartbeat};

fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&config.log)?)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    // Check the database once up front, so a wrong setting fails loudly at start.
    let sql = connect_sql(&config.dsn, "txcache-agent").await?;
    let slot = slot_state(&sql, &config.slot).await?;
    drop(sql);
    let fanout = Fanout::new(&config.nodes, slot.confirmed, config.replay_buffer);
    fanout.spawn_nodes(config.node_password.clone());
    tokio::spawn(heartbeat::run(
        config.dsn.clone(),
        config.heartbeat_interval,
    ));
    tracing::info!(nodes = config.nodes.len(), slot = %config.slot, "txcache-agent started");
    tokio::select! {
        () = Stream::new(config, fanout).run() => Ok(()),
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("shutting down");
            Ok(())
        }
    }
}

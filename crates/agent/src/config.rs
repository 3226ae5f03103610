//! The agent's settings: flags, each with an environment variable and a default.

use clap::Parser;
use std::time::Duration;

/// txcache-agent: invalidations from PostgreSQL's logical decoding to the cache nodes.
#[derive(Clone, Debug, Parser)]
#[command(name = "txcache-agent", version, about, long_about = None)]
pub struct Config {
    /// PostgreSQL connection string (libpq keywords or a postgres:// URL). The role needs
    /// REPLICATION (or superuser); `txcache setup` must have prepared the database.
    #[arg(long, env = "TXCACHE_DSN", hide_env_values = true)]
    pub dsn: String,

    /// Logical replication slot created by `txcache setup`.
    #[arg(long, env = "TXCACHE_SLOT", default_value = "txcache")]
    pub slot: String,

    /// Publication created by `txcache setup`.
    #[arg(long, env = "TXCACHE_PUBLICATION", default_value = "txcache")]
    pub publication: String,

    /// A cache node, host:port; repeat the flag (or separate with commas) for several.
    #[arg(
        long = "node",
        env = "TXCACHE_NODES",
        value_delimiter = ',',
        required = true
    )]
    pub nodes: Vec<String>,

    /// Password of the cache nodes (their --password). Default: none.
    #[arg(long, env = "TXCACHE_NODE_PASSWORD", hide_env_values = true)]
    pub node_password: Option<String>,

    /// How often the agent writes a heartbeat into the WAL, so nodes know how current they
    /// are when nothing commits, e.g. 200ms.
    #[arg(long, env = "TXCACHE_HEARTBEAT_INTERVAL", default_value = "200ms", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,

    /// Least time between two deliveries to one node, e.g. 1ms: under a stream of commits
    /// each delivery (one wake-up of the node) then carries several, for about this much
    /// more lag (the timer rounds up to the next millisecond: 1ms waits 1–2 ms). 0ms
    /// delivers every commit as soon as it is decoded.
    #[arg(long, env = "TXCACHE_DELIVERY_SPACING", default_value = "1ms", value_parser = parse_duration)]
    pub delivery_spacing: Duration,

    /// Stream messages kept for replay to nodes that reconnect; a node that missed more is
    /// reset (its open entries bounded) instead.
    #[arg(long, env = "TXCACHE_REPLAY_BUFFER", default_value_t = 100_000)]
    pub replay_buffer: usize,

    /// Address of the endpoint libraries ask for pins; port 0 picks a free one (logged).
    #[arg(long, env = "TXCACHE_AGENT_LISTEN", default_value = "127.0.0.1:6390")]
    pub listen: std::net::SocketAddr,

    /// Password libraries must send with AUTH. Default: none.
    #[arg(long, env = "TXCACHE_AGENT_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    /// How often a new pin is taken while something commits, e.g. 1s.
    #[arg(long, env = "TXCACHE_PIN_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub pin_interval: Duration,

    /// The largest staleness limit any library uses; pins live this long after they stop
    /// being current (plus the lease), e.g. 120s.
    #[arg(long, env = "TXCACHE_MAX_STALENESS", default_value = "120s", value_parser = parse_duration)]
    pub max_staleness: Duration,

    /// Extra life of a pin past the staleness limit, for transactions that chose it just in
    /// time to import it, e.g. 30s.
    #[arg(long, env = "TXCACHE_PIN_LEASE", default_value = "30s", value_parser = parse_duration)]
    pub pin_lease: Duration,

    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    #[arg(long, env = "TXCACHE_LOG", default_value = "info")]
    pub log: String,
}

/// Parses a duration: a number with an `ms`, `s` or `m` suffix (seconds when bare).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 200ms)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "" | "s" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number.saturating_mul(60))),
        other => Err(format!("unknown duration unit {other:?} in {text:?}")),
    }
}

//! The agent's settings: flags, each with an environment variable and a default.

use crate::conninfo;
use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser};
use std::str::FromStr as _;
use std::time::Duration;
use txcache_model::units::parse_duration;

/// txcache-agent: invalidations from PostgreSQL's logical decoding to the cache nodes.
#[derive(Clone, Debug, Parser)]
#[command(name = "txcache-agent", version, about, long_about = None)]
pub struct Config {
    /// PostgreSQL connection string (libpq keywords or a postgres:// URL). The role needs
    /// REPLICATION (or superuser); `txcache setup` must have prepared the database.
    #[arg(long, env = "TXCACHE_DSN", hide_env_values = true)]
    pub dsn: String,

    /// Logical replication slot created by `txcache setup` (with --decode-from, on that
    /// standby, by the agent).
    #[arg(long, env = "TXCACHE_SLOT", default_value = "txcache")]
    pub slot: String,

    /// A hot standby of the database to decode the change stream on instead of the primary
    /// (PostgreSQL 16 or later), as a connection string: the logical decoding's CPU then
    /// leaves the primary. The agent creates --slot there (and drops a slot of that name on
    /// the primary, which nothing would consume). The standby needs wal_level=logical and
    /// hot_standby_feedback on (docs/agent.md, "Decoding on a standby"). Several hosts
    /// (host=a,b,c): the stream is decoded on the first standby that answers, moves on when
    /// it stops answering (--decode-failover-after), and each other standby keeps a spare
    /// slot. Default: decode on the primary.
    #[arg(
        long,
        env = "TXCACHE_DECODE_FROM",
        value_name = "CONNINFO",
        hide_env_values = true
    )]
    pub decode_from: Option<String>,

    /// With a --decode-from naming several hosts: how long the host the stream is decoded on
    /// may fail to answer (or, connected, send nothing) before the stream moves to a host
    /// without a spare slot, on a new slot (every cache node is then reset), above zero,
    /// e.g. 30s; units ns, us, ms, s, m, h; decimals allowed; a bare number is seconds
    /// (docs/agent.md, "Decoding on a standby").
    #[arg(long, env = "TXCACHE_DECODE_FAILOVER_AFTER", default_value = "30s", value_name = "DURATION", value_parser = parse_interval)]
    pub decode_failover_after: Duration,

    /// With a --decode-from naming several hosts: how long the host the stream is decoded on
    /// may fail before the stream moves to a standby holding the spare slot the agent keeps
    /// there (no cache node is reset; at most --decode-failover-after), above zero, e.g.
    /// 5s; units ns, us, ms, s, m, h; decimals allowed; a bare number is seconds
    /// (docs/agent.md, "Decoding on a standby").
    #[arg(long, env = "TXCACHE_DECODE_SPARE_AFTER", default_value = "5s", value_name = "DURATION", value_parser = parse_interval)]
    pub decode_spare_after: Duration,

    /// With a --decode-from naming several hosts, the primary among them (or a standby
    /// since promoted): `drop`, no slot of --slot's name is kept on it while the stream is
    /// decoded on a standby (a move of the stream there resets every cache node); `spare`,
    /// it keeps a spare slot as each standby does, advanced every second, so that a move
    /// there keeps the cache — at the price of the primary reading its WAL back once more
    /// (docs/agent.md, "Several hosts").
    #[arg(long, env = "TXCACHE_DECODE_PRIMARY_SLOT", value_enum, default_value_t = PrimarySlot::Drop)]
    pub decode_primary_slot: PrimarySlot,

    /// Publication created by `txcache setup`.
    #[arg(long, env = "TXCACHE_PUBLICATION", default_value = "txcache")]
    pub publication: String,

    /// A cache node, host:port (rediss://host:port for a node serving TLS); repeat the flag
    /// (or separate with commas) for several, each node once. Default: the nodes `txcache nodes add` put in
    /// txcache.cache_nodes for --slot, read again every --membership-interval.
    #[arg(long = "node", env = "TXCACHE_NODES", value_delimiter = ',')]
    pub nodes: Vec<String>,

    /// Without --node: how often the agent reads txcache.cache_nodes again for nodes that
    /// joined or left, above zero, e.g. 1s; units ns, us, ms, s, m, h; decimals allowed; a
    /// bare number is seconds. Unused with --node.
    #[arg(long, env = "TXCACHE_MEMBERSHIP_INTERVAL", default_value = "1s", value_name = "DURATION", value_parser = parse_interval)]
    pub membership_interval: Duration,

    /// The CA file (PEM) `rediss://` nodes' certificates must chain to; each certificate must
    /// name the host in its address. Default: the public CAs (Mozilla's roots).
    #[arg(long, env = "TXCACHE_NODE_TLS_CA", value_name = "FILE")]
    pub node_tls_ca: Option<std::path::PathBuf>,

    /// Password the agent authenticates to the cache nodes with: their --stream-password
    /// (else their --password, when they have no stream password); not empty. Default: none.
    #[arg(long, env = "TXCACHE_NODE_PASSWORD", hide_env_values = true)]
    pub node_password: Option<String>,

    /// How often the agent writes a heartbeat into the WAL, so nodes know how current they
    /// are when nothing commits, above zero, e.g. 200ms; units ns, us, ms, s, m, h; decimals
    /// allowed; a bare number is seconds.
    #[arg(long, env = "TXCACHE_HEARTBEAT_INTERVAL", default_value = "200ms", value_name = "DURATION", value_parser = parse_interval)]
    pub heartbeat_interval: Duration,

    /// Least time between two deliveries to one node, e.g. 1ms; units ns, us, ms, s, m, h;
    /// decimals allowed; a bare number is seconds. Under a stream of commits each delivery
    /// (one wake-up of the node) then carries several, for about this much more lag (the
    /// timer rounds up to the next millisecond: 1ms waits 1–2 ms). 0 delivers every commit as
    /// soon as it is decoded.
    #[arg(long, env = "TXCACHE_DELIVERY_SPACING", default_value = "1ms", value_name = "DURATION", value_parser = parse_duration)]
    pub delivery_spacing: Duration,

    /// Stream messages kept for replay to nodes that reconnect; a node that missed more is
    /// reset (its open entries bounded) instead.
    #[arg(long, env = "TXCACHE_REPLAY_BUFFER", default_value_t = 100_000)]
    pub replay_buffer: usize,

    /// Address of the endpoint libraries ask for pins; port 0 picks a free one (logged).
    #[arg(long, env = "TXCACHE_AGENT_LISTEN", default_value = "127.0.0.1:6390")]
    pub listen: std::net::SocketAddr,

    /// Port for the Prometheus text endpoint (GET /metrics) on the --listen address. Default:
    /// off.
    #[arg(long, env = "TXCACHE_AGENT_METRICS_PORT")]
    pub metrics_port: Option<u16>,

    /// Serve libraries over TLS with this certificate (chain) PEM file; needs --tls-key.
    /// Libraries then name the agent `rediss://host:port`. Default: plain TCP.
    #[arg(
        long,
        env = "TXCACHE_AGENT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "TXCACHE_AGENT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// Password libraries must send with AUTH; not empty (anyone could send that). Default:
    /// none.
    #[arg(long, env = "TXCACHE_AGENT_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    /// How often a new pin is taken while something commits, above zero, e.g. 1s; units ns,
    /// us, ms, s, m, h; decimals allowed; a bare number is seconds.
    #[arg(long, env = "TXCACHE_PIN_INTERVAL", default_value = "1s", value_name = "DURATION", value_parser = parse_interval)]
    pub pin_interval: Duration,

    /// When the primary is pinned: `interval`, a pin every --pin-interval while something
    /// commits (and after every schema change); `on-demand`, only when a library asks for a
    /// fresh one (`PIN`), so that with --standby the primary's vacuum horizon is held only
    /// by those.
    #[arg(long, env = "TXCACHE_PRIMARY_PINS", value_enum, default_value_t = PrimaryPins::Interval)]
    pub primary_pins: PrimaryPins,

    /// The largest staleness limit any library uses; no pin lives longer than this (plus
    /// the lease) after it stopped being current, e.g. 120s; units ns, us, ms, s, m, h;
    /// decimals allowed; a bare number is seconds.
    #[arg(long, env = "TXCACHE_MAX_STALENESS", default_value = "120s", value_name = "DURATION", value_parser = parse_duration)]
    pub max_staleness: Duration,

    /// How long a pin stays importable after it stopped being current, renewed each time a
    /// library reports a transaction ran at it (each pin holds the primary's vacuum horizon:
    /// one nobody uses is let go, and all of them after a lease without any use), above
    /// zero, e.g. 2s; units ns, us, ms, s, m, h; decimals allowed; a bare number is seconds.
    #[arg(long, env = "TXCACHE_PIN_LEASE", default_value = "2s", value_name = "DURATION", value_parser = parse_interval)]
    pub pin_lease: Duration,

    /// How often the agent compares roles, role memberships and per-database or per-role
    /// settings (which no event trigger sees) with their last reading, above zero, e.g. 1s;
    /// units ns, us, ms, s, m, h; decimals allowed; a bare number is seconds. A change
    /// invalidates every cached result within about this long.
    #[arg(long, env = "TXCACHE_SHARED_CATALOG_INTERVAL", default_value = "1s", value_name = "DURATION", value_parser = parse_interval)]
    pub shared_catalog_interval: Duration,

    /// How often the agent checks the database's schema against the digests the DDL
    /// triggers wrote (a change no trigger saw — DDL by a role a managed service exempts
    /// from event triggers, or with the triggers disabled — invalidates every cached result
    /// within about this long), above zero, e.g. 5s; units ns, us, ms, s, m, h; decimals
    /// allowed; a bare number is seconds. Each check computes the digest once (about a
    /// millisecond per hundred tables). Unused with `--ddl-tracking fingerprint`, which
    /// checks every pin.
    #[arg(long, env = "TXCACHE_SCHEMA_CHECK_INTERVAL", default_value = "5s", value_name = "DURATION", value_parser = parse_interval)]
    pub schema_check_interval: Duration,

    /// How schema changes reach the caches: `triggers`, the DDL event triggers `txcache
    /// setup` installs (the agent refuses to start without them); or `fingerprint`, for
    /// services that do not allow event triggers: every pin's catalog fingerprint is
    /// checked, and any schema change invalidates every cached result (docs/agent.md,
    /// "Without event triggers").
    #[arg(
        long,
        env = "TXCACHE_DDL_TRACKING",
        value_enum,
        default_value = "triggers"
    )]
    pub ddl_tracking: DdlTracking,

    /// A hot standby of the database to pin snapshots on too, NAME=CONNINFO (NAME: 1 to 63
    /// of A-Z a-z 0-9 _ . -, unique; CONNINFO: a connection string as for --dsn, reaching
    /// the same database on a streaming replica); repeat the flag or separate them with `;`
    /// for several (so a conninfo cannot contain `;`: percent-encode it as %3B in a
    /// postgres:// URL). Libraries read their pins with STANDBYPINS. Needs --ddl-tracking
    /// triggers (docs/agent.md, "Pins on standbys"). Default: none.
    #[arg(
        long = "standby",
        env = "TXCACHE_STANDBYS",
        value_delimiter = ';',
        value_name = "NAME=CONNINFO",
        value_parser = parse_standby,
        hide_env_values = true
    )]
    pub standbys: Vec<StandbyServer>,

    /// How long the lease that makes this agent the active one lasts unless renewed, above
    /// zero, e.g. 4s; units ns, us, ms, s, m, h; decimals allowed; a bare number is seconds.
    /// Agents given the same --slot take turns: one streams, pins and delivers, the others
    /// stand by and take over when it stops renewing (a hung or cut-off agent after about
    /// this long; a dead one after three quarters of it). A shorter lease takes over sooner but
    /// counts a database that answers slowly for that long as a lost agent.
    #[arg(long, env = "TXCACHE_AGENT_LEASE", default_value = "4s", value_name = "DURATION", value_parser = parse_interval)]
    pub lease: Duration,

    /// Log filter: a level (off, error, warn, info, debug, trace), target=level directives,
    /// or both, comma-separated; empty means info, any other word is refused.
    #[arg(long, env = "TXCACHE_LOG", default_value = "info")]
    pub log: String,
}

impl Config {
    /// The settings as parsed, with blank `--node` values dropped: an empty `TXCACHE_NODES`
    /// (a template's unset variable) or a stray comma names no node, so no `--node` at all
    /// means the membership from the database.
    pub fn without_blank_nodes(mut self) -> Self {
        self.nodes.retain(|node| !node.trim().is_empty());
        self
    }

    /// The settings with blank `--standby` values dropped (as blank `--node` ones: an empty
    /// `TXCACHE_STANDBYS`, a stray `;`) and a blank `--decode-from` taken as none, or the
    /// error clap reports for what no single flag's parser can see: an empty password, a
    /// node or a standby name given twice, and standbys with `--ddl-tracking fingerprint`.
    pub fn checked(mut self) -> Result<Self, clap::Error> {
        self.standbys.retain(|standby| !standby.name.is_empty());
        self.decode_from = self.decode_from.filter(|dsn| !dsn.trim().is_empty());
        // As the node refuses its own: an empty password is one anyone can send.
        if self.password.as_deref() == Some("") {
            let message = "an empty --password (TXCACHE_AGENT_PASSWORD) opens the agent to \
                           anyone (`AUTH \"\"`), and no library can log in with it: give a \
                           non-empty one, or leave it unset";
            return Err(Self::command().error(ErrorKind::ValueValidation, message));
        }
        if self.node_password.as_deref() == Some("") {
            let message = "an empty --node-password (TXCACHE_NODE_PASSWORD): the nodes refuse \
                           an empty password; give their --stream-password, or leave it unset \
                           for nodes without one";
            return Err(Self::command().error(ErrorKind::ValueValidation, message));
        }
        if let Some((first, second)) = same_node_twice(&self.nodes) {
            let message = if first == second {
                format!("--node {first}: the node is given twice (was another node meant?)")
            } else {
                format!(
                    "--node {first} and --node {second} name the same node (was another node \
                     meant?)"
                )
            };
            return Err(Self::command().error(ErrorKind::ValueValidation, message));
        }
        if let Some(name) = twice(&self.standbys) {
            let message = format!(
                "--standby {name}: the name is given twice; each standby needs a name of its own"
            );
            return Err(Self::command().error(ErrorKind::ValueValidation, message));
        }
        if self.primary_pins == PrimaryPins::OnDemand
            && self.ddl_tracking == DdlTracking::Fingerprint
        {
            let message = "--primary-pins on-demand needs the DDL event triggers \
                           (--ddl-tracking triggers): without them schema changes are found \
                           by the fingerprints of pins taken at every --pin-interval";
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        if self.keeps_primary_spare() && self.decode_from_hosts() < 2 {
            let message = "--decode-primary-slot spare needs a --decode-from naming several \
                           hosts, the primary among them (host=standby,primary): the spare \
                           is kept on a primary named there";
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        if !self.standbys.is_empty() && self.ddl_tracking == DdlTracking::Fingerprint {
            let message = "--standby needs the DDL event triggers (--ddl-tracking triggers): \
                           with --ddl-tracking fingerprint the catalog fingerprint is checked \
                           on the primary's pins only, so a standby's pins could show a schema \
                           change nothing announced";
            return Err(Self::command().error(ErrorKind::ArgumentConflict, message));
        }
        Ok(self)
    }

    /// The connection string of the server the stream is decoded on: `--decode-from`, or
    /// the primary.
    pub fn decoding_dsn(&self) -> &str {
        self.decode_from.as_deref().unwrap_or(&self.dsn)
    }

    /// How many hosts `--decode-from` names (0 without one, or where it does not parse: the
    /// connection reports that).
    fn decode_from_hosts(&self) -> usize {
        let config = |dsn| conninfo::parse(dsn)?.postgres_config();
        let parsed = self.decode_from.as_deref().map(config);
        parsed
            .and_then(Result::ok)
            .map_or(0, |config| config.get_hosts().len())
    }

    /// Whether a primary named in `--decode-from` keeps a spare slot
    /// (`--decode-primary-slot spare`).
    pub fn keeps_primary_spare(&self) -> bool {
        self.decode_primary_slot == PrimarySlot::Spare
    }

    /// Where the cache nodes come from: `--node`, or the database when it is not given.
    pub fn membership(&self) -> Membership {
        if self.nodes.is_empty() {
            Membership::Database
        } else {
            Membership::Static
        }
    }
}

/// Where the agent's cache nodes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    /// The `--node` list, fixed for the agent's life.
    Static,
    /// The rows of `txcache.cache_nodes` for `--slot`, read again while the agent runs.
    Database,
}

impl Membership {
    /// How `STATUS` names it (`membership:static`, `membership:database`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Static => "static",
            Self::Database => "database",
        }
    }
}

/// When the primary is pinned (`--primary-pins`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PrimaryPins {
    /// A pin every `--pin-interval` while something commits, and after a schema change.
    Interval,
    /// Only the pins libraries ask for (`PIN`), each kept while it is of use.
    OnDemand,
}

/// Whether a primary named in `--decode-from` keeps a spare slot (`--decode-primary-slot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PrimarySlot {
    /// No slot while the stream is decoded on a standby: the primary decodes nothing.
    Drop,
    /// A spare slot, advanced with the standbys' spares: a move there resets no node.
    Spare,
}

/// How schema changes reach the caches (`--ddl-tracking`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DdlTracking {
    /// The DDL event triggers send every schema change into the stream, which invalidates
    /// what it changed.
    Triggers,
    /// No event triggers: every pin's catalog fingerprint is checked before it is listed,
    /// and any schema change invalidates every cached result.
    Fingerprint,
}

/// A hot standby to pin snapshots on (`--standby NAME=CONNINFO`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbyServer {
    /// Its name, in `STANDBYPINS`, `STATUS`, the metrics and the log.
    pub name: String,
    /// How to connect to it (libpq keywords or a postgres:// URL, as `--dsn`).
    pub dsn: String,
}

/// Most bytes of a standby's name (PostgreSQL's identifier length).
const STANDBY_NAME_MAX: usize = 63;

/// `NAME=CONNINFO`, split at the first `=`; a blank value is a blank standby, which
/// [`Config::checked`] drops.
fn parse_standby(text: &str) -> Result<StandbyServer, String> {
    if text.trim().is_empty() {
        let blank = String::new;
        return Ok(StandbyServer {
            name: blank(),
            dsn: blank(),
        });
    }
    let Some((name, dsn)) = text.split_once('=') else {
        return Err(format!(
            "{text:?}: expected NAME=CONNINFO, e.g. replica1='host=10.0.0.2 dbname=app'"
        ));
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if name.is_empty() || name.len() > STANDBY_NAME_MAX || !name.chars().all(allowed) {
        return Err(format!(
            "{name:?}: a standby's name is 1 to {STANDBY_NAME_MAX} of A-Z a-z 0-9 _ . -"
        ));
    }
    if dsn.trim().is_empty() {
        return Err(format!("{name}: the connection string after `=` is empty"));
    }
    check_conninfo(dsn).map_err(|error| format!("{name}: {error}"))?;
    Ok(StandbyServer {
        name: name.to_owned(),
        dsn: dsn.to_owned(),
    })
}

/// Whether `dsn` reads as a connection string (`host=h` without a name in front reads as
/// the name `host` and the string `h`, which does not).
fn check_conninfo(dsn: &str) -> Result<(), String> {
    // The reader's messages name --dsn, which it was written for.
    let message = |error: anyhow::Error| {
        let text = format!("{error:#}");
        text.strip_prefix("--dsn: ")
            .map(str::to_owned)
            .unwrap_or(text)
    };
    let conninfo = conninfo::parse(dsn).map_err(message)?;
    conninfo.tls.verify().map_err(message)?;
    let config = tokio_postgres::Config::from_str(&conninfo.rest);
    config
        .map(drop)
        .map_err(|error| format!("not a connection string: {error}"))
}

/// Two `--node` values naming the same node: the same `host:port` (the host's case aside),
/// with or without a scheme (`redis://`, `rediss://`: one node is not both). Blank values
/// are dropped, not compared.
fn same_node_twice(nodes: &[String]) -> Option<(&str, &str)> {
    // As `NodeAddress::parse` reads it (a bad scheme is refused when the node is connected).
    let key = |node: &str| {
        let node = node.trim();
        let host_port = node.split_once("://").map_or(node, |(_, rest)| rest);
        host_port.trim_end_matches('/').to_ascii_lowercase()
    };
    let nodes: Vec<(&str, String)> = nodes
        .iter()
        .map(String::as_str)
        .filter(|node| !node.trim().is_empty())
        .map(|node| (node, key(node)))
        .collect();
    nodes.iter().enumerate().find_map(|(index, (node, key))| {
        let earlier = nodes[..index].iter().find(|(_, other)| other == key);
        earlier.map(|(first, _)| (*first, *node))
    })
}

/// A standby name given more than once.
fn twice(standbys: &[StandbyServer]) -> Option<&str> {
    let names = standbys.iter().map(|standby| standby.name.as_str());
    names
        .enumerate()
        .find(|(index, name)| standbys[..*index].iter().any(|other| other.name == *name))
        .map(|(_, name)| name)
}

/// A period of one of the agent's timers: a duration ([`parse_duration`]) above zero (a
/// timer of period zero would never wait).
fn parse_interval(text: &str) -> Result<Duration, String> {
    match parse_duration(text) {
        Ok(Duration::ZERO) => Err(format!("{text:?}: the interval must be above zero")),
        Ok(interval) => Ok(interval),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use txcache_model::units::DURATION_FORMS;

    const REQUIRED: [&str; 3] = ["txcache-agent", "--dsn", "host=/tmp"];

    fn parse(flags: &[&str]) -> Result<Config, clap::Error> {
        Config::try_parse_from(
            REQUIRED
                .iter()
                .chain(["--node", "127.0.0.1:6380"].iter())
                .chain(flags),
        )
    }

    #[test]
    fn durations_use_the_shared_grammar() {
        let config = parse(&["--heartbeat-interval", "0.05s", "--pin-lease", "2"]).ok();
        let config = config.map(|c| (c.heartbeat_interval, c.pin_lease, c.max_staleness));
        let expected = (
            Duration::from_millis(50),
            Duration::from_secs(2),
            Duration::from_secs(120),
        );
        assert_eq!(config, Some(expected));
        let config = parse(&["--max-staleness", "1h", "--delivery-spacing", "0"]).ok();
        let config = config.map(|c| (c.max_staleness, c.delivery_spacing));
        assert_eq!(config, Some((Duration::from_secs(3600), Duration::ZERO)));
        for (flag, value) in [
            ("--pin-interval", "0ms"),
            ("--heartbeat-interval", "0"),
            ("--pin-lease", "0s"),
            ("--pin-lease", "1y"),
        ] {
            assert!(parse(&[flag, value]).is_err(), "{flag} {value}");
        }
    }

    #[test]
    fn without_node_the_membership_is_the_database() {
        let config = Config::try_parse_from(REQUIRED).ok();
        let read = config.map(|c| (c.membership(), c.nodes, c.membership_interval));
        let expected = (Membership::Database, Vec::new(), Duration::from_secs(1));
        assert_eq!(read, Some(expected));
        let config = parse(&["--node", "rediss://b:6381,c:6382"]).ok();
        let read = config.map(|c| (c.membership(), c.nodes));
        let nodes = ["127.0.0.1:6380", "rediss://b:6381", "c:6382"].map(str::to_owned);
        assert_eq!(read, Some((Membership::Static, nodes.to_vec())));
        let blank = Config::try_parse_from(REQUIRED.iter().chain(&["--node", ""])).ok();
        let blank = blank.map(Config::without_blank_nodes);
        assert_eq!(blank.map(|c| c.membership()), Some(Membership::Database));
        let config = parse(&["--node", "b:1,,"])
            .ok()
            .map(Config::without_blank_nodes);
        let nodes = ["127.0.0.1:6380", "b:1"].map(str::to_owned);
        assert_eq!(config.map(|c| c.nodes), Some(nodes.to_vec()));
    }

    #[test]
    fn the_stream_is_decoded_on_the_primary_unless_a_standby_is_named() {
        let decoding = |flags: &[&str]| {
            let config = parse(flags).and_then(Config::checked).ok();
            config.map(|c| c.decoding_dsn().to_owned())
        };
        assert_eq!(decoding(&[]), Some("host=/tmp".to_owned()));
        let standby = decoding(&["--decode-from", "host=standby"]);
        assert_eq!(standby, Some("host=standby".to_owned()));
        // An empty TXCACHE_DECODE_FROM (a template's unset variable) names none.
        assert_eq!(
            decoding(&["--decode-from", " "]),
            Some("host=/tmp".to_owned())
        );
    }

    #[test]
    fn a_spare_on_the_primary_needs_a_decode_from_of_several_hosts() {
        let spare = |decode_from: &[&str]| {
            let flags = [decode_from, &["--decode-primary-slot", "spare"]].concat();
            parse(&flags).and_then(Config::checked)
        };
        let kept = spare(&["--decode-from", "host=standby,primary"]).ok();
        assert_eq!(kept.map(|c| c.keeps_primary_spare()), Some(true));
        for decode_from in [&[][..], &["--decode-from", "host=standby"]] {
            let refused = spare(decode_from).err().map(|error| error.to_string());
            assert!(refused.is_some_and(|e| e.contains("needs a --decode-from naming several")));
        }
        let default = parse(&["--decode-from", "host=standby,primary"]).ok();
        assert_eq!(
            default.map(|c| c.decode_primary_slot),
            Some(PrimarySlot::Drop)
        );
    }

    #[test]
    fn the_membership_interval_is_a_duration_above_zero() {
        let interval = |value: &str| parse(&["--membership-interval", value]).ok();
        let interval = |value| interval(value).map(|c| c.membership_interval);
        assert_eq!(interval("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(interval("2"), Some(Duration::from_secs(2)));
        for bad in ["0", "0s", "-1s", "soon"] {
            assert_eq!(interval(bad), None, "{bad}");
        }
    }

    #[test]
    fn metrics_are_off_unless_a_port_is_given() {
        assert_eq!(parse(&[]).ok().map(|c| c.metrics_port), Some(None));
        let config = parse(&["--metrics-port", "9187"]).ok();
        assert_eq!(config.map(|c| c.metrics_port), Some(Some(9187)));
        assert!(parse(&["--metrics-port", "70000"]).is_err());
    }

    #[test]
    fn ddl_tracking_is_triggers_unless_fingerprint_is_asked_for() {
        let tracking = |flags: &[&str]| parse(flags).ok().map(|c| c.ddl_tracking);
        assert_eq!(tracking(&[]), Some(DdlTracking::Triggers));
        let fingerprint = ["--ddl-tracking", "fingerprint"];
        assert_eq!(tracking(&fingerprint), Some(DdlTracking::Fingerprint));
        assert_eq!(
            tracking(&["--ddl-tracking", "triggers"]),
            Some(DdlTracking::Triggers)
        );
        for bad in ["none", "Fingerprints", ""] {
            assert!(parse(&["--ddl-tracking", bad]).is_err(), "{bad}");
        }
    }

    fn standbys(flags: &[&str]) -> Result<Vec<(String, String)>, String> {
        let config = parse(flags).and_then(Config::checked);
        let config = config.map_err(|error| error.to_string())?;
        let pairs = config.standbys.into_iter();
        Ok(pairs.map(|standby| (standby.name, standby.dsn)).collect())
    }

    #[test]
    fn standbys_are_named_connection_strings() {
        assert_eq!(standbys(&[]), Ok(Vec::new()));
        let found = standbys(&[
            "--standby",
            "replica-1=host=10.0.0.2 dbname=app options=-cx=1",
            "--standby",
            "r.2=postgres://u@h/app?sslmode=require",
        ]);
        let expected = [
            ("replica-1", "host=10.0.0.2 dbname=app options=-cx=1"),
            ("r.2", "postgres://u@h/app?sslmode=require"),
        ];
        let expected = expected.map(|(name, dsn)| (name.to_owned(), dsn.to_owned()));
        assert_eq!(found, Ok(expected.to_vec()));
        let long = format!("{}=host=h", "n".repeat(63));
        assert_eq!(standbys(&["--standby", &long]).map(|s| s.len()), Ok(1));
        // `;` separates standbys; blank ones (a stray `;`, an empty variable) are dropped.
        let found = standbys(&["--standby", "a=host=h;;b=host=i;", "--standby", ""]);
        let names = found.map(|pairs| pairs.into_iter().map(|(name, _)| name).collect());
        assert_eq!(names, Ok(vec!["a".to_owned(), "b".to_owned()]));
    }

    #[test]
    fn bad_standbys_are_refused_with_a_reason() {
        let refused = |flags: &[&str]| standbys(flags).unwrap_err();
        let too_long = format!("{}=host=h", "n".repeat(64));
        for (value, reason) in [
            ("host=h", "host: \"h\" has no value"),
            ("replica=host=h port=x", "replica: not a connection string"),
            (
                "r=host=h sslmode=verify-full",
                "r: sslmode=verify-full needs",
            ),
            ("replica", "expected NAME=CONNINFO"),
            ("=host=h", "a standby's name is 1 to 63"),
            ("a b=host=h", "a standby's name is 1 to 63"),
            (&too_long, "a standby's name is 1 to 63"),
            ("a=", "the connection string after `=` is empty"),
        ] {
            let error = refused(&["--standby", value]);
            assert!(error.contains(reason), "{value}: {error}");
        }
        let twice = refused(&["--standby", "a=host=h", "--standby", "a=host=i"]);
        assert!(
            twice.contains("--standby a: the name is given twice"),
            "{twice}"
        );
        let fingerprint = refused(&["--standby", "a=host=h", "--ddl-tracking", "fingerprint"]);
        assert!(
            fingerprint.contains("--standby needs the DDL event triggers"),
            "{fingerprint}"
        );
        assert!(standbys(&["--ddl-tracking", "fingerprint"]).is_ok());
    }

    #[test]
    fn an_empty_password_is_refused() {
        let refused = |flags: &[&str]| {
            let error = parse(flags).and_then(Config::checked).err();
            error.map(|error| error.to_string()).unwrap_or_default()
        };
        let agent = refused(&["--password", ""]);
        assert!(agent.contains("an empty --password"), "{agent}");
        let node = refused(&["--node-password", ""]);
        assert!(node.contains("an empty --node-password"), "{node}");
        let set = parse(&["--password", "s", "--node-password", "t"]).and_then(Config::checked);
        let set = set.ok().map(|c| (c.password, c.node_password));
        assert_eq!(set, Some((Some("s".to_owned()), Some("t".to_owned()))));
        let unset = parse(&[]).and_then(Config::checked).ok();
        assert_eq!(
            unset.map(|c| (c.password, c.node_password)),
            Some((None, None))
        );
    }

    #[test]
    fn a_node_given_twice_is_refused() {
        let checked = |flags: &[&str]| {
            let config = parse(flags).map(Config::without_blank_nodes);
            config
                .and_then(Config::checked)
                .map_err(|error| error.to_string())
        };
        // `parse` gives 127.0.0.1:6380 already.
        let twice = checked(&["--node", "127.0.0.1:6380"]).unwrap_err();
        assert!(
            twice.contains("--node 127.0.0.1:6380: the node is given twice"),
            "{twice}"
        );
        let same = checked(&["--node", "b:1,redis://B:1/"]).unwrap_err();
        assert!(
            same.contains("--node b:1 and --node redis://B:1/ name the same node"),
            "{same}"
        );
        let tls = checked(&["--node", "rediss://127.0.0.1:6380"]).unwrap_err();
        assert!(tls.contains("name the same node"), "{tls}");
        let nodes = checked(&["--node", "127.0.0.1:6381,,b:6380"]).map(|c| c.nodes.len());
        assert_eq!(nodes, Ok(3));
    }

    /// docs/agent.md's options table names every flag with its environment variable.
    #[test]
    fn the_documentation_lists_every_option() {
        const DOC: &str = include_str!("../../../docs/agent.md");
        let table = DOC.split("\n## Options\n").nth(1).unwrap();
        let table = table.split("\n## ").next().unwrap();
        let rows = table.lines().filter(|line| line.starts_with("| `"));
        let documented: Vec<(String, String)> = rows
            .map(|row| {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                let unquoted = |cell: &str| cell.trim_matches('`').to_owned();
                (unquoted(cells[1]), unquoted(cells[2]))
            })
            .collect();
        let declared: Vec<(String, String)> = Config::command()
            .get_arguments()
            .filter_map(|arg| {
                let env = arg.get_env()?.to_string_lossy().into_owned();
                Some((format!("--{}", arg.get_long()?), env))
            })
            .collect();
        assert_eq!(documented, declared);
    }

    #[test]
    fn every_duration_option_states_the_grammar() {
        let mut durations = Vec::new();
        for arg in Config::command().get_arguments() {
            if !matches!(arg.get_value_names(), Some([name]) if name == "DURATION") {
                continue;
            }
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.contains(DURATION_FORMS), "--{}: {help}", arg.get_id());
            durations.push(arg.get_id().to_string());
        }
        let expected = [
            "decode_failover_after",
            "decode_spare_after",
            "membership_interval",
            "heartbeat_interval",
            "delivery_spacing",
            "pin_interval",
            "max_staleness",
            "pin_lease",
            "shared_catalog_interval",
            "schema_check_interval",
            "lease",
        ];
        assert_eq!(durations, expected);
    }
}

//! The node's settings: command-line flags, each with an environment variable and a default.

use clap::Parser;
use std::net::IpAddr;
use std::time::Duration;
use txcache_model::units::{parse_duration, parse_size};

/// txcached: a versioned, invalidation-aware cache node speaking RESP (the Redis protocol).
///
/// Flags take precedence over the environment variables named beside them.
#[derive(Clone, Debug, Parser)]
#[command(name = "txcached", version, about, long_about = None)]
pub struct Config {
    /// Address to listen on. Default: 127.0.0.1 (localhost only; set 0.0.0.0 deliberately).
    #[arg(long, env = "TXCACHED_BIND", default_value = "127.0.0.1")]
    pub bind: IpAddr,

    /// TCP port for RESP clients; 0 picks a free port (printed on the first log line).
    #[arg(long, env = "TXCACHED_PORT", default_value_t = 6380)]
    pub port: u16,

    /// Hard limit on cached data (values, keys, intervals, tags, history), at least 1mb (and
    /// 64 KiB per shard), e.g. 64mb, 2gb; units b, k, m, g (or kb/kib, mb/mib, gb/gib: all
    /// powers of 1024); a bare number is bytes.
    #[arg(long, env = "TXCACHED_MAX_MEMORY", default_value = "1gb", value_name = "SIZE", value_parser = parse_size)]
    pub max_memory: usize,

    /// The largest staleness limit any client uses; versions that ended longer ago than this
    /// are removed eagerly, e.g. 120s, 2m; units ns, us, ms, s, m, h; decimals allowed; a
    /// bare number is seconds.
    #[arg(long, env = "TXCACHED_MAX_STALENESS", default_value = "120s", value_name = "DURATION", value_parser = parse_duration)]
    pub max_staleness: Duration,

    /// Password clients must send with AUTH before any other command. Default: none.
    #[arg(long, env = "TXCACHED_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    /// Password of the invalidation stream: when set, only a connection that sent it with
    /// AUTH may send stream commands (TXINVALIDATE, TXHEARTBEAT, TXRESET, TXREWIND,
    /// TXORIGIN, TXEPOCH), and it may send every other command too. Give it to txcache-agent (its --node-password).
    /// Default: none (any client that may run commands may send them).
    #[arg(long, env = "TXCACHED_STREAM_PASSWORD", hide_env_values = true)]
    pub stream_password: Option<String>,

    /// Serve clients over TLS with this certificate (chain) PEM file; needs --tls-key. Every
    /// connection is then TLS: libraries name the node `rediss://host:port`, the agent too.
    /// Default: plain TCP.
    #[arg(
        long,
        env = "TXCACHED_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "TXCACHED_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// Worker threads. Default: one fewer than the CPU cores, at least one (a core is left to
    /// the kernel's network path and the processes beside the node).
    #[arg(long, env = "TXCACHED_THREADS")]
    pub threads: Option<usize>,

    /// Store shards (each locked separately); memory is split evenly between them, at least
    /// 64 KiB each. Default: 4 per worker thread (fewer when --max-memory is too small for
    /// that many).
    #[arg(long, env = "TXCACHED_SHARDS")]
    pub shards: Option<usize>,

    /// Most simultaneous client connections (at least 1); further ones are refused with an
    /// error. The node raises its open-file limit to match, as far as the hard limit allows.
    #[arg(long, env = "TXCACHED_MAX_CLIENTS", default_value_t = 10_000)]
    pub max_clients: usize,

    /// With --password: how long a connection may stay without a successful AUTH before it
    /// is closed, so that connections that never authenticate cannot hold every slot of
    /// --max-clients, e.g. 10s; units ns, us, ms, s, m, h; decimals allowed; a bare number
    /// is seconds.
    #[arg(long, env = "TXCACHED_AUTH_TIMEOUT", default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub auth_timeout: Duration,

    /// Port for the Prometheus text endpoint (GET /metrics) on the same address. Default: off.
    #[arg(long, env = "TXCACHED_METRICS_PORT")]
    pub metrics_port: Option<u16>,

    /// Log filter: a level (off, error, warn, info, debug, trace), target=level directives, or
    /// both, comma-separated (e.g. warn,txcached=debug); empty means info. A word that is
    /// neither a level nor a target of txcached stops the start.
    #[arg(long, env = "TXCACHED_LOG", default_value = "info")]
    pub log: String,
}

/// The smallest `--max-memory` (and `CONFIG SET maxmemory`) accepted: below it a node holds
/// so little that it is a misconfiguration (`0` or `100` used to store nothing, every value
/// refused as too large, without a word).
pub const MIN_MAX_MEMORY: usize = 1 << 20;

/// The smallest share of `--max-memory` one shard may get: a shard holds no value larger than
/// its share, so a tiny one would refuse ordinary values. The default shard count stays under
/// it; an explicit `--shards` that does not is refused.
pub const MIN_SHARD_MEMORY: usize = 64 << 10;

/// The smallest memory limit a node of `shards` shards accepts.
pub fn min_max_memory(shards: usize) -> usize {
    MIN_MAX_MEMORY.max(shards.saturating_mul(MIN_SHARD_MEMORY))
}

impl Config {
    /// Every check of the settings that clap cannot express: [`Config::check_passwords`] and
    /// [`Config::check_limits`]. The message says what to change.
    pub fn check(&self) -> Result<(), String> {
        self.check_passwords()?;
        self.check_limits()
    }

    /// Refuses limits under which the node cannot serve: no memory to speak of, no clients,
    /// no shards or threads, shards too small to hold an ordinary value.
    pub fn check_limits(&self) -> Result<(), String> {
        if self.max_clients == 0 {
            return Err("--max-clients 0 would refuse every client: give at least 1".to_owned());
        }
        if self.threads == Some(0) {
            return Err("--threads 0: give at least 1, or leave it unset".to_owned());
        }
        if self.shards == Some(0) {
            return Err("--shards 0: give at least 1, or leave it unset".to_owned());
        }
        let minimum = min_max_memory(self.shard_count());
        if self.max_memory < minimum {
            let shards = self.shard_count();
            return Err(format!(
                "--max-memory {} bytes is below the minimum of {minimum} bytes (1 MiB, and at \
                 least 64 KiB for each of the {shards} shards): the node could hold next to \
                 nothing; give more (e.g. 64mb){}",
                self.max_memory,
                if self.shards.is_some() {
                    ", or fewer --shards"
                } else {
                    ""
                }
            ));
        }
        Ok(())
    }

    /// Refuses passwords that would open more than they say: an empty one (anyone can send
    /// it) and a stream password equal to the data password (every application could move
    /// the node's position).
    pub fn check_passwords(&self) -> Result<(), String> {
        if self.password.as_deref() == Some("") || self.stream_password.as_deref() == Some("") {
            return Err(
                "an empty --password or --stream-password opens the node to anyone: \
                        give a non-empty one, or leave it unset"
                    .to_owned(),
            );
        }
        if self.password.is_some() && self.password == self.stream_password {
            return Err(
                "--stream-password equals --password, so every application could send \
                        stream commands: give the agent a password of its own"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// Worker threads to run, resolving the default.
    pub fn worker_threads(&self) -> usize {
        let cores = || std::thread::available_parallelism().map_or(1, |n| n.get());
        self.threads.unwrap_or_else(|| workers_for(cores())).max(1)
    }

    /// Shards to create, resolving the default: 4 per worker thread, but no more than leave
    /// each [`MIN_SHARD_MEMORY`] (a small node on a large machine gets fewer, larger shards).
    pub fn shard_count(&self) -> usize {
        let fitting = self.max_memory / MIN_SHARD_MEMORY;
        self.shards
            .unwrap_or_else(|| (4 * self.worker_threads()).min(fitting))
            .max(1)
    }
}

/// The default worker count on a machine of `cores` cores: one per core but one, at least
/// one. Much of a cache request's CPU time is the kernel's (TCP, wake-ups), and a worker on
/// every core competes with it and with whatever runs beside the node (its clients, the
/// agent, the database); Redis likewise advises I/O threads that leave a core spare. On the
/// 2-core development machine one worker served 40 % more unpipelined requests than two, and
/// as many pipelined (docs/node-speed.md).
fn workers_for(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_use_the_shared_grammar_and_say_so() {
        use clap::CommandFactory;
        use txcache_model::units::{DURATION_FORMS, SIZE_FORMS};
        let config = Config::parse_from(["txcached", "--max-memory", "1.5GiB"]);
        assert_eq!(config.max_memory, 3 << 29);
        assert_eq!(config.max_staleness, Duration::from_secs(120));
        let config = Config::parse_from(["txcached", "--max-staleness", "0.5m"]);
        assert_eq!(config.max_staleness, Duration::from_secs(30));
        let refused = Config::try_parse_from(["txcached", "--max-memory", "5tb"]);
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains(SIZE_FORMS), "{message}");
        let mut quantities = Vec::new();
        for arg in Config::command().get_arguments() {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let forms = match arg.get_value_names() {
                Some([name]) if name == "SIZE" => SIZE_FORMS,
                Some([name]) if name == "DURATION" => DURATION_FORMS,
                _ => continue,
            };
            assert!(help.contains(forms), "--{}: {help}", arg.get_id());
            quantities.push(arg.get_id().to_string());
        }
        assert_eq!(quantities, ["max_memory", "max_staleness", "auth_timeout"]);
    }

    #[test]
    fn workers_leave_a_core_spare_and_shards_follow_them() {
        let cores_to_workers = [1, 2, 3, 8].map(|cores| (cores, workers_for(cores)));
        assert_eq!(cores_to_workers, [(1, 1), (2, 1), (3, 2), (8, 7)]);
        let config = Config::parse_from(["txcached", "--threads", "3"]);
        assert_eq!((config.worker_threads(), config.shard_count()), (3, 12));
    }

    #[test]
    fn useless_limits_are_refused_naming_the_minimum() {
        let refusal = |args: &[&str]| {
            let args = ["txcached"].iter().chain(args).copied();
            Config::parse_from(args).check().err().unwrap_or_default()
        };
        for (args, says) in [
            (&["--max-memory", "0"][..], "minimum of 1048576 bytes"),
            (&["--max-memory", "100"], "minimum of 1048576 bytes"),
            (&["--max-memory", "1mb", "--shards", "32"], "fewer --shards"),
            (&["--max-clients", "0"], "--max-clients 0"),
            (&["--shards", "0"], "--shards 0"),
            (&["--threads", "0"], "--threads 0"),
        ] {
            let message = refusal(args);
            assert!(message.contains(says), "{args:?}: {message}");
        }
        assert_eq!(refusal(&["--max-memory", "1mb", "--shards", "16"]), "");
        assert_eq!(refusal(&[]), "");
    }

    #[test]
    fn a_small_node_gets_fewer_shards_by_default() {
        let config = Config::parse_from(["txcached", "--max-memory", "1mb", "--threads", "8"]);
        assert_eq!(config.shard_count(), 16, "64 KiB each, not 32 of 32 KiB");
        assert_eq!(config.check(), Ok(()));
    }

    #[test]
    fn defaults_bind_localhost() {
        let config = Config::parse_from(["txcached"]);
        assert!(config.bind.is_loopback());
        assert!(config.password.is_none());
    }
}

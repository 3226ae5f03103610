//! Everything a connection reaches: the shards, the server metrics, the settings, and what
//! the agent told the node about its stream (its origin, its epoch).

use crate::config::Config;
use crate::metrics::ServerMetrics;
use crate::shards::Shards;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use std::time::Instant;
use txcache_metrics::log::Throttle;
use txcache_resp::Limits;
use txcache_store::StoreConfig;

/// How often a kind of line a client can cause at will is logged at most.
const NOISY_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// One throttle per kind of log line a client (or a flood of them) can cause at will, so
/// that none can fill the log: the first is logged, then one a minute with the count held.
#[derive(Debug)]
pub struct LogThrottles {
    /// Connections refused at `--max-clients`.
    pub refused: Throttle,
    /// Failed `AUTH`s (and `HELLO … AUTH`s).
    pub auth_failed: Throttle,
    /// Failed TLS handshakes.
    pub tls_failed: Throttle,
    /// Failed `accept`s (out of open files, mostly).
    pub accept_failed: Throttle,
}

impl Default for LogThrottles {
    fn default() -> Self {
        Self {
            refused: Throttle::new(NOISY_LOG_INTERVAL),
            auth_failed: Throttle::new(NOISY_LOG_INTERVAL),
            tls_failed: Throttle::new(NOISY_LOG_INTERVAL),
            accept_failed: Throttle::new(NOISY_LOG_INTERVAL),
        }
    }
}

/// One cache node's shared state.
pub struct Node {
    /// The versioned store, sharded.
    pub shards: Shards,
    /// Counters kept by the server itself (connections, commands, protocol errors).
    pub metrics: ServerMetrics,
    /// The settings the node was started with.
    pub config: Config,
    /// Throttles of the log lines clients can cause.
    pub logs: LogThrottles,
    /// Protocol limits for client requests; the bulk limit follows `maxmemory`.
    max_bulk_len: AtomicUsize,
    /// Node-wide memory limit (changes with `CONFIG SET maxmemory`).
    max_memory: AtomicUsize,
    /// When the node started, for `uptime_in_seconds`.
    pub started: Instant,
    /// The database history the stream follows, as the agent named it (`TXORIGIN`).
    origin: Mutex<Option<Bytes>>,
    /// The database whose stream the node follows (`TXDATABASE`): named by the first stream
    /// command of a connection that declared one, and never changed afterwards.
    database: OnceLock<Bytes>,
    /// The fencing epoch: the highest `TXEPOCH` a connection sent (0 before any). Read
    /// without a lock (`INFO`, `TXEPOCH` alone); raised only under `fence`'s write side.
    epoch: AtomicU64,
    /// Held shared by each fenced stream command from its epoch check to its reply, and
    /// exclusively by `TXEPOCH` while it raises the epoch: once `TXEPOCH` replies, no stream
    /// command checked against the older epoch is still running, so an agent that took over
    /// never sees a stale agent's message land after its own `TXEPOCH`.
    fence: RwLock<()>,
    /// The expiry clock's time when a test stopped it (0: running).
    #[cfg(test)]
    frozen_clock: std::sync::atomic::AtomicU64,
}

impl Node {
    /// The largest request bulk the protocol accepts, whatever the memory limit (as Redis).
    const MAX_BULK_CEILING: usize = 512 << 20;

    /// A node with empty shards for `config`.
    pub fn new(config: Config) -> Self {
        let store_config = StoreConfig {
            max_memory: config.max_memory,
            max_staleness_micros: u64::try_from(config.max_staleness.as_micros())
                .unwrap_or(u64::MAX),
        };
        let shards = Shards::new(config.shard_count(), store_config);
        let node = Self {
            shards,
            metrics: ServerMetrics::default(),
            max_bulk_len: AtomicUsize::new(0),
            max_memory: AtomicUsize::new(config.max_memory),
            config,
            logs: LogThrottles::default(),
            started: Instant::now(),
            origin: Mutex::new(None),
            database: OnceLock::new(),
            epoch: AtomicU64::new(0),
            fence: RwLock::new(()),
            #[cfg(test)]
            frozen_clock: std::sync::atomic::AtomicU64::new(0),
        };
        node.update_bulk_limit(node.max_memory());
        node
    }

    /// The database history the stream follows; `None` until an agent names one.
    pub fn origin(&self) -> Option<Bytes> {
        self.origin.lock().clone()
    }

    /// Records the database history the stream follows from now on.
    pub fn set_origin(&self, origin: Bytes) {
        *self.origin.lock() = Some(origin);
    }

    /// The database whose stream the node follows; `None` until an agent named one.
    pub fn database(&self) -> Option<&Bytes> {
        self.database.get()
    }

    /// The database the node follows from now on: `database`, unless it follows one already
    /// (which is returned).
    pub fn claim_database(&self, database: &Bytes) -> &Bytes {
        self.database.get_or_init(|| database.clone())
    }

    /// The fencing epoch: the highest epoch an agent announced with `TXEPOCH`; 0 before any.
    /// Like the origin, it lives as long as the node process.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Raises the epoch to `epoch` (it never goes down), once every stream command admitted
    /// at the older epoch has finished. `Err` with the node's epoch when `epoch` is older:
    /// its sender is an agent another one took over from, and nothing changes.
    pub fn raise_epoch(&self, epoch: u64) -> Result<(), u64> {
        let _fence = self.fence.write();
        let current = self.epoch.fetch_max(epoch, Ordering::AcqRel);
        if epoch < current {
            return Err(current);
        }
        Ok(())
    }

    /// Admits a stream command from a connection at `epoch`: the returned guard, held while
    /// the command runs, keeps `TXEPOCH` from raising the epoch meanwhile. `Err` with the
    /// node's epoch when `epoch` is older (the connection is fenced).
    pub fn admit_stream(&self, epoch: u64) -> Result<RwLockReadGuard<'_, ()>, u64> {
        let fence = self.fence.read();
        let current = self.epoch();
        if epoch < current {
            return Err(current);
        }
        Ok(fence)
    }

    /// Limits for decoding the next request.
    pub fn limits(&self) -> Limits {
        Limits {
            max_bulk_len: self.max_bulk_len.load(Ordering::Relaxed),
            ..Limits::default()
        }
    }

    /// The most bytes one reply of several values (`MGET`, `EXEC`) may take: the bulk
    /// limit, which follows the memory limit. A few hundred bytes naming one large value
    /// many times must not make the node hold a reply many times its memory.
    pub fn reply_limit(&self) -> usize {
        self.max_bulk_len.load(Ordering::Relaxed)
    }

    /// The node-wide memory limit in bytes.
    pub fn max_memory(&self) -> usize {
        self.max_memory.load(Ordering::Relaxed)
    }

    /// Changes the node-wide memory limit (and the protocol's bulk limit with it); returns
    /// each shard's share, which the caller sets on every shard (`CONFIG SET` does so through
    /// its context, which may hold the shards already).
    pub fn set_max_memory(&self, bytes: usize) -> usize {
        self.max_memory.store(bytes, Ordering::Relaxed);
        self.update_bulk_limit(bytes);
        self.shards.share(bytes)
    }

    /// Milliseconds since the Unix epoch: the clock of plain keys' expiry, which (unlike the
    /// versioned entries' time, which comes from the stream) is this machine's, as in Redis.
    pub fn now_ms(&self) -> u64 {
        #[cfg(test)]
        if let Some(frozen) = self.frozen_clock() {
            return frozen;
        }
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }

    /// Stops the expiry clock at `ms` (0: the real clock again), for tests.
    #[cfg(test)]
    pub fn freeze_clock(&self, ms: u64) {
        self.frozen_clock.store(ms, Ordering::Relaxed);
    }

    #[cfg(test)]
    fn frozen_clock(&self) -> Option<u64> {
        Some(self.frozen_clock.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    /// A value larger than the whole node can never be stored, so the protocol refuses to
    /// buffer it; one between a shard's share and the whole limit still gets a clean
    /// `-TOOLARGE` reply instead of a closed connection.
    fn update_bulk_limit(&self, max_memory: usize) {
        let limit = max_memory.saturating_add(4096).min(Self::MAX_BULK_CEILING);
        self.max_bulk_len.store(limit, Ordering::Relaxed);
    }
}

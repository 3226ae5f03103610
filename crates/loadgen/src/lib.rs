//! txcache-loadgen: load for cache servers, the same tool against txcached, Redis and
//! memcached so that their numbers compare.
//!
//! - Protocols ([`protocol`]): RESP `GET`/`SET`, txcached's `TXGET`/`TXSET`, memcached's
//!   text `get`/`set`.
//! - Workloads ([`workload`], [`dist`]): a lookup/store mix, uniform or Zipf keys, fixed or
//!   Facebook ETC key and value sizes; the key space is preloaded first.
//! - Loops: [`closed`] (each connection keeps one batch of `depth` requests in flight: the
//!   server's maximum throughput) and [`open`] (a fixed Poisson request rate, latency from the
//!   intended send time).
//! - Results ([`report`]): one JSON object with ops/s and latency quantiles.
//! - The host ([`memory`]): its memory latency at the moment, recorded beside benchmark rounds.
//!
//! Only loopback targets are accepted, and every run is bounded in time and requests.

pub mod cli;
pub mod closed;
pub mod dist;
pub mod histogram;
pub mod memory;
pub mod open;
pub mod outcome;
pub mod protocol;
pub mod report;
pub mod rng;
pub mod workload;

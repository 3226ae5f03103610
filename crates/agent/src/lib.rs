//! txcache-agent: turns PostgreSQL's logical-decoding stream into invalidations for the
//! cache nodes, and keeps the pincushion of certified snapshots.

pub mod assemble;
pub mod auth_failures;
pub mod catalog;
pub mod certify;
pub mod cmd;
pub mod config;
pub mod connect;
pub mod conninfo;
pub mod database;
pub mod decoding;
pub mod digest_table;
pub mod fanout;
pub mod fingerprint_check;
pub mod heartbeat;
pub mod lease;
pub mod membership;
pub mod message;
pub mod metrics;
pub mod node_link;
pub mod pgoutput;
pub mod pincushion;
pub mod retry;
pub mod schema_digests;
pub mod schema_watch;
pub mod server;
pub mod shared_catalog;
pub mod standby;
pub mod stream;
pub mod stream_stats;
pub mod tags;
pub mod term;
pub mod timeline;
pub mod tracker;

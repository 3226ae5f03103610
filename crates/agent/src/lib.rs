//! txcache-agent: turns PostgreSQL's logical-decoding stream into invalidations for the
//! cache nodes, and keeps the pincushion of certified snapshots.

pub mod certify;
pub mod pgoutput;
pub mod tags;

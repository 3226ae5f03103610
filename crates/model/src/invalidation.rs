//! One committed write transaction, as the agent reports it to the cache nodes.

use crate::{InvalidationTag, Timestamp, WallClock};

/// A committed write transaction: its commit LSN, its commit time, and the tags of every row
/// it inserted, updated or deleted. Nodes apply these strictly in `ts` order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalidation {
    /// The transaction's commit LSN.
    pub ts: Timestamp,
    /// When the transaction committed (PostgreSQL's commit time).
    pub commit_time: WallClock,
    /// The rows it changed, as fine or wildcard tags.
    pub tags: Vec<InvalidationTag>,
}

//! Why the store refuses an operation. Every refusal leaves the store unchanged.

use txcache_model::Timestamp;

/// A refused operation. The store is unchanged after any of these.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A plain operation (`get`) on a versioned key, or a versioned one (`lookup`, `insert`) on
    /// a plain key.
    #[error("operation against a key holding the wrong kind of value")]
    WrongType,
    /// The item's accounted size exceeds the whole memory limit, so no eviction could make
    /// room for it.
    #[error("item of {size} accounted bytes can never fit in a store of {limit} bytes")]
    TooLarge {
        /// The item's accounted size: value, key, version overhead and tags.
        size: usize,
        /// The store's memory limit.
        limit: usize,
    },
    /// An open interval without a snapshot: an open version needs the snapshot from which
    /// invalidations are tracked.
    #[error("an open interval needs a snapshot timestamp")]
    OpenWithoutSnapshot,
    /// An insert whose snapshot lies outside its own interval: the value read at the
    /// snapshot cannot vouch for timestamps it was not computed at.
    #[error("snapshot {snapshot} lies outside the interval {interval} the cache reads allow")]
    SnapshotOutsideInterval {
        /// The snapshot given.
        snapshot: Timestamp,
        /// The interval given.
        interval: txcache_model::ValidityInterval,
    },
    /// A lookup range whose `lo` exceeds its `hi`.
    #[error("lookup range is empty: lo {lo} exceeds hi {hi}")]
    InvalidRange {
        /// The lower end given.
        lo: Timestamp,
        /// The upper end given.
        hi: Timestamp,
    },
}

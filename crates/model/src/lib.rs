//! Shared txcache types, free of I/O.
//!
//! Every component agrees on these: a [`Timestamp`] is a PostgreSQL commit LSN, a
//! [`ValidityInterval`] says over which timestamps a cached value is correct, an
//! [`InvalidationTag`] names the rows a value depends on, and an [`Invalidation`] is one
//! committed write transaction as the agent reports it to the cache nodes. [`units`] is the
//! one grammar of durations and byte sizes on every command line.

mod interval;
mod invalidation;
mod tag;
mod timestamp;
pub mod units;

pub use interval::{IntervalError, ValidityInterval};
pub use invalidation::Invalidation;
pub use tag::{escape_name, table_name, ColumnSet, InvalidationTag, TagError};
pub use timestamp::{Timestamp, WallClock};

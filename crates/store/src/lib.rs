//! The versioned, invalidation-aware storage engine of a txcache node.
//!
//! A [`Store`] is one shard of a node's data. It is synchronous and single-threaded: the server
//! holds one per shard behind a mutex, routes keys to shards by hash, and applies every
//! invalidation, heartbeat and reset to all shards in the same order. The store does no I/O,
//! reads no clock (all time comes in with the messages) and spawns no threads.
//!
//! # Entries
//! Keys are bytes. An entry is either *plain* (one value set by [`Store::set`], never touched
//! by invalidations) or *versioned*: non-overlapping versions sorted by `lo`, each a value, a
//! [`ValidityInterval`](txcache_model::ValidityInterval), and, while open, the tags it is
//! registered under. At most one version of a key is open, the latest. A plain operation on a
//! versioned key or the reverse is [`StoreError::WrongType`]; `set` overwrites either kind.
//! A plain value may carry an expiry deadline (Redis's `EX`/`PX`, `EXPIRE`): the store reads
//! no clock, so plain operations are given `now`; an expired value is never returned, is
//! removed when found, by [`Store::expire_due`], or first when memory is needed.
//!
//! # Time
//! `N` ([`Store::last_applied`]) is the timestamp of the last applied invalidation, heartbeat or
//! reset. `H` ([`Store::horizon`]) is the history horizon: the node knows every commit after
//! `H` (and the one at `H`). There is no history before the first message; the first message
//! sets `H` to its timestamp; trimming the history moves `H` to the last trimmed commit.
//!
//! # Lookup
//! [`Store::lookup`] over the inclusive range `[lo, hi]` returns the version with the greatest
//! `lo` whose *effective* interval meets the range; an open version `[v, ∞)` counts as
//! `[v, max(N, v) + 1)`, valid through `N`. A miss is classified, in this order:
//! [`MissKind::Compulsory`] (no versions and no ghost), [`MissKind::Capacity`] (the ghost of a
//! version evicted for memory would have answered), [`MissKind::Consistency`] (a version is
//! fresh enough, effective `hi > lo`, but starts after `hi`), else [`MissKind::Staleness`].
//!
//! # Insert
//! [`Store::insert`] intersects the request's interval with the *database interval* of its
//! snapshot `s` and tag set `T`:
//! - `s > N`: `[s, ∞)` (commits in `(N, s]` are unknown but visible in `s`);
//! - no history yet, or `s < H`: `[s, s + 1)`;
//! - otherwise `[max(H, latest commit ≤ s matching T), first commit in (s, N] matching T)`,
//!   open when there is none. Tags match by
//!   [`InvalidationTag::matches`](txcache_model::InvalidationTag::matches), column sets
//!   included; past a long run of commits whose columns miss, the nearest commit answers
//!   instead, which only shortens the interval.
//!
//! [`Store::database_interval`] computes that interval alone, storing nothing (the node's
//! `TXINTERVAL`); [`Store::effective`] bounds an open one at what the node has seen.
//!
//! An open result is registered in the tag index. Overlapping existing versions (open ones
//! reaching to infinity) with equal bytes are merged with it ([`InsertOutcome::Extended`]); a
//! merged open version keeps the tags of the open input with the lowest `lo`, which alone
//! vouches for the whole open part. Different bytes are nondeterminism: the existing versions
//! stay, the new one is dropped, counted and logged ([`InsertOutcome::Nondeterministic`]).
//!
//! # Invalidation
//! [`Store::invalidate`] ignores a timestamp not after `N`. Otherwise it bounds at `ts` every
//! open version one of its tags matches, except a version whose `lo ≥ ts`: a commit at or
//! before an entry's `lo` never truncates it. [`Store::heartbeat`] advances `N` alone;
//! [`Store::reset`] bounds every open version at `max(N, lo) + 1` and forgets the history.
//!
//! # Memory
//! A hard limit on accounted bytes ([`MemoryUsage`]): values, keys, versions, tags, history and
//! ghosts, each charged what it really costs. Inserts evict (sampled LRU) until the item fits;
//! an item larger than the whole limit is [`StoreError::TooLarge`]. Bounded versions whose
//! first later commit is older than the staleness limit are removed eagerly. `docs/store.md`
//! holds the details: data structures, constants, and every decision.

mod audit;
mod bucket;
mod config;
mod entry;
mod error;
mod evict;
mod expiry;
mod ghost;
mod history;
mod insert;
mod invalidate;
mod kv;
mod lease;
mod lookup;
mod memory;
mod plain;
mod stale;
mod stats;
mod store;
mod tag_index;

#[cfg(test)]
mod tests;

pub use config::StoreConfig;
pub use error::StoreError;
pub use expiry::{ExpireCondition, KeyExpiry};
pub use history::SharedHistory;
pub use insert::{InsertOutcome, InsertRequest};
pub use kv::{SetCondition, SetExpiry, SetOptions};
pub use lease::LeaseOutcome;
pub use lookup::{Hit, HitRef, Lookup, LookupRef, MissKind};
pub use memory::MemoryUsage;
pub use stats::{Gauges, StoreStats, SIZE_BUCKETS};
pub use store::Store;

//! The stream's positions and events, counted where they happen: by the stream task (what
//! it decoded, its reconnects, slot recreations, database changes, where it is decoded) and
//! the heartbeat task (the database's WAL position). `metrics.rs` reads them; nothing here knows of metrics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use txcache_model::Timestamp;

/// Positions and events of the stream, kept by the stream and heartbeat tasks.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// The end of the last record the stream received: everything below it is decoded.
    position: AtomicU64,
    /// The database's WAL position when last measured (each heartbeat written).
    database_position: AtomicU64,
    reconnects: AtomicU64,
    slot_recreations: AtomicU64,
    database_changes: AtomicU64,
    untracked_schema_changes: AtomicU64,
    /// Whether the stream's slot is on a `--decode-from` standby, as last checked.
    slot_on_standby: AtomicBool,
    /// Whether the primary keeps a spare slot (`--decode-primary-slot spare`, the primary
    /// found among the `--decode-from` hosts).
    primary_slot_spare: AtomicBool,
}

impl StreamStats {
    /// A session resumes at `position` (the slot's confirmed position). It may be below what
    /// the previous session reached: the stream decodes that stretch again.
    pub fn resume_at(&self, position: Timestamp) {
        self.position.store(position.0, Ordering::Relaxed);
    }

    /// The stream has decoded everything below `end`.
    pub fn decoded(&self, end: Timestamp) {
        self.position.fetch_max(end.0, Ordering::Relaxed);
    }

    /// The database's WAL reached `position` (measured just now).
    pub fn database_at(&self, position: Timestamp) {
        self.database_position.store(position.0, Ordering::Relaxed);
    }

    /// A replication session ended or could not start; another is attempted.
    pub fn count_reconnect(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    /// The slot was lost (or dropped) and recreated, or found ahead of the stream.
    pub fn count_slot_recreation(&self) {
        self.slot_recreations.fetch_add(1, Ordering::Relaxed);
    }

    /// The database's positions went back or its history changed.
    pub fn count_database_change(&self) {
        self.database_changes.fetch_add(1, Ordering::Relaxed);
    }

    /// The schema changed without a DDL notice: a table described anew, or a catalog whose
    /// digest no DDL notice explains.
    pub fn count_untracked_schema_change(&self) {
        self.untracked_schema_changes
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Where the stream is decoded, as the stream (with `--decode-from`) last checked: on a
    /// standby (its slot there, none of the stream's on the primary) or the primary; and
    /// whether the primary keeps a spare slot.
    pub fn decoding_on(&self, standby: bool, primary_spare: bool) {
        self.slot_on_standby.store(standby, Ordering::Relaxed);
        self.primary_slot_spare
            .store(primary_spare, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn read(&self) -> StreamCounts {
        // Destructured whole: a field added above is a compile error here until it is read.
        let Self {
            position,
            database_position,
            reconnects,
            slot_recreations,
            database_changes,
            untracked_schema_changes,
            slot_on_standby,
            primary_slot_spare,
        } = self;
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        StreamCounts {
            position: load(position),
            database_position: load(database_position),
            reconnects: load(reconnects),
            slot_recreations: load(slot_recreations),
            database_changes: load(database_changes),
            untracked_schema_changes: load(untracked_schema_changes),
            slot_on_standby: slot_on_standby.load(Ordering::Relaxed),
            primary_slot_spare: primary_slot_spare.load(Ordering::Relaxed),
        }
    }
}

/// [`StreamStats`] read at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamCounts {
    /// The end of the last record the stream received.
    pub position: u64,
    /// The database's WAL position when last measured.
    pub database_position: u64,
    /// Replication sessions that ended or failed to start.
    pub reconnects: u64,
    /// Slots recreated after they were lost.
    pub slot_recreations: u64,
    /// Sessions that found the database's positions gone back or its history changed.
    pub database_changes: u64,
    /// Transactions that changed a table's definition without a DDL notice.
    pub untracked_schema_changes: u64,
    /// Whether the stream's slot is on a `--decode-from` standby.
    pub slot_on_standby: bool,
    /// Whether the primary keeps a spare slot.
    pub primary_slot_spare: bool,
}

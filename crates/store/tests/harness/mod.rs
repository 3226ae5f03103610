//! Drives the store and the reference model with the same operations and checks each answer
//! as the mode demands.

use crate::reference::{self, Claims, Model};
use bytes::Bytes;
use proptest::prelude::*;
use std::sync::Arc;
use txcache_model::{
    ColumnSet, Invalidation, InvalidationTag, Timestamp, ValidityInterval, WallClock,
};
use txcache_store::{
    Hit, InsertOutcome, InsertRequest, Lookup, SharedHistory, Store, StoreConfig, StoreError,
};

/// A table (`s.a` or `s.b`), for a fine tag the value of its `id` column, and the bits of its
/// column set (0: every column, no `#`); table 2 is the global tag `*` (commits only).
pub type TagSpec = (u8, Option<u8>, u8);

/// The global tag `*`, as a [`TagSpec`].
pub const GLOBAL: TagSpec = (2, None, 0);

/// One operation, with timestamps as offsets from the current `N` so that sequences stay
/// interesting wherever the stream is.
#[derive(Clone, Debug)]
pub enum Op {
    Insert {
        key: u8,
        value: u8,
        lo: i8,
        len: Option<u8>,
        snapshot: Option<i8>,
        tags: Vec<TagSpec>,
    },
    Lookup {
        key: u8,
        lo: i8,
        len: u8,
        with_tags: bool,
    },
    Invalidate {
        gap: u8,
        dt: u8,
        tags: Vec<TagSpec>,
    },
    Duplicate {
        back: u8,
        tags: Vec<TagSpec>,
    },
    Heartbeat {
        gap: u8,
        dt: u8,
    },
    Reset {
        gap: i8,
        dt: u8,
    },
    Remove {
        key: u8,
    },
    Set {
        key: u8,
        value: u8,
    },
    Get {
        key: u8,
    },
    Resize {
        step: u8,
    },
}

fn tag(spec @ (table, value, columns): TagSpec) -> InvalidationTag {
    if spec == GLOBAL {
        return InvalidationTag::global();
    }
    let table = ["s.a", "s.b"][table as usize];
    match value {
        Some(v) => InvalidationTag::fine(table, "id", &v.to_string()),
        None => InvalidationTag::wildcard(table),
    }
    .expect("valid tag")
    .with_columns(ColumnSet::from_bits(u64::from(columns)))
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

/// Under memory pressure versioned keys spread wider, so that there is something to evict.
fn wide(mode: Mode, k: u8, salt: u8) -> u8 {
    match mode {
        Mode::Memory => k + 4 * (salt % 4),
        _ => k,
    }
}

/// How far from `N` an offset lands, never below zero.
fn offset(n: Timestamp, by: i64) -> Timestamp {
    Timestamp(n.0.saturating_add_signed(by))
}

/// What is checked: exact agreement, memory bound and soundness, or staleness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Exact,
    Memory,
    Staleness,
}

/// A store (or the shards of a node) and the model, driven together.
pub struct Harness {
    mode: Mode,
    /// Shards sharing one history, as a node's: keys route to one, stream messages go to all.
    stores: Vec<Store>,
    model: Model,
    claims: Claims,
    max_staleness: u64,
}

impl Harness {
    /// A fresh store with `config` beside a fresh model.
    pub fn new(mode: Mode, config: StoreConfig) -> Self {
        Self::sharded(mode, config, 1)
    }

    /// `shards` fresh stores with `config` each, sharing one history, beside a fresh model.
    pub fn sharded(mode: Mode, config: StoreConfig, shards: usize) -> Self {
        let max_staleness = config.max_staleness_micros;
        let history = Arc::new(SharedHistory::new(shards));
        let stores = (0..shards)
            .map(|_| Store::with_history(config.clone(), Arc::clone(&history)))
            .collect();
        Self {
            mode,
            stores,
            model: Model::default(),
            claims: Claims::default(),
            max_staleness,
        }
    }

    /// The shard holding `key`.
    fn shard(&mut self, key: &[u8]) -> &mut Store {
        let index = key.iter().map(|&b| usize::from(b)).sum::<usize>() % self.stores.len();
        &mut self.stores[index]
    }

    /// The bytes of value `v`: short in exact mode, of very different sizes under memory pressure.
    fn value(&self, v: u8) -> Bytes {
        let len = match self.mode {
            Mode::Memory => [0, 40, 400, 1500][v as usize % 4],
            _ => 2,
        };
        Bytes::from(vec![b'a' + v; len])
    }

    /// Under memory pressure plain and versioned keys are kept apart: evictions would make
    /// the model's idea of a key's kind diverge (kinds mixing is covered by exact mode).
    fn plain_key(&self, k: u8) -> Vec<u8> {
        match self.mode {
            Mode::Memory => key(k + 100),
            _ => key(k),
        }
    }

    /// Applies `op` to both and checks the answers and the invariants.
    pub fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Insert { .. } => self.insert(op)?,
            Op::Lookup {
                key: k,
                lo,
                len,
                with_tags,
            } => {
                let lo = offset(self.model.n, i64::from(*lo));
                let hi = Timestamp(lo.0 + u64::from(*len));
                self.lookup(&key(wide(self.mode, *k, *len)), lo, hi, *with_tags)?;
            }
            Op::Invalidate { gap, dt, tags } => {
                let ts = Timestamp(self.model.n.0 + u64::from(*gap));
                self.invalidate(ts, WallClock(self.model.wall.0 + u64::from(*dt)), tags)?;
            }
            Op::Duplicate { back, tags } => self.invalidate(
                offset(self.model.n, -i64::from(*back)),
                self.model.wall,
                tags,
            )?,
            Op::Heartbeat { gap, dt } => {
                let (ts, time) = (
                    Timestamp(self.model.n.0 + u64::from(*gap)),
                    WallClock(self.model.wall.0 + u64::from(*dt)),
                );
                let expected = self.model.heartbeat(ts, time);
                for store in &mut self.stores {
                    prop_assert_eq!(store.heartbeat(ts, time), expected);
                }
            }
            Op::Reset { gap, dt } => {
                let (ts, time) = (
                    offset(self.model.n, i64::from(*gap)),
                    WallClock(self.model.wall.0 + u64::from(*dt)),
                );
                self.claims.reset(self.model.n);
                for store in &mut self.stores {
                    store.reset(ts, time);
                }
                self.model.reset(ts, time);
            }
            Op::Remove { key: k } => {
                self.claims.remove(&key(*k));
                let removed = self.shard(&key(*k)).remove(&key(*k), 0);
                prop_assert!(removed == self.model.remove(&key(*k)) || self.mode != Mode::Exact);
            }
            Op::Set { key: k, value } => self.set(&self.plain_key(*k), self.value(*value))?,
            Op::Get { key: k } => self.get(&self.plain_key(*k))?,
            Op::Resize { step } if self.mode == Mode::Memory => {
                for store in &mut self.stores {
                    store.set_max_memory(1500 + 2000 * usize::from(*step));
                }
            }
            Op::Resize { .. } => {}
        }
        self.check_after()
    }

    fn check_after(&self) -> Result<(), TestCaseError> {
        for store in &self.stores {
            prop_assert_eq!(store.verify_invariants(), Ok(()));
            prop_assert!(store.memory().total() <= store.config().max_memory);
            prop_assert_eq!(store.last_applied(), self.model.n);
            if self.mode == Mode::Exact {
                prop_assert_eq!(store.horizon(), self.model.h);
            }
        }
        Ok(())
    }

    fn insert(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let Op::Insert {
            key: k,
            value,
            lo,
            len,
            snapshot,
            tags,
        } = op
        else {
            unreachable!()
        };
        let n = self.model.n;
        // Readers are never older than the staleness limit; neither are their snapshots.
        let floor = match self.mode {
            Mode::Staleness => self.model.stale_frontier(self.max_staleness),
            _ => Timestamp::ZERO,
        };
        let snapshot = snapshot.map(|s| offset(n, i64::from(s)).max(floor));
        let lo = offset(n, i64::from(*lo)).max(floor);
        // Libraries run queries at a pin inside their cache-read interval; keep most
        // snapshots there and a few outside (those inserts are refused).
        let lo = match snapshot {
            Some(s) if lo > s && s.0 % 4 != 0 => s,
            _ => lo,
        };
        let interval = match len {
            Some(len) => {
                ValidityInterval::bounded(lo, Timestamp(lo.0 + u64::from(*len))).expect("non-empty")
            }
            None => ValidityInterval::open(lo),
        };
        let request = InsertRequest {
            interval,
            snapshot,
            tags: tags.iter().copied().map(tag).collect(),
        };
        let (key, value) = (key(wide(self.mode, *k, lo.0 as u8)), self.value(*value));
        let actual = self.shard(&key).insert(&key, &value, request.clone());
        if matches!(
            actual,
            Ok(InsertOutcome::Inserted(_) | InsertOutcome::Extended(_))
        ) {
            let claim = self
                .model
                .final_interval(&request)
                .expect("the store stored it, so it is non-empty");
            self.claims
                .add(&key, value.clone(), claim, request.tags.clone());
        }
        let expected = self.model.insert(&key, value, request);
        if self.mode != Mode::Memory {
            prop_assert_eq!(actual, expected);
        }
        Ok(())
    }

    fn lookup(
        &mut self,
        key: &[u8],
        lo: Timestamp,
        hi: Timestamp,
        with_tags: bool,
    ) -> Result<(), TestCaseError> {
        let actual = self.shard(key).lookup(key, lo, hi, with_tags);
        let expected = self.model.lookup(key, lo, hi, with_tags);
        // Soundness holds in every mode; it does not trust the model's merging rules.
        self.check_sound(key, &actual)?;
        match self.mode {
            Mode::Exact => prop_assert_eq!(actual, expected),
            Mode::Memory => {}
            Mode::Staleness => self.check_readable(key, actual, expected)?,
        }
        Ok(())
    }

    /// A hit must be covered by accepted claims of the same bytes, each truncated by its own
    /// tags: merging may never make a value valid where no computation said it was.
    fn check_sound(
        &self,
        key: &[u8],
        actual: &Result<Lookup, StoreError>,
    ) -> Result<(), TestCaseError> {
        if let Ok(Lookup::Hit(hit)) = actual {
            prop_assert!(
                self.claims
                    .cover(key, &hit.value, &hit.interval, self.model.n),
                "unsound hit {:?} on {:?}",
                hit,
                String::from_utf8_lossy(key)
            );
        }
        Ok(())
    }

    /// Where the model's answer is readable within the staleness limit the store agrees;
    /// elsewhere the store may miss, and a hit is exactly one of the model's versions of `key`
    /// (the store holds the model's versions less some stale ones).
    fn check_readable(
        &self,
        key: &[u8],
        actual: Result<Lookup, StoreError>,
        expected: Result<Lookup, StoreError>,
    ) -> Result<(), TestCaseError> {
        let cutoff = self.model.wall.minus_micros(self.max_staleness);
        let readable = |hit: &Hit| {
            let end = hit
                .interval
                .hi()
                .and_then(|e| self.model.first_commit_time_from(e));
            hit.open || end.is_none_or(|t| t >= cutoff)
        };
        match (&actual, &expected) {
            (_, Ok(Lookup::Hit(hit))) if readable(hit) => prop_assert_eq!(actual, expected),
            (Ok(Lookup::Hit(hit)), _) => prop_assert!(self.model_holds(key, hit), "{:?}", hit),
            (Ok(Lookup::Miss(_)), Ok(_)) => {}
            _ => prop_assert_eq!(actual, expected),
        }
        Ok(())
    }

    /// Whether the model holds a version of `key` with the hit's bytes and effective interval.
    fn model_holds(&self, key: &[u8], hit: &Hit) -> bool {
        let Some(reference::Entry::Versioned(versions)) = self.model.keys.get(key) else {
            return false;
        };
        versions.iter().any(|v| {
            let (lo, hi) = reference::effective(v, self.model.n);
            v.value == hit.value && lo == hit.interval.lo() && Some(hi) == hit.interval.hi()
        })
    }

    fn invalidate(
        &mut self,
        ts: Timestamp,
        time: WallClock,
        tags: &[TagSpec],
    ) -> Result<(), TestCaseError> {
        let inv = Invalidation {
            ts,
            commit_time: time,
            tags: tags.iter().copied().map(tag).collect(),
        };
        if ts > self.model.n {
            self.claims.invalidate(&inv);
        }
        let expected = self.model.invalidate(&inv);
        for store in &mut self.stores {
            prop_assert_eq!(store.invalidate(&inv), expected);
        }
        Ok(())
    }

    fn set(&mut self, key: &[u8], value: Bytes) -> Result<(), TestCaseError> {
        self.claims.remove(key);
        let result = self.shard(key).set(key, &value);
        match result {
            Err(StoreError::TooLarge { .. }) if self.mode == Mode::Memory => {}
            other => prop_assert_eq!(other, Ok(())),
        }
        self.model.set(key, value);
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> Result<(), TestCaseError> {
        let actual = self
            .shard(key)
            .get(key, || 0)
            .map(|v| v.map(Bytes::copy_from_slice));
        let expected = self.model.get(key);
        match self.mode {
            Mode::Exact => prop_assert_eq!(actual, expected),
            // Evicted plain values read as absent; anything present is what was set.
            _ => prop_assert!(
                actual == expected || matches!(actual, Ok(None)) || expected.is_err(),
                "{:?} vs {:?}",
                actual,
                expected
            ),
        }
        Ok(())
    }
}

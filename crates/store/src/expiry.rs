//! Plain keys' expiry (Redis's `EX`/`PX`, `EXPIRE`, `TTL`, `PERSIST`).
//!
//! A deadline (milliseconds since the Unix epoch) rides in its item ([`crate::plain`]), so an
//! access finds an expired key by itself and removes it (lazy expiry). To find expired keys
//! nobody asks for, every deadline set also pushes a `(deadline, key hash)` record on a
//! min-heap: [`Store::expire_due`] (the node's periodic sweep) and eviction, which takes
//! expired keys before any live one, pop the records that are due and remove the item filed
//! under that hash whose deadline is the record's. A record whose item has since gone or got
//! another deadline matches nothing and is dropped when popped, or by compaction once such
//! leftovers outnumber the live ones. Records keep a hash, not the key: 24 bytes each,
//! whatever the key's length. Two keys sharing a hash and a deadline would both be due at it,
//! so taking either is right.
//!
//! The store reads no clock: every operation that may expire a key is given `now`.

use crate::memory::{plain_usage, EXPIRY_RECORD};
use crate::plain::PlainItem;
use crate::{Store, StoreError};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Deadlines of plain items, earliest first, each with its key's hash in the plain table.
#[derive(Debug, Default)]
pub(crate) struct ExpiryQueue {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl ExpiryQueue {
    /// Records that `hash`'s item expires at `deadline`.
    pub fn push(&mut self, deadline: u64, hash: u64) {
        self.heap.push(Reverse((deadline, hash)));
    }

    /// Records held, live or not.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Accounted bytes of the queue.
    pub fn bytes(&self) -> usize {
        self.heap.len() * EXPIRY_RECORD
    }

    /// The earliest record whose deadline is before `now`, removed from the queue.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, u64)> {
        let Reverse((deadline, _)) = self.heap.peek()?;
        if *deadline >= now {
            return None;
        }
        self.heap.pop().map(|Reverse(record)| record)
    }

    /// Keeps one of each record for which `live(deadline, hash)` holds.
    pub fn retain(&mut self, mut live: impl FnMut(u64, u64) -> bool) {
        let mut records = std::mem::take(&mut self.heap).into_vec();
        records.sort_unstable();
        records.dedup();
        records.retain(|Reverse((deadline, hash))| live(*deadline, *hash));
        records.shrink_to_fit();
        self.heap = records.into();
    }

    /// Every record, in no particular order (for the invariant check).
    pub fn records(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.heap.iter().map(|Reverse(record)| *record)
    }

    pub fn clear(&mut self) {
        *self = ExpiryQueue::default();
    }
}

/// What [`Store::expire`] requires of the key's current expiry: Redis's `NX`, `XX`, `GT` and
/// `LT`, checked in that order. A key without an expiry counts as expiring never, later than
/// any deadline (so `GT` refuses it and `LT` accepts it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireCondition {
    /// Only a key without an expiry (`NX`).
    pub if_none: bool,
    /// Only a key with an expiry (`XX`).
    pub if_some: bool,
    /// Only a deadline later than the current one (`GT`).
    pub if_later: bool,
    /// Only a deadline earlier than the current one (`LT`).
    pub if_earlier: bool,
}

impl ExpireCondition {
    /// Whether a key whose expiry is `current` may get `deadline`.
    fn allows(&self, current: Option<u64>, deadline: u64) -> bool {
        !(self.if_none && current.is_some()
            || self.if_some && current.is_none()
            || self.if_later && current.is_none_or(|current| deadline <= current)
            || self.if_earlier && current.is_some_and(|current| deadline >= current))
    }
}

/// A key's expiry, as [`Store::expiry`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyExpiry {
    /// No such key (or it expired).
    Absent,
    /// The key holds a value that never expires (every versioned key is one).
    Never,
    /// The key's plain value expires at this deadline (milliseconds since the Unix epoch).
    At(u64),
}

/// What a plain item with a `key_len`-byte key, a `value_len`-byte value and a deadline or
/// none costs in all: its charge and its expiry record.
pub(crate) fn plain_cost(key_len: usize, value_len: usize, expires: bool) -> usize {
    let record = if expires { EXPIRY_RECORD } else { 0 };
    plain_usage(key_len, value_len, expires).total() + record
}

impl Store {
    /// `key`'s expiry at `now`: [`KeyExpiry::Absent`] for a missing (or expired, now removed)
    /// key, [`KeyExpiry::Never`] for one without a deadline, plain or versioned.
    pub fn expiry(&mut self, key: &[u8], now: u64) -> KeyExpiry {
        match self.live_plain(key, now) {
            Some(position) => match self.plain.item_at(position).and_then(PlainItem::deadline) {
                Some(deadline) => KeyExpiry::At(deadline),
                None => KeyExpiry::Never,
            },
            None if self.keys.get(key).is_some() => KeyExpiry::Never,
            None => KeyExpiry::Absent,
        }
    }

    /// Gives `key`'s plain value the deadline `deadline` if `condition` allows; a deadline
    /// not after `now` removes the key at once (Redis's `EXPIRE` with a time in the past).
    /// Returns whether it did either; false for a missing key. A versioned key lives by its
    /// intervals, not by a deadline: [`StoreError::WrongType`].
    pub fn expire(
        &mut self,
        key: &[u8],
        deadline: u64,
        now: u64,
        condition: ExpireCondition,
    ) -> Result<bool, StoreError> {
        let Some(position) = self.live_plain(key, now) else {
            return match self.keys.get(key) {
                Some(_) => Err(StoreError::WrongType),
                None => Ok(false),
            };
        };
        let current = self.plain.item_at(position).and_then(PlainItem::deadline);
        if !condition.allows(current, deadline) {
            return Ok(false);
        }
        if deadline <= now {
            self.expire_at(position);
            return Ok(true);
        }
        if current.is_some() {
            // Same length: the deadline moves in place; the old record is left to die.
            if let Some(item) = self.plain.item_at_mut(position) {
                item.move_deadline(deadline);
            }
            let hash = self.plain.hash_of(key);
            self.expiry.push(deadline, hash);
            self.maybe_compact_expiry();
            self.make_room(0);
            return Ok(true);
        }
        let Some(item) = self.plain.item_at(position) else {
            return Ok(false);
        };
        let size = plain_cost(key.len(), item.value().len(), true);
        if size > self.config.max_memory {
            let limit = self.config.max_memory;
            return Err(StoreError::TooLarge { size, limit });
        }
        self.replace_plain(position, key, Some(deadline));
        Ok(true)
    }

    /// Removes the deadline of `key`'s plain value; returns whether it had one (false for a
    /// missing or versioned key, which have none).
    pub fn persist(&mut self, key: &[u8], now: u64) -> bool {
        let Some(position) = self.live_plain(key, now) else {
            return false;
        };
        if self
            .plain
            .item_at(position)
            .and_then(PlainItem::deadline)
            .is_none()
        {
            return false;
        }
        self.replace_plain(position, key, None);
        true
    }

    /// Removes up to `budget` plain keys whose deadline is before `now` (the node's periodic
    /// sweep, for keys nobody reads); returns how many records it took, live or not, so that a
    /// caller that used its whole budget knows to come back soon.
    pub fn expire_due(&mut self, now: u64, budget: usize) -> usize {
        self.plain_now = now;
        let mut taken = 0;
        while taken < budget && self.expire_next_due() {
            taken += 1;
        }
        taken
    }

    /// Pops the earliest record due at the last time a plain operation carried and removes
    /// its item if it is still the one that expires then; false when no record is due. Used by
    /// eviction too: an expired key goes before any live one.
    pub(crate) fn expire_next_due(&mut self) -> bool {
        let Some((deadline, hash)) = self.expiry.pop_due(self.plain_now) else {
            return false;
        };
        let found = self
            .plain
            .remove_with_hash(hash, |item| item.deadline() == Some(deadline));
        if let Some(item) = found {
            self.ledger.remove_plain(&item);
            self.stats.plain_expired += 1;
        }
        true
    }

    /// Where `key`'s plain item is, if it holds one that has not expired at `now`; an expired
    /// one is removed (lazy expiry). Remembers `now` for eviction.
    pub(crate) fn live_plain(&mut self, key: &[u8], now: u64) -> Option<usize> {
        self.plain_now = now;
        let position = self.plain.position(key)?;
        let deadline = self.plain.item_at(position).and_then(PlainItem::deadline);
        if deadline.is_some_and(|deadline| deadline < now) {
            self.expire_at(position);
            return None;
        }
        Some(position)
    }

    /// Removes the plain item at `position` for having expired.
    pub(crate) fn expire_at(&mut self, position: usize) {
        if let Some(item) = self.plain.remove_at(position) {
            self.ledger.remove_plain(&item);
            self.stats.plain_expired += 1;
        }
    }

    /// Replaces the plain item at `position` (of `key`) with one of the same value and
    /// `deadline`: the item's length changes with a deadline's presence.
    fn replace_plain(&mut self, position: usize, key: &[u8], deadline: Option<u64>) {
        let Some(old) = self.plain.remove_at(position) else {
            return;
        };
        self.ledger.remove_plain(&old);
        self.put_plain(key, old.value(), deadline);
    }

    /// Stores a new plain item for `key`, which holds nothing now, making room for it first.
    /// The caller checked that it can fit at all.
    pub(crate) fn put_plain(&mut self, key: &[u8], value: &[u8], deadline: Option<u64>) {
        self.make_room(plain_cost(key.len(), value.len(), deadline.is_some()));
        let stamp = crate::plain::stamp_at(self.tick());
        let item = PlainItem::with_deadline(key, value, stamp, deadline);
        self.ledger.add_plain(&item);
        self.plain.insert_new(item);
        if let Some(deadline) = deadline {
            let hash = self.plain.hash_of(key);
            self.expiry.push(deadline, hash);
            self.maybe_compact_expiry();
        }
    }

    /// Compacts the expiry queue once its dead records outnumber the live ones (a key whose
    /// deadline is set again and again leaves one behind each time).
    fn maybe_compact_expiry(&mut self) {
        if self.expiry.len() > 2 * self.ledger.gauges.plain_expiring + 64 {
            self.compact_expiry();
        }
    }

    /// Keeps only the records that name an item with that deadline, one each.
    pub(crate) fn compact_expiry(&mut self) {
        let plain = &self.plain;
        self.expiry.retain(|deadline, hash| {
            plain.any_with_hash(hash, |item| item.deadline() == Some(deadline))
        });
    }
}

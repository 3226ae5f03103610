//! Plain key-value operations: Redis's string commands on values the store never interprets
//! (`INCRBY` parses and formats its integers in the server; [`Store::update`] only swaps the
//! bytes). Expiry is in `expiry.rs`.

use crate::expiry::plain_cost;
use crate::plain::{stamp_at, PlainItem};
use crate::{Store, StoreError};

/// When [`Store::set_with`] stores (Redis's `NX` and `XX`). A versioned key counts as
/// present.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetCondition {
    /// Whatever the key holds.
    #[default]
    Always,
    /// Only when the key holds nothing (`NX`).
    IfAbsent,
    /// Only when the key holds something (`XX`).
    IfPresent,
}

/// The expiry [`Store::set_with`] gives the value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetExpiry {
    /// None: a plain `SET` drops any deadline the key had.
    #[default]
    Never,
    /// The deadline the key's plain value had, if any (`KEEPTTL`).
    Keep,
    /// This deadline, in milliseconds since the Unix epoch (`EX`, `PX`, `EXAT`, `PXAT`); one
    /// not after `now` stores nothing and removes the key, as if it expired at once.
    At(u64),
}

/// The options of [`Store::set_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// When to store.
    pub condition: SetCondition,
    /// The expiry of the stored value.
    pub expiry: SetExpiry,
    /// Show the old plain value to the caller (`GET`); a versioned key is then
    /// [`StoreError::WrongType`] and nothing changes.
    pub get: bool,
}

impl Store {
    /// The plain value of `key`; `None` when absent or expired (an expired item is removed).
    /// Refreshes its recency.
    ///
    /// `now` (milliseconds since the Unix epoch) is called only for an item with a deadline:
    /// most have none, and their hits then read no clock. The value is borrowed from the
    /// store: the caller copies it where it goes (a reply buffer), so a hit allocates nothing.
    pub fn get(
        &mut self,
        key: &[u8],
        now: impl FnOnce() -> u64,
    ) -> Result<Option<&[u8]>, StoreError> {
        let stamp = stamp_at(self.tick());
        let mut position = self.plain.position(key);
        if position.is_none() && self.keys.get(key).is_some() {
            return Err(StoreError::WrongType);
        }
        self.stats.plain_gets += 1;
        // Most values have no deadline: a flag bit says so, and only a flagged one is decoded
        // (and the clock read).
        if let Some(at) =
            position.filter(|&at| self.plain.item_at(at).is_some_and(PlainItem::expires))
        {
            let deadline = self.plain.item_at(at).and_then(PlainItem::deadline);
            let now = now();
            self.plain_now = now;
            if deadline.is_some_and(|deadline| deadline < now) {
                self.expire_at(at);
                position = None;
            }
        }
        let Some(item) = position.and_then(|p| self.plain.item_at_mut(p)) else {
            self.stats.plain_misses += 1;
            return Ok(None);
        };
        self.stats.plain_hits += 1;
        item.set_stamp(stamp);
        Ok(Some(item.value()))
    }

    /// Stores a plain value without an expiry, replacing whatever `key` held (of either kind,
    /// like Redis). Evicts as needed; a value that could never fit is refused and nothing
    /// changes.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.check_plain_fits(key.len(), value.len(), false)?;
        self.drop_entry(key);
        self.ghosts.forget(key);
        self.put_plain(key, value, None);
        self.stats.plain_sets += 1;
        Ok(())
    }

    /// Redis's `SET` with its options at `now` (milliseconds since the Unix epoch): stores
    /// `value` when `options.condition` allows, with `options.expiry`, replacing whatever the
    /// key held. With `options.get`, `old` is shown the key's plain value before the change
    /// (`None` when it had none). Returns whether the value was stored (a deadline not after
    /// `now` counts as stored: the key then expired at once). A value that could never fit is
    /// refused and nothing changes (but an expired value found is removed).
    pub fn set_with(
        &mut self,
        key: &[u8],
        value: &[u8],
        options: SetOptions,
        now: u64,
        old: impl FnOnce(Option<&[u8]>),
    ) -> Result<bool, StoreError> {
        let live = self.live_plain(key, now);
        let versioned = live.is_none() && self.keys.get(key).is_some();
        if options.get && versioned {
            return Err(StoreError::WrongType);
        }
        let old_item = live.and_then(|position| self.plain.item_at(position));
        let deadline = match options.expiry {
            SetExpiry::Never => None,
            SetExpiry::Keep => old_item.and_then(PlainItem::deadline),
            SetExpiry::At(deadline) => Some(deadline),
        };
        self.check_plain_fits(key.len(), value.len(), deadline.is_some())?;
        if options.get {
            old(old_item.map(PlainItem::value));
        }
        let present = live.is_some() || versioned;
        let allowed = match options.condition {
            SetCondition::Always => true,
            SetCondition::IfAbsent => !present,
            SetCondition::IfPresent => present,
        };
        if !allowed {
            return Ok(false);
        }
        self.drop_entry(key);
        self.ghosts.forget(key);
        self.stats.plain_sets += 1;
        if deadline.is_some_and(|deadline| deadline <= now) {
            self.stats.plain_expired += 1;
            return Ok(true);
        }
        self.put_plain(key, value, deadline);
        Ok(true)
    }

    /// Replaces `key`'s plain value with what `new_value` makes of it (`None` when the key
    /// holds no live plain value), keeping its expiry; `new_value` returning `None` changes
    /// nothing. Returns whether a value was stored. The read, the computation and the write
    /// are one step under the shard's lock (`INCRBY`).
    pub fn update(
        &mut self,
        key: &[u8],
        now: u64,
        new_value: impl FnOnce(Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<bool, StoreError> {
        let live = self.live_plain(key, now);
        if live.is_none() && self.keys.get(key).is_some() {
            return Err(StoreError::WrongType);
        }
        let old_item = live.and_then(|position| self.plain.item_at(position));
        let deadline = old_item.and_then(PlainItem::deadline);
        let Some(value) = new_value(old_item.map(PlainItem::value)) else {
            return Ok(false);
        };
        self.check_plain_fits(key.len(), value.len(), deadline.is_some())?;
        self.drop_entry(key);
        self.ghosts.forget(key);
        self.put_plain(key, &value, deadline);
        self.stats.plain_sets += 1;
        Ok(true)
    }

    /// Whether `key` holds a value of either kind at `now`: an expired plain value does not
    /// count, and is removed.
    pub fn exists(&mut self, key: &[u8], now: u64) -> bool {
        self.live_plain(key, now).is_some() || self.keys.get(key).is_some()
    }

    /// Whether `key` holds an entry of either kind, expired or not: the tables as they are,
    /// for tests and audits ([`Store::exists`] is the command's view).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.plain.get(key).is_some() || self.keys.get(key).is_some()
    }

    /// Removes `key` of either kind and its ghost (its next miss is compulsory). Returns
    /// whether it existed at `now` (an expired plain value did not, though it goes too).
    pub fn remove(&mut self, key: &[u8], now: u64) -> bool {
        self.live_plain(key, now);
        let existed = self.drop_entry(key);
        self.ghosts.forget(key);
        if existed {
            self.stats.plain_deletes += 1;
            self.maybe_compact_stale();
        }
        existed
    }

    /// Removes every plain key (Redis's `FLUSHDB`); versioned entries stay.
    pub fn clear_plain(&mut self) {
        for item in self.plain.iter() {
            self.ledger.remove_plain(item);
        }
        self.plain.clear();
        self.expiry.clear();
    }

    /// Refuses a plain item that could never fit in this store: its whole cost (value, key,
    /// item, deadline and expiry record) is over the memory limit.
    pub fn check_plain_fits(
        &self,
        key_len: usize,
        value_len: usize,
        expires: bool,
    ) -> Result<(), StoreError> {
        let size = plain_cost(key_len, value_len, expires);
        match size > self.config.max_memory {
            true => Err(StoreError::TooLarge {
                size,
                limit: self.config.max_memory,
            }),
            false => Ok(()),
        }
    }
}

//! Leases on missing keys: when many callers miss one hot key at once (after an invalidation),
//! one recomputes it and the others wait for its store instead of all querying the database.
//!
//! A lookup that misses may ask for the key's lease. With no live lease it gets one (the
//! caller computes and stores; the store ends the lease); with a live one it learns how long
//! the lease has left, waits, and looks again — a hit then, or the lease, which an expired or
//! released one frees. A caller that dies holding a lease costs the waiters at most the
//! lease's duration. Leases live beside the versions, never change what a lookup finds, and
//! are bounded in number and bytes: a full table grants leases without recording them, which
//! is only the behaviour without leases.

use crate::entry::Key;
use hashbrown::HashMap;

/// What asking for a key's lease gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// The caller holds the lease: compute and store.
    Granted,
    /// Another caller holds it for up to this many more milliseconds: wait and look again.
    Held {
        /// Milliseconds the holder has left (at least 1).
        remaining_ms: u64,
    },
}

/// The live leases of one shard, by key.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    /// Deadline (milliseconds since the Unix epoch) by key.
    deadlines: HashMap<Key, u64>,
    /// Bytes of the keys held.
    key_bytes: usize,
}

impl Leases {
    /// Most leases one shard records.
    pub const MAX_LEASES: usize = 16_384;
    /// Most key bytes one shard's leases hold.
    pub const MAX_KEY_BYTES: usize = 1 << 20;

    /// Asks for `key`'s lease at `now` (milliseconds) for `duration_ms`.
    pub fn claim(&mut self, key: &[u8], now: u64, duration_ms: u64) -> LeaseOutcome {
        if let Some(&deadline) = self.deadlines.get(key) {
            if deadline > now {
                return LeaseOutcome::Held {
                    remaining_ms: deadline - now,
                };
            }
        }
        let deadline = now.saturating_add(duration_ms);
        if let Some(held) = self.deadlines.get_mut(key) {
            *held = deadline;
            return LeaseOutcome::Granted;
        }
        if self.full(key.len()) {
            self.drop_expired(now);
        }
        if !self.full(key.len()) {
            self.key_bytes += key.len();
            self.deadlines.insert(Key::from(key), deadline);
        }
        LeaseOutcome::Granted
    }

    /// Ends `key`'s lease (its value was stored, or its holder gave up); whether there was one.
    pub fn release(&mut self, key: &[u8]) -> bool {
        let released = self.deadlines.remove(key).is_some();
        if released {
            self.key_bytes -= key.len();
        }
        released
    }

    /// Ends every lease.
    pub fn clear(&mut self) {
        self.deadlines = HashMap::new();
        self.key_bytes = 0;
    }

    /// How many leases are recorded (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    fn full(&self, key_len: usize) -> bool {
        self.deadlines.len() >= Self::MAX_LEASES || self.key_bytes + key_len > Self::MAX_KEY_BYTES
    }

    fn drop_expired(&mut self, now: u64) {
        let mut freed = 0;
        self.deadlines.retain(|key, deadline| {
            let live = *deadline > now;
            if !live {
                freed += key.len();
            }
            live
        });
        self.key_bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_is_granted_and_the_next_waits_until_the_deadline() {
        let mut leases = Leases::default();
        assert_eq!(leases.claim(b"k", 1000, 500), LeaseOutcome::Granted);
        let held = LeaseOutcome::Held { remaining_ms: 300 };
        assert_eq!(leases.claim(b"k", 1200, 500), held);
        assert_eq!(leases.claim(b"other", 1200, 500), LeaseOutcome::Granted);
        // Expired: the next claim takes it over.
        assert_eq!(leases.claim(b"k", 1500, 500), LeaseOutcome::Granted);
        assert_eq!(
            leases.claim(b"k", 1600, 500),
            LeaseOutcome::Held { remaining_ms: 400 }
        );
    }

    #[test]
    fn a_release_frees_the_key_at_once() {
        let mut leases = Leases::default();
        leases.claim(b"k", 0, 1000);
        assert!(leases.release(b"k"));
        assert!(!leases.release(b"k"));
        assert_eq!(leases.claim(b"k", 1, 1000), LeaseOutcome::Granted);
        assert_eq!((leases.len(), leases.key_bytes), (1, 1));
    }

    #[test]
    fn a_full_table_sweeps_expired_leases_then_grants_without_recording() {
        let mut leases = Leases::default();
        for n in 0..Leases::MAX_LEASES {
            leases.claim(format!("k{n}").as_bytes(), 0, 10);
        }
        // All expired at 20: the sweep makes room.
        assert_eq!(leases.claim(b"new", 20, 1000), LeaseOutcome::Granted);
        assert_eq!(leases.len(), 1);
        for n in 0..Leases::MAX_LEASES {
            leases.claim(format!("j{n}").as_bytes(), 20, 1000);
        }
        // Full of live leases: granted, not recorded, so a second caller computes too.
        assert_eq!(leases.claim(b"late", 30, 1000), LeaseOutcome::Granted);
        assert_eq!(leases.claim(b"late", 31, 1000), LeaseOutcome::Granted);
        assert_eq!(leases.len(), Leases::MAX_LEASES);
    }

    #[test]
    fn key_bytes_are_bounded() {
        let mut leases = Leases::default();
        let big = vec![b'x'; Leases::MAX_KEY_BYTES];
        assert_eq!(leases.claim(&big, 0, 1000), LeaseOutcome::Granted);
        assert_eq!(leases.claim(b"y", 0, 1000), LeaseOutcome::Granted);
        assert_eq!(leases.claim(b"y", 1, 1000), LeaseOutcome::Granted); // not recorded
        assert!(leases.release(&big));
        assert_eq!(leases.key_bytes, 0);
    }
}

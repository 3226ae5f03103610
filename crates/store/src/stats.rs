//! Counters and gauges of one store; the server sums them over its shards.

/// What a store has done since it was created. Plain counters: a server sums its shards'
/// with [`StoreStats::add`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Lookups that found a version.
    pub hits: u64,
    /// Lookup misses on a key with no versions and no ghost.
    pub misses_compulsory: u64,
    /// Lookup misses where a version evicted for memory would have answered.
    pub misses_capacity: u64,
    /// Lookup misses where only versions too old for the range were left.
    pub misses_staleness: u64,
    /// Lookup misses where a fresh-enough version starts after the range.
    pub misses_consistency: u64,
    /// Lookups that found nothing while another caller held the key's lease: the caller
    /// waits for that store instead of going to the database, so they are not misses.
    pub lease_waits: u64,
    /// Inserts stored as a new version ([`crate::InsertOutcome::Inserted`]).
    pub inserts: u64,
    /// Inserts merged into equal versions ([`crate::InsertOutcome::Extended`]).
    pub extensions: u64,
    /// Inserts dropped because they contradict an overlapping version.
    pub nondeterminism_warnings: u64,
    /// Inserts whose final interval was empty.
    pub empty_inserts: u64,
    /// Versions and plain values evicted for memory.
    pub evictions: u64,
    /// Bounded versions removed for ending before the staleness limit.
    pub stale_removals: u64,
    /// Invalidations applied.
    pub invalidations_applied: u64,
    /// Invalidations ignored because their timestamp was not after `N`.
    pub invalidations_duplicate: u64,
    /// Open versions bounded by an invalidation.
    pub versions_truncated: u64,
    /// Heartbeats that advanced `N`.
    pub heartbeats: u64,
    /// Stream resets applied.
    pub resets: u64,
    /// Rewinds applied: the database's positions went back (see `Store::rewind`).
    pub rewinds: u64,
    /// Plain `get`s.
    pub plain_gets: u64,
    /// Plain `get`s that found a value.
    pub plain_hits: u64,
    /// Plain `get`s that found nothing.
    pub plain_misses: u64,
    /// Plain `set`s stored.
    pub plain_sets: u64,
    /// Keys of either kind removed by `remove`.
    pub plain_deletes: u64,
    /// Plain keys removed because their deadline passed: found so on access, swept by
    /// `expire_due`, or taken first under memory pressure.
    pub plain_expired: u64,
}

impl StoreStats {
    /// Adds `other`'s counters to these (to sum shards).
    pub fn add(&mut self, other: &StoreStats) {
        let pairs = [
            (&mut self.hits, other.hits),
            (&mut self.misses_compulsory, other.misses_compulsory),
            (&mut self.misses_capacity, other.misses_capacity),
            (&mut self.misses_staleness, other.misses_staleness),
            (&mut self.misses_consistency, other.misses_consistency),
            (&mut self.lease_waits, other.lease_waits),
            (&mut self.inserts, other.inserts),
            (&mut self.extensions, other.extensions),
            (
                &mut self.nondeterminism_warnings,
                other.nondeterminism_warnings,
            ),
            (&mut self.empty_inserts, other.empty_inserts),
            (&mut self.evictions, other.evictions),
            (&mut self.stale_removals, other.stale_removals),
            (&mut self.invalidations_applied, other.invalidations_applied),
            (
                &mut self.invalidations_duplicate,
                other.invalidations_duplicate,
            ),
            (&mut self.versions_truncated, other.versions_truncated),
            (&mut self.heartbeats, other.heartbeats),
            (&mut self.resets, other.resets),
            (&mut self.rewinds, other.rewinds),
            (&mut self.plain_gets, other.plain_gets),
            (&mut self.plain_hits, other.plain_hits),
            (&mut self.plain_misses, other.plain_misses),
            (&mut self.plain_sets, other.plain_sets),
            (&mut self.plain_deletes, other.plain_deletes),
            (&mut self.plain_expired, other.plain_expired),
        ];
        for (mine, theirs) in pairs {
            *mine += theirs;
        }
    }
}

/// Number of buckets in [`Gauges::size_histogram`]: one for empty values, then one per power
/// of two up to 2^31.
pub const SIZE_BUCKETS: usize = 33;

/// What a store holds right now, kept up to date on every change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gauges {
    /// Keys held, plain and versioned.
    pub keys: usize,
    /// Versions held.
    pub versions: usize,
    /// Versions still open.
    pub open_versions: usize,
    /// Invalidation tags the open versions carry, summed (the tags per object of the cache
    /// contents; a closed version drops its tags).
    pub open_version_tags: usize,
    /// Plain keys with an expiry deadline (Redis's `expires`), expired or not yet removed.
    pub plain_expiring: usize,
    /// Stored values (plain and versions) by length: bucket 0 counts empty values, bucket
    /// `k + 1` values whose length is in `[2^k, 2^(k+1))`, for `k` in `0..=31` (the last
    /// bucket also holds anything longer).
    pub size_histogram: [usize; SIZE_BUCKETS],
}

impl Default for Gauges {
    fn default() -> Self {
        Self {
            keys: 0,
            versions: 0,
            open_versions: 0,
            open_version_tags: 0,
            plain_expiring: 0,
            size_histogram: [0; SIZE_BUCKETS],
        }
    }
}

impl Gauges {
    /// Adds `other`'s gauges to these (to sum shards).
    pub fn add(&mut self, other: &Gauges) {
        self.keys += other.keys;
        self.versions += other.versions;
        self.open_versions += other.open_versions;
        self.open_version_tags += other.open_version_tags;
        self.plain_expiring += other.plain_expiring;
        for (mine, theirs) in self.size_histogram.iter_mut().zip(other.size_histogram) {
            *mine += theirs;
        }
    }

    /// The histogram bucket of a value of `len` bytes.
    pub fn size_bucket(len: usize) -> usize {
        match len {
            0 => 0,
            // ilog2 of a nonzero usize is below 64; clamp the few giants into the last bucket.
            n => (n.ilog2() as usize + 1).min(SIZE_BUCKETS - 1),
        }
    }

    pub(crate) fn value_added(&mut self, len: usize) {
        self.size_histogram[Self::size_bucket(len)] += 1;
    }

    pub(crate) fn value_removed(&mut self, len: usize) {
        self.size_histogram[Self::size_bucket(len)] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_buckets_are_powers_of_two() {
        assert_eq!(Gauges::size_bucket(0), 0);
        assert_eq!(Gauges::size_bucket(1), 1);
        assert_eq!(Gauges::size_bucket(2), 2);
        assert_eq!(Gauges::size_bucket(3), 2);
        assert_eq!(Gauges::size_bucket(4), 3);
        assert_eq!(Gauges::size_bucket(1 << 31), 32);
        assert_eq!(Gauges::size_bucket(usize::MAX), 32);
    }

    #[test]
    fn stats_add_sums_every_counter() {
        let mut a = StoreStats {
            hits: 1,
            plain_deletes: 2,
            ..Default::default()
        };
        a.add(&StoreStats {
            hits: 3,
            resets: 4,
            plain_deletes: 1,
            ..Default::default()
        });
        assert_eq!((a.hits, a.resets, a.plain_deletes), (4, 4, 3));
    }
}

//! The schema digests committed DDL left (`txcache-schema` messages), by commit position,
//! until the schema check compares a pin's catalog with them (`schema_watch`).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use txcache_model::Timestamp;

/// The prefix of the messages carrying a DDL command's schema digest.
pub const SCHEMA_PREFIX: &str = "txcache-schema";

/// The schema digests committed DDL left, by commit position, not yet checked.
#[derive(Debug, Default)]
pub struct SchemaDigests {
    recorded: Mutex<VecDeque<(Timestamp, String)>>,
}

impl SchemaDigests {
    /// The transaction that committed at `ts` left the schema with `digest`.
    pub fn record(&self, ts: Timestamp, digest: String) {
        self.lock().push_back((ts, digest));
    }

    /// The digest the catalog a snapshot at `at` must show: the last one committed at or
    /// below `at`, else `checked` (what the last check found, at or below `at`). Forgets
    /// the ones at or below `at`: the next check starts from this one.
    pub fn expected_at(&self, at: Timestamp, checked: Option<String>) -> Option<String> {
        let mut recorded = self.lock();
        let mut expected = checked;
        while recorded.front().is_some_and(|(ts, _)| *ts <= at) {
            expected = recorded.pop_front().map(|(_, digest)| digest);
        }
        expected
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Timestamp, String)>> {
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_must_show_the_last_digest_committed_at_or_below_it() {
        let digests = SchemaDigests::default();
        digests.record(Timestamp(100), "a".into());
        digests.record(Timestamp(200), "b".into());
        digests.record(Timestamp(300), "c".into());
        assert_eq!(
            digests.expected_at(Timestamp(250), Some("z".into())),
            Some("b".into())
        );
        // Forgotten up to 250: from there, what that check found, then later commits.
        assert_eq!(
            digests.expected_at(Timestamp(299), Some("b".into())),
            Some("b".into())
        );
        assert_eq!(digests.expected_at(Timestamp(300), None), Some("c".into()));
    }

    #[test]
    fn without_a_digest_since_the_last_check_the_pin_must_show_what_it_found() {
        let digests = SchemaDigests::default();
        assert_eq!(digests.expected_at(Timestamp(5), None), None);
        assert_eq!(
            digests.expected_at(Timestamp(5), Some("x".into())),
            Some("x".into())
        );
    }
}

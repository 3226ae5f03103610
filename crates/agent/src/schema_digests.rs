//! The schema digests committed DDL left (`txcache-schema` messages), by commit position,
//! until the schema check compares a pin's catalog with them (`schema_watch`). Each DDL
//! transaction also tells the digest its first command found (`before:`): unless the schema
//! changed unseen in between, that is the digest the DDL committed before it left — a
//! chain that a change no trigger saw breaks even when a later DDL's digest includes it.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use txcache_model::Timestamp;

/// The prefix of the messages carrying a DDL command's schema digest.
pub const SCHEMA_PREFIX: &str = "txcache-schema";

/// What starts the content of a `txcache-schema` message written as a DDL command starts.
pub const SCHEMA_BEFORE: &str = "before:";

/// What the schema digests recorded up to a pin say the catalog there must show.
#[derive(Debug, PartialEq, Eq)]
pub struct Expected {
    /// The digest the pin's catalog must show, if known.
    pub digest: Option<String>,
    /// Whether a DDL found another schema than the one before it left: the schema changed
    /// unseen in between, whatever the pin shows now.
    pub broken: bool,
}

/// The schema digests committed DDL left, by commit position, not yet checked.
#[derive(Debug, Default)]
pub struct SchemaDigests {
    recorded: Mutex<VecDeque<Recorded>>,
}

/// One committed DDL transaction's digests.
#[derive(Debug)]
struct Recorded {
    ts: Timestamp,
    before: Option<String>,
    after: String,
}

impl SchemaDigests {
    /// The transaction that committed at `ts` found the schema with `before` (if its DDL
    /// said) and left it with `after`.
    pub fn record(&self, ts: Timestamp, before: Option<String>, after: String) {
        self.lock().push_back(Recorded { ts, before, after });
    }

    /// What the catalog a snapshot at `at` must show: the last digest committed at or below
    /// `at`, else `checked` (what the last check found, at or below `at`); and whether a
    /// DDL up to `at` found another schema than the one before it left. Forgets the ones at
    /// or below `at`: the next check starts from this one.
    pub fn expected_at(&self, at: Timestamp, checked: Option<String>) -> Expected {
        let mut recorded = self.lock();
        let (mut digest, mut broken) = (checked, false);
        while recorded.front().is_some_and(|entry| entry.ts <= at) {
            let Some(entry) = recorded.pop_front() else {
                break;
            };
            if let (Some(before), Some(left)) = (&entry.before, &digest) {
                broken |= before != left;
            }
            digest = Some(entry.after);
        }
        Expected { digest, broken }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Recorded>> {
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(digest: &str, broken: bool) -> Expected {
        Expected {
            digest: Some(digest.into()),
            broken,
        }
    }

    #[test]
    fn a_pin_must_show_the_last_digest_committed_at_or_below_it() {
        let digests = SchemaDigests::default();
        digests.record(Timestamp(100), None, "a".into());
        digests.record(Timestamp(200), None, "b".into());
        digests.record(Timestamp(300), None, "c".into());
        let z = Some("z".into());
        assert_eq!(digests.expected_at(Timestamp(250), z), expected("b", false));
        // Forgotten up to 250: from there, what that check found, then later commits.
        let b = Some("b".into());
        assert_eq!(digests.expected_at(Timestamp(299), b), expected("b", false));
        assert_eq!(
            digests.expected_at(Timestamp(300), None),
            expected("c", false)
        );
    }

    #[test]
    fn without_a_digest_since_the_last_check_the_pin_must_show_what_it_found() {
        let digests = SchemaDigests::default();
        let nothing = Expected {
            digest: None,
            broken: false,
        };
        assert_eq!(digests.expected_at(Timestamp(5), None), nothing);
        let x = Some("x".into());
        assert_eq!(digests.expected_at(Timestamp(5), x), expected("x", false));
    }

    #[test]
    fn a_change_between_two_ddls_breaks_the_chain_though_the_last_digest_matches() {
        let digests = SchemaDigests::default();
        // Checked at "a"; a view redefined unseen ("a" -> "u"); then a tracked DDL found
        // "u" and left "v", which the pin shows.
        digests.record(Timestamp(100), Some("u".into()), "v".into());
        let a = Some("a".into());
        assert_eq!(digests.expected_at(Timestamp(150), a), expected("v", true));
        digests.record(Timestamp(200), Some("v".into()), "w".into());
        let v = Some("v".into());
        assert_eq!(digests.expected_at(Timestamp(250), v), expected("w", false));
    }
}

//! `COMMITLSN xid [timeout_ms [upto]]`: the commit LSN of a transaction, once decoded
//! (read-your-writes).

use super::args::decimal;
use super::{reply, Active, Args, CommandError};
use crate::tracker::CommitWait;
use bytes::BytesMut;
use std::time::Duration;
use txcache_model::Timestamp;

/// The wait when no `timeout_ms` is given.
const DEFAULT_WAIT: Duration = Duration::from_millis(5000);

/// Longest a `COMMITLSN` may wait.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// `COMMITLSN`'s arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct CommitLsn {
    /// The transaction, as `pg_current_xact_id()` returns it (an xid8).
    pub xid: u64,
    /// How long to wait for the stream to decode it, at most [`MAX_WAIT`].
    pub wait: Duration,
    /// A WAL position at or after the commit: once the stream decoded everything below it
    /// without the commit, the answer is `NOTDECODED` rather than a wait for the timeout.
    pub upto: Option<Timestamp>,
}

impl CommitLsn {
    /// Reads `xid [timeout_ms [upto]]`, each a decimal integer.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        let xid = decimal(args.next_bytes()?)
            .ok_or_else(|| args.invalid("xid", "a transaction id (pg_current_xact_id())"))?;
        let wait = match args.optional() {
            None => DEFAULT_WAIT,
            Some(bytes) => decimal(bytes)
                .map(Duration::from_millis)
                .ok_or_else(|| args.invalid("timeout", "milliseconds"))?,
        };
        let upto = match args.optional() {
            None => None,
            Some(bytes) => {
                Some(Timestamp(decimal(bytes).ok_or_else(|| {
                    args.invalid("upto", "a WAL position (an integer)")
                })?))
            }
        };
        args.finish()?;
        Ok(Self {
            xid,
            wait: wait.min(MAX_WAIT),
            upto,
        })
    }

    /// `:lsn`, or `-NOTDECODED …`, or `-TIMEOUT …`.
    pub async fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        // Logical decoding reports 32-bit xids: compare the low half of the caller's xid8.
        let xid = self.xid as u32;
        match active.tracker.commit_lsn(xid, self.wait, self.upto).await {
            CommitWait::Decoded(lsn) => reply::position(out, lsn.0),
            CommitWait::Passed => return Err(CommandError::NotDecoded),
            CommitWait::TimedOut => return Err(CommandError::TimedOut),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parse(parts: &[&str]) -> Result<CommitLsn, String> {
        let items: Vec<Bytes> = parts.iter().map(|p| Bytes::from(p.to_string())).collect();
        CommitLsn::parse(&mut Args::new("COMMITLSN", &items)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_timeout_defaults_to_five_seconds_and_is_capped_at_a_minute() {
        let plain = parse(&["42"]).unwrap();
        assert_eq!(
            (plain.xid, plain.wait, plain.upto),
            (42, DEFAULT_WAIT, None)
        );
        assert_eq!(parse(&["42", "999999"]).unwrap().wait, MAX_WAIT);
        let upto = parse(&["42", "10", "7000"]).unwrap();
        assert_eq!(
            (upto.wait, upto.upto),
            (Duration::from_millis(10), Some(Timestamp(7000)))
        );
    }

    #[test]
    fn each_bad_argument_is_named_with_the_command() {
        assert_eq!(
            parse(&["x"]).unwrap_err(),
            "ERR COMMITLSN: xid must be a transaction id (pg_current_xact_id())"
        );
        assert_eq!(
            parse(&["1", "-5"]).unwrap_err(),
            "ERR COMMITLSN: timeout must be milliseconds"
        );
        assert_eq!(
            parse(&["1", "5", "0/16B3748"]).unwrap_err(),
            "ERR COMMITLSN: upto must be a WAL position (an integer)"
        );
        assert_eq!(
            parse(&["1", "5", "6", "7"]).unwrap_err(),
            "ERR unknown command or wrong arguments 'COMMITLSN'"
        );
    }
}

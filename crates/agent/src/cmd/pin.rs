//! `PIN [timeout_ms]`: a snapshot taken and certified now (the library's ★, "a fresh
//! snapshot").

use super::args::decimal;
use super::{reply, Active, Args, CommandError};
use bytes::BytesMut;
use std::time::Duration;
use tokio::time::Instant;

/// The longest a `PIN` may wait for its certification when it names no `timeout_ms`.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// The longest a certified pin waits for the cache nodes to apply the stream through it.
/// Delivery takes a round trip to each node, well under a millisecond: the bound is for a
/// node that hangs (its link notices later; meanwhile its lookups fail anyway) or is far.
const DELIVERY_WAIT: Duration = Duration::from_millis(100);

/// `PIN`'s argument: how long the caller waits for its reply.
#[derive(Debug, PartialEq, Eq)]
pub struct Pin {
    wait: Duration,
}

impl Pin {
    /// Reads the optional `timeout_ms`, a decimal integer: the reply comes within it, a
    /// pin or an error, so that a caller that stops waiting then does not count a stream
    /// held back (certification waits for it) as the agent being down.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        let wait = match args.optional() {
            None => MAX_WAIT,
            Some(bytes) => decimal(bytes)
                .map(Duration::from_millis)
                .ok_or_else(|| args.invalid("timeout", "milliseconds"))?,
        };
        args.finish()?;
        Ok(Self {
            wait: wait.min(MAX_WAIT),
        })
    }

    /// One element of `PINS` (`*4`, or `*6` with `--ddl-tracking fingerprint`); an error
    /// when no clean snapshot could be certified within the wait. The standbys' pinners
    /// are told pins are wanted (they take theirs at their own pace).
    ///
    /// The reply waits (briefly) for every cache node to have applied the stream through
    /// the pin: the caller looks up at the pin at once, and a node that has not yet applied
    /// the commits before it knows no open version valid there — every lookup would miss.
    pub async fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        active
            .standbys
            .iter()
            .for_each(|cushion| cushion.note_demand());
        let started = Instant::now();
        let pin = tokio::time::timeout(self.wait, active.pincushion.fresh())
            .await
            .unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "no pin certified within {} ms: the stream has not decoded the snapshot's \
                     fence (it is behind, or PostgreSQL holds it back: a standby named in \
                     synchronized_standby_slots that does not confirm)",
                    self.wait.as_millis()
                ))
            })
            .map_err(CommandError::PinFailed)?;
        let left = self.wait.saturating_sub(started.elapsed());
        if !active
            .nodes
            .delivered_through(pin.ts, left.min(DELIVERY_WAIT))
            .await
        {
            tracing::debug!(ts = %pin.ts, "fresh pin given before every node applied the stream through it");
        }
        reply::pin(out, &pin);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use bytes::Bytes;

    fn parse(parts: &[&str]) -> Result<Pin, String> {
        let items: Vec<Bytes> = parts.iter().map(|p| Bytes::from(p.to_string())).collect();
        Pin::parse(&mut Args::new("PIN", &items)).map_err(|e| e.to_string())
    }

    #[test]
    fn pin_takes_an_optional_wait_in_milliseconds_bounded() {
        assert_eq!(parse(&[]).unwrap().wait, MAX_WAIT);
        assert_eq!(parse(&["250"]).unwrap().wait, Duration::from_millis(250));
        assert_eq!(parse(&["99999999"]).unwrap().wait, MAX_WAIT);
        assert!(parse(&["-1"]).is_err());
        assert!(parse(&["soon"]).is_err());
    }
}

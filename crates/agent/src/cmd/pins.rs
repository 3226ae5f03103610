//! `PINS [used]`: the primary's live pins, oldest first; `used` renews the lease of those
//! the library's transactions ran at since its last refresh (`STANDBYPINS used` renews the
//! standbys'; a commit point can name a pin on each).

use super::{reply, Active, Args, CommandError};
use bytes::BytesMut;
use txcache_model::Timestamp;
use txcache_resp::encode;

/// `PINS` with the commit points of the pins used since the last refresh (possibly none).
#[derive(Debug)]
pub struct Pins {
    used: Vec<Timestamp>,
}

impl Pins {
    /// Reads the arguments: an optional comma-separated list of commit points.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        let used = parse_used_argument(args)?;
        args.finish()?;
        Ok(Self { used })
    }

    /// Renews the used pins' leases, then `*n` of the primary's pins, each `*4`, or `*6`
    /// with `--ddl-tracking fingerprint` ([`reply::pin`]).
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        active.pincushion.note_used(&self.used);
        let pins = active.pincushion.pins();
        encode::array_header(out, pins.len());
        pins.iter().for_each(|pin| reply::pin(out, pin));
        Ok(())
    }
}

/// The optional `used` argument of `PINS`: comma-separated commit points.
pub(super) fn parse_used_argument(args: &mut Args<'_>) -> Result<Vec<Timestamp>, CommandError> {
    match args.optional() {
        None => Ok(Vec::new()),
        Some(list) => {
            parse_used(list).ok_or_else(|| args.invalid("used", "comma-separated commit points"))
        }
    }
}

/// `ts,ts,…` as commit points; `None` when an element is not a decimal `u64`.
pub(super) fn parse_used(list: &[u8]) -> Option<Vec<Timestamp>> {
    let text = std::str::from_utf8(list).ok()?;
    text.split(',')
        .map(|item| item.parse().ok().map(Timestamp))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_pins_are_a_comma_separated_list_of_commit_points() {
        let parsed = parse_used(b"5,17,18446744073709551615");
        assert_eq!(
            parsed,
            Some(vec![Timestamp(5), Timestamp(17), Timestamp(u64::MAX)])
        );
        for bad in [
            &b""[..],
            b"5,",
            b"-1",
            b"5;6",
            b"18446744073709551616",
            b"\xff",
        ] {
            assert_eq!(parse_used(bad), None, "{bad:?}");
        }
    }
}

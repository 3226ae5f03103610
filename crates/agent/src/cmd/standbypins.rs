//! `STANDBYPINS [used] [WANTED]`: the live pins on every `--standby`, each with its
//! standby's name; `used` renews the lease of the standby pins the library's transactions
//! ran at since its last refresh (as `PINS used` does the primary's), and `WANTED` says the
//! library ran transactions since then and wants standby pins: a standby that let its pins
//! go for want of use pins again at once. Without it, a library whose transactions found no
//! standby pin — and so ran on the primary — would never ask for one.

use super::pins::parse_used;
use super::{reply, Active, Args, CommandError};
use bytes::BytesMut;
use txcache_model::Timestamp;
use txcache_resp::encode;

/// `STANDBYPINS` with the commit points of the standby pins used since the last refresh,
/// and whether the library wants standby pins.
#[derive(Debug, PartialEq, Eq)]
pub struct StandbyPins {
    used: Vec<Timestamp>,
    wanted: bool,
}

impl StandbyPins {
    /// Reads the arguments: an optional comma-separated list of commit points, then an
    /// optional `WANTED`.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        let mut parsed = Self {
            used: Vec::new(),
            wanted: false,
        };
        let mut next = args.optional();
        if let Some(list) = next.filter(|arg| !arg.eq_ignore_ascii_case(b"WANTED")) {
            parsed.used = parse_used(list)
                .ok_or_else(|| args.invalid("used", "comma-separated commit points"))?;
            next = args.optional();
        }
        if let Some(flag) = next {
            if !flag.eq_ignore_ascii_case(b"WANTED") {
                return Err(args.invalid("the word after used", "WANTED"));
            }
            parsed.wanted = true;
        }
        args.finish()?;
        Ok(parsed)
    }

    /// Renews the used pins' leases on every standby (and with `WANTED` notes the demand),
    /// then `*n` of `*5` ([`reply::standby_pin`]): the standbys in the flags' order, each
    /// one's pins oldest first, none older than the newest barrier (as `PINS`); `*0`
    /// without standbys.
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        for cushion in &active.standbys {
            cushion.note_used(&self.used);
            if self.wanted {
                cushion.note_demand();
            }
        }
        let listed: Vec<(&str, Vec<_>)> = active
            .standbys
            .iter()
            .map(|cushion| (cushion.standby_name().unwrap_or_default(), cushion.pins()))
            .collect();
        let count = listed.iter().map(|(_, pins)| pins.len()).sum();
        encode::array_header(out, count);
        for (name, pins) in &listed {
            pins.iter()
                .for_each(|pin| reply::standby_pin(out, name, pin));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parsed(words: &[&str]) -> Result<StandbyPins, CommandError> {
        let items: Vec<Bytes> = words.iter().map(|w| Bytes::from(w.to_string())).collect();
        StandbyPins::parse(&mut Args::new("STANDBYPINS", &items))
    }

    #[test]
    fn used_commit_points_and_wanted_are_both_optional() {
        let both = parsed(&["5,7", "WANTED"]).unwrap();
        assert_eq!(
            (both.used, both.wanted),
            (vec![Timestamp(5), Timestamp(7)], true)
        );
        let wanted = parsed(&["wanted"]).unwrap();
        assert_eq!((wanted.used, wanted.wanted), (vec![], true));
        let used = parsed(&["9"]).unwrap();
        assert_eq!((used.used, used.wanted), (vec![Timestamp(9)], false));
        assert_eq!(
            parsed(&[]).unwrap(),
            StandbyPins {
                used: vec![],
                wanted: false
            }
        );
        assert!(parsed(&["5", "MORE"]).is_err());
        assert!(parsed(&["WANTED", "5"]).is_err());
        assert!(parsed(&["x"]).is_err());
    }
}

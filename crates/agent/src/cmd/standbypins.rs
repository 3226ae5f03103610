//! `STANDBYPINS [used]`: the live pins on every `--standby`, each with its standby's name;
//! `used` renews the lease of the standby pins the library's transactions ran at since its
//! last refresh (as `PINS used` does the primary's).

use super::pins::parse_used_argument;
use super::{reply, Active, Args, CommandError};
use bytes::BytesMut;
use txcache_model::Timestamp;
use txcache_resp::encode;

/// `STANDBYPINS` with the commit points of the standby pins used since the last refresh.
#[derive(Debug)]
pub struct StandbyPins {
    used: Vec<Timestamp>,
}

impl StandbyPins {
    /// Reads the arguments: an optional comma-separated list of commit points.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        let used = parse_used_argument(args)?;
        args.finish()?;
        Ok(Self { used })
    }

    /// Renews the used pins' leases on every standby, then `*n` of `*5`
    /// ([`reply::standby_pin`]): the standbys in the flags' order, each one's pins oldest
    /// first, none older than the newest barrier (as `PINS`); `*0` without standbys.
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        for cushion in &active.standbys {
            cushion.note_used(&self.used);
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

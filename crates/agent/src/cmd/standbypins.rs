//! `STANDBYPINS`: the live pins on every `--standby`, each with its standby's name.

use super::{reply, Active, Args, CommandError};
use bytes::BytesMut;
use txcache_resp::encode;

/// `STANDBYPINS` takes no arguments.
#[derive(Debug)]
pub struct StandbyPins;

impl StandbyPins {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `*n` of `*5` ([`reply::standby_pin`]): the standbys in the flags' order, each one's
    /// pins oldest first, none older than the newest barrier (as `PINS`); `*0` without
    /// standbys.
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
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

//! `PINS`: the live pins, oldest first.

use super::{reply, Args, CommandError, Endpoint};
use bytes::BytesMut;
use txcache_resp::encode;

/// `PINS` takes no arguments.
#[derive(Debug)]
pub struct Pins;

impl Pins {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `*n` of pins, each `*4` ([`reply::pin`]).
    pub fn apply(self, endpoint: &Endpoint, out: &mut BytesMut) -> Result<(), CommandError> {
        let pins = endpoint.pincushion.pins();
        encode::array_header(out, pins.len());
        pins.iter().for_each(|pin| reply::pin(out, pin));
        Ok(())
    }
}

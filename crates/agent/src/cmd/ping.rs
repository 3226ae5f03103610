//! `PING`.

use super::{Args, CommandError};
use bytes::BytesMut;
use txcache_resp::encode;

/// `PING` takes no arguments (no message, unlike the node's).
#[derive(Debug)]
pub struct Ping;

impl Ping {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `+PONG`.
    pub fn apply(self, out: &mut BytesMut) -> Result<(), CommandError> {
        encode::simple(out, "PONG");
        Ok(())
    }
}

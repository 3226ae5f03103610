//! `QUIT`: close the connection after the reply.

use super::{Args, CommandError, Session};
use bytes::BytesMut;
use txcache_resp::encode;

/// `QUIT` ignores any arguments.
#[derive(Debug)]
pub struct Quit;

impl Quit {
    /// Reads (and ignores) the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.take_last();
        Ok(Self)
    }

    /// `+OK`; the server closes the connection once it is written.
    pub fn apply(self, session: &mut Session, out: &mut BytesMut) -> Result<(), CommandError> {
        session.closing = true;
        encode::simple(out, "OK");
        Ok(())
    }
}

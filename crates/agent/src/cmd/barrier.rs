//! `BARRIER`: the newest schema change or `TRUNCATE` decoded, and how far the stream has
//! decoded, read together.

use super::{reply, Active, Args, CommandError};
use bytes::BytesMut;
use txcache_resp::encode;

/// `BARRIER` takes no arguments.
#[derive(Debug)]
pub struct Barrier;

impl Barrier {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `*2 :barrier :decoded`.
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        let (barrier, decoded) = active.tracker.schema_fence();
        encode::array_header(out, 2);
        reply::position(out, barrier.0);
        reply::position(out, decoded.0);
        Ok(())
    }
}

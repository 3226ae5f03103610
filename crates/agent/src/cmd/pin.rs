//! `PIN`: a snapshot taken and certified now (the library's ★, "a fresh snapshot").

use super::{reply, Active, Args, CommandError};
use bytes::BytesMut;

/// `PIN` takes no arguments.
#[derive(Debug)]
pub struct Pin;

impl Pin {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `*4`, as one element of `PINS`; an error when no clean snapshot could be certified.
    pub async fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        let pin = active
            .pincushion
            .fresh()
            .await
            .map_err(CommandError::PinFailed)?;
        reply::pin(out, &pin);
        Ok(())
    }
}

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

    /// One element of `PINS` (`*4`, or `*6` with `--ddl-tracking fingerprint`); an error
    /// when no clean snapshot could be certified. The standbys' pinners are told pins are
    /// wanted (they take theirs at their own pace).
    pub async fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        active
            .standbys
            .iter()
            .for_each(|cushion| cushion.note_demand());
        let pin = active
            .pincushion
            .fresh()
            .await
            .map_err(CommandError::PinFailed)?;
        reply::pin(out, &pin);
        Ok(())
    }
}

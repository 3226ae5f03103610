//! `STATUS`: every metric without a label, one `field:value` line each.

use super::{Args, CommandError, Endpoint};
use crate::metrics;
use bytes::BytesMut;
use txcache_resp::encode;

/// `STATUS` takes no arguments.
#[derive(Debug)]
pub struct Status;

impl Status {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// A bulk string of `field:value\r\n` lines, in the metrics table's order.
    pub fn apply(self, endpoint: &Endpoint, out: &mut BytesMut) -> Result<(), CommandError> {
        let reading = metrics::collect(&endpoint.metrics);
        encode::bulk(out, metrics::status(&reading).as_bytes());
        Ok(())
    }
}

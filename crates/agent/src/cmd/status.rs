//! `STATUS`: every metric without a label, one `field:value` line each.

use super::{Active, Args, CommandError, Endpoint, Role};
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

    /// A bulk string of `field:value\r\n` lines: `role:active`, the metrics in their table's
    /// order, `membership:static` or `membership:database` and `standby_pins:` each
    /// standby's pin count (after the metrics: the lines libraries read keep their places),
    /// or on a standby `role:standby` and the lease's holder. An agent whose lease ran out says `role:standby`: it answers libraries as one.
    pub fn apply(self, endpoint: &Endpoint, out: &mut BytesMut) -> Result<(), CommandError> {
        let text = match &endpoint.role {
            Role::Active(active) => {
                let reading = metrics::collect(&active.metrics);
                let role = if active.term.valid() {
                    "active"
                } else {
                    "standby"
                };
                let membership = active.membership.as_str();
                let metrics = metrics::status(&reading);
                let standbys = standby_pins(active);
                format!("role:{role}\r\n{metrics}membership:{membership}\r\nstandby_pins:{standbys}\r\n")
            }
            Role::Standby(holder) => {
                format!("role:standby\r\nactive_agent:{}\r\n", holder.describe())
            }
        };
        encode::bulk(out, text.as_bytes());
        Ok(())
    }
}

/// `name=count,…` of the standbys' listed pins, in the flags' order; empty without standbys.
fn standby_pins(active: &Active) -> String {
    let counts = active.standbys.iter().map(|cushion| {
        let name = cushion.standby_name().unwrap_or_default();
        format!("{name}={}", cushion.pin_count())
    });
    counts.collect::<Vec<_>>().join(",")
}

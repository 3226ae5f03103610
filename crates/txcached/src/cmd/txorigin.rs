//! `TXORIGIN [origin]`: the database history this node's stream follows, as the agent names
//! it (the database's system identifier and timeline). The agent compares it with the
//! database's on every connection: a node that followed another history is rewound.

use super::{ok, Args, CommandError, Context};
use bytes::{Bytes, BytesMut};
use txcache_resp::encode;

/// Longest origin accepted: the agent's are about 30 bytes.
const MAX_ORIGIN_LEN: usize = 256;

/// Without an argument replies the origin (nil until one is set); with one, sets it and
/// replies `+OK`.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    if args.remaining() == 0 {
        match context.node.origin().as_deref() {
            Some(origin) => encode::bulk(out, origin),
            None => context.session.protocol.null(out),
        }
        return Ok(());
    }
    let origin = args.next_bytes()?;
    args.finish()?;
    if origin.is_empty() || origin.len() > MAX_ORIGIN_LEN {
        return Err(args.invalid("origin", origin, "1 to 256 bytes naming a database history"));
    }
    context.node.set_origin(Bytes::copy_from_slice(origin));
    ok(out);
    Ok(())
}

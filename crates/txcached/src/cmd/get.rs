//! `GET key`: a plain value.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `$value` or `nil`.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    args.finish()?;
    // The value is copied from the store straight into the reply, under the shard's lock:
    // no allocation and no shared handle per hit.
    let mut shard = context.node.shards.for_key(key);
    let value = shard
        .get(key)
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    match value {
        Some(value) => encode::bulk(out, value),
        None => encode::null(out),
    }
    Ok(())
}

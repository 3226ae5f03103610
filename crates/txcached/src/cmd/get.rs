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
    let value = context
        .node
        .shards
        .for_key(&key)
        .get(&key)
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    match value {
        Some(value) => encode::bulk(out, &value),
        None => encode::null(out),
    }
    Ok(())
}

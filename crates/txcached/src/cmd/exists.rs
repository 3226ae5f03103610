//! `EXISTS key [key ...]`: how many of the named keys exist.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `:count`; a key named twice counts twice, as in Redis.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(CommandError::WrongArity(args.command()));
    }
    let shards = &context.node.shards;
    let found = keys
        .iter()
        .filter(|key| shards.for_key(key).contains(key))
        .count();
    encode::integer(out, found as i64);
    Ok(())
}

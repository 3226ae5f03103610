//! `DEL key [key ...]`: removes keys of either kind.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `:count` of keys removed.
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
    let removed = keys
        .iter()
        .filter(|key| shards.for_key(key).remove(key))
        .count();
    encode::integer(out, removed as i64);
    Ok(())
}

//! `MGET key [key ...]`: several plain values at once.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies an array: each key's value, or a null when it is absent, expired or not a plain
/// value (Redis's MGET answers a key of another type with a null, not an error). Keys on
/// several shards are read with all of them locked, at one moment.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(CommandError::WrongArity(args.command()));
    }
    let (node, protocol) = (context.node, context.session.protocol);
    // One clock reading for all the keys, taken at the first value with a deadline.
    let mut now = None;
    let mut clock = || *now.get_or_insert_with(|| node.now_ms());
    encode::array_header(out, keys.len());
    context.with_keys_locked(&keys, |context| {
        for key in &keys {
            context.with_shard(key, |store| match store.get(key, &mut clock) {
                Ok(Some(value)) => encode::bulk(out, value),
                Ok(None) | Err(_) => protocol.null(out),
            });
        }
    });
    Ok(())
}

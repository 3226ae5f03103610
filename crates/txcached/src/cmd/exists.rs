//! `EXISTS key [key ...]`: how many of the named keys exist.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `:count`; a key named twice counts twice, as in Redis, and an expired plain key
/// does not count.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(CommandError::WrongArity(args.command()));
    }
    let now = context.now_ms();
    let found = context.with_keys_locked(&keys, |context| {
        keys.iter()
            .filter(|key| context.with_shard(key, |store| store.exists(key, now)))
            .count()
    });
    encode::integer(out, found as i64);
    Ok(())
}

//! `DEL key [key ...]`: removes keys of either kind.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `:count` of keys removed (an expired plain key is not counted, as in Redis).
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
    let removed = context.with_keys_locked(&keys, |context| {
        keys.iter()
            .filter(|key| context.with_shard(key, |store| store.remove(key, now)))
            .count()
    });
    encode::integer(out, removed as i64);
    Ok(())
}

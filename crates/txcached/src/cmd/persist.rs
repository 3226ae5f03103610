//! `PERSIST key`: removes a plain value's deadline.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `:1` when the key had a deadline, `:0` when it is missing or had none (a versioned
/// key never has one).
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    args.finish()?;
    let now = context.now_ms();
    let removed = context.with_shard(key, |store| store.persist(key, now));
    encode::integer(out, i64::from(removed));
    Ok(())
}

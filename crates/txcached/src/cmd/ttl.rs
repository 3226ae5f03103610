//! `TTL key` and `PTTL key`: the time a plain value has left.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;
use txcache_store::KeyExpiry;

/// `TTL`: seconds left, rounded to the nearest second as Redis rounds.
pub fn run_ttl(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    ttl(args, context, out, |ms| ms.saturating_add(500) / 1000)
}

/// `PTTL`: milliseconds left.
pub fn run_pttl(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    ttl(args, context, out, |ms| ms)
}

/// Replies `:-2` for a missing (or expired) key, `:-1` for one without a deadline (every
/// versioned key), else the time left in the unit `scale` turns milliseconds into.
fn ttl(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
    scale: fn(u64) -> u64,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    args.finish()?;
    let now = context.now_ms();
    let left = match context.with_shard(key, |store| store.expiry(key, now)) {
        KeyExpiry::Absent => -2,
        KeyExpiry::Never => -1,
        KeyExpiry::At(deadline) => {
            i64::try_from(scale(deadline.saturating_sub(now))).unwrap_or(i64::MAX)
        }
    };
    encode::integer(out, left);
    Ok(())
}

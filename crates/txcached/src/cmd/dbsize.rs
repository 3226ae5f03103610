//! `DBSIZE`: the number of keys.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `:count`.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.finish()?;
    let mut keys = 0;
    context.for_each_shard(|store| keys += store.gauges().keys);
    encode::integer(out, i64::try_from(keys).unwrap_or(i64::MAX));
    Ok(())
}

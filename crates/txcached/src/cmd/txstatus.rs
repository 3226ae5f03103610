//! `TXSTATUS`: the node's position in the invalidation stream.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::Timestamp;
use txcache_resp::encode;

/// Replies `*3 :N :H|nil :commit_time`.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.finish()?;
    let (mut position, mut horizon, mut commit_time) = (Timestamp::ZERO, None, 0);
    // Shards agree on N; horizons may differ (history is trimmed per shard): report the
    // latest, below which some shard may not know every commit.
    context.for_each_shard(|store| {
        position = position.max(store.last_applied());
        horizon = horizon.max(store.horizon());
        commit_time = commit_time.max(store.latest_commit_time().0);
    });
    encode::array_header(out, 3);
    encode::integer(out, i64::try_from(position.0).unwrap_or(i64::MAX));
    match horizon {
        Some(h) => encode::integer(out, i64::try_from(h.0).unwrap_or(i64::MAX)),
        None => context.session.protocol.null(out),
    }
    encode::integer(out, i64::try_from(commit_time).unwrap_or(i64::MAX));
    Ok(())
}

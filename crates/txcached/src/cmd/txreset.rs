//! `TXRESET ts commit_time`: the stream has a gap; bound every open version at `N`.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::WallClock;

/// Resets every shard; replies `+OK`.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let ts = args.next_timestamp("ts")?;
    let commit_time = WallClock(args.next_u64("commit_time")?);
    args.finish()?;
    let old_position = context.node.shards.broadcast(|store| {
        let before = store.last_applied();
        store.reset(ts, commit_time);
        before
    });
    tracing::warn!(
        %old_position, reset_to = %ts,
        "TXRESET: the invalidation stream had a gap; every open version was bounded at the old position"
    );
    ok(out);
    Ok(())
}

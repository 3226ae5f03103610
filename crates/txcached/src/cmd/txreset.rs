//! `TXRESET ts commit_time`: the stream has a gap; bound every open version at `N`.
//! `TXREWIND ts commit_time`: the database's positions went back below `N`; drop every
//! versioned entry and continue the stream from `ts`.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::{Timestamp, WallClock};
use txcache_store::Store;

/// Resets every shard; replies `+OK`.
pub fn run_reset(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    reposition(
        args,
        context,
        out,
        Store::reset,
        "the invalidation stream had a gap; every open version was bounded at the old position",
    )
}

/// Rewinds every shard; replies `+OK`.
pub fn run_rewind(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    reposition(args, context, out, Store::rewind,
        "the database's positions went back (a restored backup or a failover); every versioned entry was dropped")
}

/// Applies `apply(ts, commit_time)` to every shard and logs `what` happened, loudly: both
/// are rare and cost the node its open (or all versioned) entries.
fn reposition(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
    apply: fn(&mut Store, Timestamp, WallClock),
    what: &str,
) -> Result<(), CommandError> {
    let ts = args.next_timestamp("ts")?;
    let commit_time = WallClock(args.next_u64("commit_time")?);
    args.finish()?;
    let old_position = context.node.shards.broadcast(|store| {
        let before = store.last_applied();
        apply(store, ts, commit_time);
        before
    });
    tracing::warn!(%old_position, new_position = %ts, "{}: {what}", args.command());
    ok(out);
    Ok(())
}

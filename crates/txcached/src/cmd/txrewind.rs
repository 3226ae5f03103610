//! `TXREWIND ts commit_time`: the database's positions went back below `N`; drop every
//! versioned entry and continue the stream from `ts`.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::WallClock;

/// Rewinds every shard; replies `+OK`.
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
        store.rewind(ts, commit_time);
        before
    });
    tracing::warn!(
        %old_position, rewound_to = %ts,
        "TXREWIND: the database's positions went back (a restored backup or a failover); every versioned entry was dropped"
    );
    ok(out);
    Ok(())
}

//! `TXHEARTBEAT ts commit_time`: nothing committed up to `ts`; advances `N`.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::WallClock;
use txcache_resp::encode;

/// Applies the heartbeat to every shard; replies `:1` when `N` advanced.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let ts = args.next_timestamp("ts")?;
    let commit_time = WallClock(args.next_u64("commit_time")?);
    args.finish()?;
    let advanced = context
        .node
        .shards
        .broadcast(|store| store.heartbeat(ts, commit_time));
    encode::integer(out, i64::from(advanced));
    Ok(())
}

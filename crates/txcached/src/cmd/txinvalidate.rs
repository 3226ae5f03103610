//! `TXINVALIDATE ts commit_time [tag ...]`: one committed write transaction from the agent.

use super::{txset::parse_tags, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::{Invalidation, WallClock};
use txcache_resp::encode;

/// Applies the invalidation to every shard; replies `:1`, or `:0` for a duplicate.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let ts = args.next_timestamp("ts")?;
    let commit_time = WallClock(args.next_u64("commit_time")?);
    let invalidation = Invalidation {
        ts,
        commit_time,
        tags: parse_tags(args)?,
    };
    let applied = context
        .node
        .shards
        .broadcast(|store| store.invalidate(&invalidation));
    encode::integer(out, i64::from(applied));
    Ok(())
}

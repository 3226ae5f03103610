//! `MULTI`, `DISCARD`, `WATCH`, `UNWATCH` (`EXEC` and the queue: `transaction.rs`).

use super::{ok, Args, CommandError, Context, Transaction};
use bytes::BytesMut;

/// `MULTI`: starts queuing; `+OK`.
pub fn run_multi(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.finish()?;
    if context.session.transaction.is_some() {
        return Err(CommandError::MultiNested);
    }
    context.session.transaction = Some(Transaction::new(context.node.shards.len()));
    ok(out);
    Ok(())
}

/// `DISCARD`: drops the queued commands; `+OK`.
pub fn run_discard(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.finish()?;
    if context.session.transaction.take().is_none() {
        return Err(CommandError::DiscardWithoutMulti);
    }
    ok(out);
    Ok(())
}

/// `WATCH key [key ...]`: refused. Optimistic locking would need a version on every key
/// checked at `EXEC`; a transaction here locks its shards instead, and needs no retry.
pub fn run_watch(
    args: &mut Args,
    context: &mut Context<'_>,
    _: &mut BytesMut,
) -> Result<(), CommandError> {
    args.rest();
    if context.session.transaction.is_some() {
        return Err(CommandError::WatchInsideMulti);
    }
    Err(CommandError::WatchUnsupported)
}

/// `UNWATCH`: `+OK` (nothing is ever watched).
pub fn run_unwatch(
    args: &mut Args,
    _: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.finish()?;
    ok(out);
    Ok(())
}

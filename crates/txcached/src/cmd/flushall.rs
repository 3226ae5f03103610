//! `FLUSHALL [ASYNC|SYNC]`: removes every key.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;

/// Replies `+OK`. The stream position and history stay: they describe the database.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    if !(args.eat_keyword("ASYNC") || args.eat_keyword("SYNC")) && args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    if args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    context.node.shards.for_each(|store| store.clear());
    ok(out);
    Ok(())
}

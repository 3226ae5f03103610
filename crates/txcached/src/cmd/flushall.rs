//! `FLUSHALL [ASYNC|SYNC]`: removes every key. `FLUSHDB [ASYNC|SYNC]`: removes every plain
//! key, leaving the versioned entries.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_store::Store;

/// `FLUSHALL`: replies `+OK`. The stream position and history stay: they describe the
/// database.
pub fn run_flushall(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    flush(args, context, out, Store::clear)
}

/// `FLUSHDB`: replies `+OK`. A Redis client clearing "its database" (Django's
/// `cache.clear()`) clears the plain key space it wrote; the versioned entries belong to
/// txcache's library and are kept, as they stay correct whatever a plain client does.
pub fn run_flushdb(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    flush(args, context, out, Store::clear_plain)
}

/// Applies `clear` to every shard (`ASYNC` and `SYNC` both clear at once).
fn flush(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
    clear: fn(&mut Store),
) -> Result<(), CommandError> {
    let _mode = args.eat_keyword("ASYNC") || args.eat_keyword("SYNC");
    if args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    context.for_each_shard(clear);
    ok(out);
    Ok(())
}

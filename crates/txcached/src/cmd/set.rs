//! `SET key value`: a plain value, replacing whatever the key held.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;

/// Replies `+OK`, or `-TOOLARGE` for a value that can never fit.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    let value = args.next_bytes()?;
    if args.remaining() > 0 {
        // Options such as EX or NX are not supported: refuse rather than ignore them.
        return Err(CommandError::Syntax(args.command()));
    }
    // The store copies key and value out of the read buffer into one allocation of its own.
    context
        .node
        .shards
        .for_key(key)
        .set(key, value)
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    ok(out);
    Ok(())
}

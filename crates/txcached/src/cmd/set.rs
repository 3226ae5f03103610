//! `SET key value`: a plain value, replacing whatever the key held.

use super::{ok, Args, CommandError, Context};
use bytes::{Bytes, BytesMut};

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
    // Copy out of the read buffer: a stored value must own exactly its bytes.
    let value = Bytes::copy_from_slice(&value);
    context
        .node
        .shards
        .for_key(&key)
        .set(&key, value)
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    ok(out);
    Ok(())
}

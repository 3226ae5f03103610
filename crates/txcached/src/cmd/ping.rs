//! `PING [message]` and `ECHO message`.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `+PONG`, or the message as a bulk string.
pub fn run_ping(
    args: &mut Args,
    _: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    match args.remaining() {
        0 => encode::simple(out, "PONG"),
        1 => encode::bulk(out, args.next_bytes()?),
        _ => return Err(CommandError::WrongArity(args.command())),
    }
    Ok(())
}

/// Replies the message as a bulk string.
pub fn run_echo(
    args: &mut Args,
    _: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let message = args.next_bytes()?;
    args.finish()?;
    encode::bulk(out, message);
    Ok(())
}

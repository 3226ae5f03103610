//! Connection housekeeping: `CLIENT`, `SELECT`, `COMMAND`, `QUIT`.

use super::{ok, Args, CommandError, Context};
use bytes::{Bytes, BytesMut};
use txcache_resp::encode;

/// `CLIENT SETNAME|SETINFO|GETNAME|ID`.
pub fn run_client(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let sub = args.next_bytes()?;
    let sub = sub.to_ascii_uppercase();
    match sub.as_slice() {
        b"SETNAME" => {
            context.session.name = Some(Bytes::copy_from_slice(args.next_bytes()?));
            ok(out);
        }
        b"SETINFO" => {
            let (_attribute, _value) = (args.next_bytes()?, args.next_bytes()?);
            ok(out);
        }
        b"GETNAME" => match &context.session.name {
            Some(name) => encode::bulk(out, name),
            None => context.session.protocol.null(out),
        },
        b"ID" => encode::integer(out, i64::try_from(context.session.id).unwrap_or(i64::MAX)),
        _ => {
            return Err(args.invalid("subcommand", &sub, "SETNAME, SETINFO, GETNAME or ID"));
        }
    }
    if args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    Ok(())
}

/// `SELECT 0`: there is one database.
pub fn run_select(
    args: &mut Args,
    _: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let index = args.next_bytes()?;
    args.finish()?;
    if index != b"0" {
        return Err(CommandError::InvalidArgument {
            command: args.command(),
            message: "DB index is out of range (txcached has only database 0)".to_owned(),
        });
    }
    ok(out);
    Ok(())
}

/// `COMMAND [...]`: an empty array, enough for tools that probe it.
pub fn run_command(
    args: &mut Args,
    _: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.rest();
    encode::array_header(out, 0);
    Ok(())
}

/// `QUIT`: `+OK`, then the connection closes.
pub fn run_quit(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.rest();
    context.session.closing = true;
    ok(out);
    Ok(())
}

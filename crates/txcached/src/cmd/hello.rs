//! `HELLO [protover [AUTH username password] [SETNAME name]]`: the RESP handshake.
//!
//! txcached speaks RESP2 only. `HELLO 3` is refused with `-NOPROTO`, which tells the client
//! to stay on RESP2 (clients that default to RESP3, such as redis-py 8, take `protocol=2`).

use super::{Args, CommandError, Context};
use bytes::{Bytes, BytesMut};
use txcache_resp::encode;

/// Replies the server's properties as a flat field/value array.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    if args.remaining() > 0 {
        let version = args.next_bytes()?;
        if version != b"2" {
            return Err(CommandError::NoProtocol);
        }
    }
    while args.remaining() > 0 {
        if args.eat_keyword("AUTH") {
            let (user, password) = (args.next_bytes()?, args.next_bytes()?);
            super::auth::authenticate(context, user, password, args.command())?;
        } else if args.eat_keyword("SETNAME") {
            context.session.name = Some(Bytes::copy_from_slice(args.next_bytes()?));
        } else {
            return Err(CommandError::Syntax(args.command()));
        }
    }
    if !context.session.authenticated {
        return Err(CommandError::NoAuth);
    }
    encode_properties(context, out);
    Ok(())
}

fn encode_properties(context: &Context<'_>, out: &mut BytesMut) {
    encode::array_header(out, 14);
    for (field, value) in [
        ("server", "txcached"),
        ("version", env!("CARGO_PKG_VERSION")),
    ] {
        encode::bulk(out, field.as_bytes());
        encode::bulk(out, value.as_bytes());
    }
    encode::bulk(out, b"proto");
    encode::integer(out, 2);
    encode::bulk(out, b"id");
    encode::integer(out, i64::try_from(context.session.id).unwrap_or(i64::MAX));
    for (field, value) in [("mode", "standalone"), ("role", "master")] {
        encode::bulk(out, field.as_bytes());
        encode::bulk(out, value.as_bytes());
    }
    encode::bulk(out, b"modules");
    encode::array_header(out, 0);
}

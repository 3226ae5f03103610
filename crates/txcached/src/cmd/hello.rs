//! `HELLO [protover [AUTH username password] [SETNAME name]]`: the RESP handshake.
//!
//! `HELLO 3` switches the connection to RESP3 (what redis-py 8 asks for by default), `HELLO 2`
//! back to RESP2; without a version the protocol stays. The reply is the server's properties,
//! a map in RESP3 and a flat field/value array in RESP2, written in the protocol just chosen,
//! as Redis does.

use super::{Args, CommandError, Context, Protocol};
use bytes::{Bytes, BytesMut};
use txcache_resp::encode;

/// Replies the server's properties.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let mut protocol = None;
    if args.remaining() > 0 {
        let version = super::args::parse_integer(args.next_bytes()?).ok_or(CommandError::Redis(
            "Protocol version is not an integer or out of range",
        ))?;
        protocol = Some(match version {
            2 => Protocol::Resp2,
            3 => Protocol::Resp3,
            _ => return Err(CommandError::NoProtocol),
        });
    }
    let mut name = None;
    while args.remaining() > 0 {
        if args.remaining() >= 3 && args.eat_keyword("AUTH") {
            let (user, password) = (args.next_bytes()?, args.next_bytes()?);
            super::auth::authenticate(context, user, password, args.command())?;
        } else if args.remaining() >= 2 && args.eat_keyword("SETNAME") {
            name = Some(Bytes::copy_from_slice(args.next_bytes()?));
        } else {
            let option = super::printable(args.next_bytes()?);
            return Err(CommandError::HelloOption(option));
        }
    }
    if !context.session.authenticated {
        return Err(CommandError::NoAuth);
    }
    if name.is_some() {
        context.session.name = name;
    }
    if let Some(protocol) = protocol {
        context.session.protocol = protocol;
    }
    encode_properties(context, out);
    Ok(())
}

fn encode_properties(context: &Context<'_>, out: &mut BytesMut) {
    let protocol = context.session.protocol;
    protocol.map_header(out, 7);
    for (field, value) in [
        ("server", "txcached"),
        ("version", env!("CARGO_PKG_VERSION")),
    ] {
        encode::bulk(out, field.as_bytes());
        encode::bulk(out, value.as_bytes());
    }
    encode::bulk(out, b"proto");
    encode::integer(out, protocol.version());
    encode::bulk(out, b"id");
    encode::integer(out, i64::try_from(context.session.id).unwrap_or(i64::MAX));
    for (field, value) in [("mode", "standalone"), ("role", "master")] {
        encode::bulk(out, field.as_bytes());
        encode::bulk(out, value.as_bytes());
    }
    encode::bulk(out, b"modules");
    encode::array_header(out, 0);
}

//! `CONFIG GET parameter` and `CONFIG SET maxmemory size` (a size as `--max-memory` takes it).

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::units::parse_size;
use txcache_resp::encode;

/// Dispatches the CONFIG subcommands.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let sub = args.next_bytes()?.to_ascii_uppercase();
    match sub.as_slice() {
        b"GET" => get(args, context, out),
        b"SET" => set(args, context, out),
        _ => Err(args.invalid("subcommand", &sub, "GET or SET")),
    }
}

fn get(args: &mut Args, context: &mut Context<'_>, out: &mut BytesMut) -> Result<(), CommandError> {
    let name = args.next_bytes()?.to_ascii_lowercase();
    args.finish()?;
    let node = context.node;
    let value = match name.as_slice() {
        b"maxmemory" => Some(node.max_memory().to_string()),
        b"maxclients" => Some(node.config.max_clients.to_string()),
        b"max-staleness" => Some(node.config.max_staleness.as_secs().to_string()),
        _ => None,
    };
    // A map in RESP3, as Redis replies (redis-py reads it as one).
    let protocol = context.session.protocol;
    match value {
        Some(value) => {
            protocol.map_header(out, 1);
            encode::bulk(out, &name);
            encode::bulk(out, value.as_bytes());
        }
        None => protocol.map_header(out, 0),
    }
    Ok(())
}

fn set(args: &mut Args, context: &mut Context<'_>, out: &mut BytesMut) -> Result<(), CommandError> {
    let name = args.next_bytes()?;
    let value = args.next_text("value")?;
    args.finish()?;
    if !name.eq_ignore_ascii_case(b"maxmemory") {
        return Err(args.invalid(
            "parameter",
            name,
            "maxmemory (the only one settable at run time)",
        ));
    }
    let bytes = parse_size(&value).map_err(|error| CommandError::InvalidArgument {
        command: args.command(),
        message: error.to_string(),
    })?;
    let share = context.node.set_max_memory(bytes);
    context.for_each_shard(|store| store.set_max_memory(share));
    tracing::info!(maxmemory = bytes, "CONFIG SET maxmemory");
    ok(out);
    Ok(())
}

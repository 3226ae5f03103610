//! `CONFIG GET parameter` and `CONFIG SET maxmemory size` (a size as `--max-memory` takes it).

use super::{ok, Args, CommandError, Context};
use crate::config::min_max_memory;
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
        return Err(CommandError::InvalidArgument {
            command: "CONFIG SET",
            message: format!(
                "unsupported parameter '{}' (maxmemory is the only one settable at run time)",
                super::printable(name)
            ),
        });
    }
    let bytes = parse_size(&value).map_err(|error| CommandError::InvalidArgument {
        command: "CONFIG SET",
        message: error.to_string(),
    })?;
    // The same floor as --max-memory: a client must not be able to empty the node for good.
    let minimum = min_max_memory(context.node.shards.len());
    if bytes < minimum {
        return Err(CommandError::InvalidArgument {
            command: "CONFIG SET",
            message: format!(
                "maxmemory {bytes} is below the minimum of {minimum} bytes (1 MiB, and at least \
                 64 KiB per shard)"
            ),
        });
    }
    let share = context.node.set_max_memory(bytes);
    context.for_each_shard(|store| store.set_max_memory(share));
    tracing::info!(maxmemory = bytes, "CONFIG SET maxmemory");
    ok(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::compat_tests::{node, Client};

    #[test]
    fn config_set_refuses_a_useless_maxmemory_and_other_parameters() {
        let node = node();
        let mut c = Client::new(&node);
        let too_small = "-ERR CONFIG SET: maxmemory 0 is below the minimum of 1048576 bytes \
                         (1 MiB, and at least 64 KiB per shard)\r\n";
        assert_eq!(c.send(&["CONFIG", "SET", "maxmemory", "0"]), too_small);
        assert!(c
            .send(&["CONFIG", "SET", "maxmemory", "100"])
            .contains("minimum"));
        assert_eq!(
            c.send(&["CONFIG", "GET", "maxmemory"]),
            "*2\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n"
        );
        assert_eq!(c.send(&["CONFIG", "SET", "maxmemory", "1mb"]), "+OK\r\n");
        assert_eq!(
            c.send(&["CONFIG", "SET", "maxclients", "5"]),
            "-ERR CONFIG SET: unsupported parameter 'maxclients' (maxmemory is the only one \
             settable at run time)\r\n"
        );
    }
}

//! `TXDATABASE [database]`: the database whose invalidation stream a connection trusts the
//! node to follow. A node's `N` vouches for every open version it holds only as far as its
//! stream carries the invalidations of the database those versions were read from; a node
//! fed by another database's agent would vouch for what nobody invalidates. So a connection
//! that declares its database (the agent's, and every library's) is refused the versioned
//! and stream commands (`-WRONGDB`) on a node that follows another one; the first stream
//! command of a connection that declared one makes the node follow that database for the
//! rest of its life (checked in [`super::execute`]).

use super::{check_database, ok, Args, CommandError, Context};
use bytes::{Bytes, BytesMut};
use txcache_resp::encode;

/// Longest name accepted: a library's and an agent's are about 30 bytes.
const MAX_DATABASE_LEN: usize = 256;

/// Without an argument replies the database the node follows (nil until a stream command
/// named one); with one, declares it for this connection and replies `+OK`, or `-WRONGDB`
/// when the node follows another — the declaration stays, so that nothing else this
/// connection sends is served either.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    if args.remaining() == 0 {
        match context.node.database() {
            Some(database) => encode::bulk(out, database),
            None => context.session.protocol.null(out),
        }
        return Ok(());
    }
    let database = args.next_bytes()?;
    args.finish()?;
    if database.is_empty() || database.len() > MAX_DATABASE_LEN {
        return Err(args.invalid("database", database, "1 to 256 bytes naming a database"));
    }
    context.session.unconfirmed_database = Some(Bytes::copy_from_slice(database));
    check_database(context.node, context.session, false)?;
    ok(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cmd::compat_tests::{node, Client};

    /// `TXGET`'s reply for a key never stored.
    const MISS: &str = "*2\r\n$-1\r\n$10\r\ncompulsory\r\n";

    fn wrong(node: &str, declared: &str) -> String {
        format!("-WRONGDB this node follows database {node}, not {declared}: each database needs cache nodes of its own (restart a node to give it to another database)\r\n")
    }

    #[test]
    fn the_first_stream_command_of_a_declared_connection_claims_the_node() {
        let node = node();
        let mut agent = Client::new(&node);
        let mut library = Client::new(&node);
        assert_eq!(
            agent.send(&["TXDATABASE"]),
            "$-1\r\n",
            "nothing followed yet"
        );
        assert_eq!(library.send(&["TXDATABASE", "1/5"]), "+OK\r\n");
        assert_eq!(
            library.send(&["TXGET", "k", "1", "2"]),
            MISS,
            "nothing to refuse yet"
        );
        assert_eq!(agent.send(&["TXDATABASE", "1/5"]), "+OK\r\n");
        assert_eq!(agent.send(&["TXHEARTBEAT", "10", "100"]), ":1\r\n");
        assert_eq!(agent.send(&["TXDATABASE"]), "$3\r\n1/5\r\n");
        assert_eq!(library.send(&["TXGET", "k", "1", "2"]), MISS);
    }

    #[test]
    fn another_databases_connections_are_refused_everything_versioned() {
        let node = node();
        let mut agent = Client::new(&node);
        assert_eq!(agent.send(&["TXDATABASE", "1/5"]), "+OK\r\n");
        assert_eq!(agent.send(&["TXHEARTBEAT", "10", "100"]), ":1\r\n");
        let mut other_agent = Client::new(&node);
        assert_eq!(
            other_agent.send(&["TXDATABASE", "1/6"]),
            wrong("1/5", "1/6")
        );
        for command in [
            &["TXHEARTBEAT", "20", "200"][..],
            &["TXREWIND", "1", "100"],
            &["TXORIGIN", "1:2"],
            &["TXEPOCH", "9"],
            &["TXSTATUS"],
        ] {
            assert_eq!(
                other_agent.send(command),
                wrong("1/5", "1/6"),
                "{command:?}"
            );
        }
        let mut library = Client::new(&node);
        assert_eq!(library.send(&["TXDATABASE", "1/6"]), wrong("1/5", "1/6"));
        for command in [
            &["TXGET", "k", "1", "2"][..],
            &["TXSET", "k", "v", "1", "2"],
            &["TXRELEASE", "k"],
            &["TXINTERVAL", "15"],
        ] {
            assert_eq!(library.send(command), wrong("1/5", "1/6"), "{command:?}");
        }
        assert_eq!(
            library.send(&["PING"]),
            "+PONG\r\n",
            "the connection stays usable"
        );
        assert!(agent.send(&["TXSTATUS"]).starts_with("*3\r\n:10\r\n"));
    }

    #[test]
    fn a_connection_that_declares_nothing_is_not_checked() {
        let node = node();
        let mut agent = Client::new(&node);
        assert_eq!(agent.send(&["TXDATABASE", "1/5"]), "+OK\r\n");
        assert_eq!(agent.send(&["TXHEARTBEAT", "10", "100"]), ":1\r\n");
        let mut tool = Client::new(&node);
        assert_eq!(tool.send(&["TXGET", "k", "1", "2"]), MISS);
    }

    #[test]
    fn a_declaration_is_checked_inside_a_transaction_too() {
        let node = node();
        let mut agent = Client::new(&node);
        assert_eq!(agent.send(&["TXDATABASE", "1/5"]), "+OK\r\n");
        let mut library = Client::new(&node);
        assert_eq!(
            library.send(&["TXDATABASE", "1/6"]),
            "+OK\r\n",
            "no database yet"
        );
        assert_eq!(library.send(&["MULTI"]), "+OK\r\n");
        assert_eq!(library.send(&["TXGET", "k", "1", "2"]), "+QUEUED\r\n");
        assert_eq!(agent.send(&["TXHEARTBEAT", "10", "100"]), ":1\r\n");
        let reply = library.send(&["EXEC"]);
        assert_eq!(reply, format!("*1\r\n{}", wrong("1/5", "1/6")));
    }

    #[test]
    fn a_database_name_is_bounded() {
        let node = node();
        let mut client = Client::new(&node);
        let long = "x".repeat(257);
        assert!(client
            .send(&["TXDATABASE", &long])
            .starts_with("-ERR TXDATABASE"));
        assert!(client
            .send(&["TXDATABASE", ""])
            .starts_with("-ERR TXDATABASE"));
    }
}

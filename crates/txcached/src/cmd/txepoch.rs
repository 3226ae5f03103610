//! `TXEPOCH [epoch]`: the fencing epoch of the agent on this connection. Agents in high
//! availability hold a lease in PostgreSQL whose epoch grows at each takeover; the one holding
//! it sends that epoch on every connection, so a node refuses the stream commands of a stale
//! agent that lost the lease (`-FENCED`, checked in [`super::execute`]) instead of letting it
//! move `N` behind the new agent's back.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::decimal::parse_u64;
use txcache_resp::encode;

/// The largest epoch: a RESP integer, which is how `TXEPOCH` reports it (and PostgreSQL's
/// `bigint`, which is where an agent keeps it).
const MAX_EPOCH: u64 = i64::MAX as u64;

/// Without an argument replies the node's epoch (`:0` until any `TXEPOCH`); with one, raises
/// the node's epoch to it and makes it the connection's, replying `+OK`, or refuses an epoch
/// older than the node's with `-FENCED` and changes nothing.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    if args.remaining() == 0 {
        // Every stored epoch passed the check below, so it fits a RESP integer.
        encode::integer(out, i64::try_from(context.node.epoch()).unwrap_or(i64::MAX));
        return Ok(());
    }
    let given = args.next_bytes()?;
    args.finish()?;
    let epoch = parse_u64(given)
        .filter(|epoch| *epoch <= MAX_EPOCH)
        .ok_or_else(|| args.invalid("epoch", given, "an integer in 0..=9223372036854775807"))?;
    if let Err(node) = context.node.raise_epoch(epoch) {
        // The stale agent's own announcement is as much a sign of it as its messages are.
        context.node.metrics.count_fenced();
        return Err(CommandError::OlderEpoch { given: epoch, node });
    }
    context.session.epoch = epoch;
    ok(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cmd::compat_tests::{node, Client as Agent};
    use crate::metrics;
    use crate::node::Node;

    /// The fence's refusal of a connection at `connection` on a node at `node`.
    fn fenced(connection: u64, node: u64) -> String {
        format!("-FENCED this connection's epoch {connection} is older than this node's {node}: another agent took over\r\n")
    }

    fn info_field(node: &Node, name: &str) -> u64 {
        let text = metrics::info_text(&metrics::collect(node), Some("txcache"));
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")));
        line.and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    #[test]
    fn an_epoch_only_rises() {
        let node = node();
        let mut agent = Agent::new(&node);
        assert_eq!(agent.send(&["TXEPOCH"]), ":0\r\n", "0 until any TXEPOCH");
        assert_eq!(agent.send(&["TXEPOCH", "3"]), "+OK\r\n");
        assert_eq!(agent.send(&["txepoch"]), ":3\r\n");
        assert_eq!(
            agent.send(&["TXEPOCH", "3"]),
            "+OK\r\n",
            "the same epoch again"
        );
        assert_eq!(agent.send(&["TXEPOCH", "7"]), "+OK\r\n");
        assert_eq!(
            agent.send(&["TXEPOCH", "5"]),
            "-FENCED epoch 5 is older than this node's 7: another agent took over\r\n"
        );
        assert_eq!(
            agent.send(&["TXEPOCH"]),
            ":7\r\n",
            "a refused epoch changes nothing"
        );
        assert_eq!(agent.session.epoch, 7, "nor the connection's");
        assert_eq!(node.epoch(), 7);
        assert_eq!(info_field(&node, "stream_epoch"), 7);
        assert_eq!(info_field(&node, "stream_fenced"), 1);
    }

    #[test]
    fn a_bad_epoch_is_an_invalid_argument() {
        let node = node();
        let mut agent = Agent::new(&node);
        for bad in ["-1", "x", "", "1.5", "9223372036854775808"] {
            let reply = agent.send(&["TXEPOCH", bad]);
            assert!(
                reply.starts_with(&format!("-ERR TXEPOCH: epoch must be an integer in 0..=9223372036854775807, got '{bad}'")),
                "{bad}: {reply}"
            );
        }
        assert_eq!(
            agent.send(&["TXEPOCH", "1", "2"]),
            "-ERR wrong number of arguments for 'txepoch' command\r\n"
        );
        assert_eq!(agent.send(&["TXEPOCH", "9223372036854775807"]), "+OK\r\n");
        assert_eq!(agent.send(&["TXEPOCH"]), ":9223372036854775807\r\n");
    }

    #[test]
    fn a_connection_at_an_older_epoch_is_fenced_from_every_stream_command() {
        let node = node();
        let mut stale = Agent::new(&node);
        let mut current = Agent::new(&node);
        assert_eq!(stale.send(&["TXEPOCH", "1"]), "+OK\r\n");
        assert_eq!(stale.send(&["TXHEARTBEAT", "100", "1"]), ":1\r\n");
        assert_eq!(current.send(&["TXEPOCH", "2"]), "+OK\r\n");
        for command in [
            &["TXINVALIDATE", "110", "2", "s.t"][..],
            &["TXHEARTBEAT", "120", "3"],
            &["TXORIGIN", "42:1"],
            &["TXORIGIN"],
            &["TXRESET", "130", "4"],
            &["TXREWIND", "10", "5"],
        ] {
            assert_eq!(stale.send(command), fenced(1, 2), "{command:?}");
        }
        assert_eq!(
            stale.send(&["TXSTATUS"]),
            "*3\r\n:100\r\n:100\r\n:1\r\n",
            "nothing the stale agent sent moved N; reads are no stream commands"
        );
        assert_eq!(stale.send(&["TXEPOCH"]), ":2\r\n", "TXEPOCH is exempt");
        assert_eq!(info_field(&node, "stream_fenced"), 6);
        assert_eq!(current.send(&["TXINVALIDATE", "110", "2", "s.t"]), ":1\r\n");
        assert_eq!(current.send(&["TXHEARTBEAT", "120", "3"]), ":1\r\n");
        assert_eq!(current.send(&["TXORIGIN", "42:1"]), "+OK\r\n");
        assert_eq!(current.send(&["TXORIGIN"]), "$4\r\n42:1\r\n");
        // The stale agent is fenced for good: only a newer lease's epoch would let it back.
        assert_eq!(
            stale.send(&["TXEPOCH", "1"]),
            "-FENCED epoch 1 is older than this node's 2: another agent took over\r\n"
        );
        assert_eq!(stale.send(&["TXHEARTBEAT", "130", "4"]), fenced(1, 2));
        assert_eq!(stale.send(&["TXEPOCH", "3"]), "+OK\r\n");
        assert_eq!(stale.send(&["TXHEARTBEAT", "130", "4"]), ":1\r\n");
        assert_eq!(current.send(&["TXHEARTBEAT", "140", "5"]), fenced(2, 3));
    }

    #[test]
    fn a_connection_that_never_sent_an_epoch_works_until_one_is_raised() {
        let node = node();
        let mut single = Agent::new(&node);
        assert_eq!(single.send(&["TXHEARTBEAT", "100", "1"]), ":1\r\n");
        assert_eq!(single.send(&["TXINVALIDATE", "110", "2", "s.t"]), ":1\r\n");
        assert_eq!(single.send(&["TXORIGIN", "42:1"]), "+OK\r\n");
        assert_eq!(
            Agent::new(&node).send(&["TXEPOCH", "0"]),
            "+OK\r\n",
            "epoch 0 fences nobody"
        );
        assert_eq!(single.send(&["TXHEARTBEAT", "120", "3"]), ":1\r\n");
        assert_eq!(Agent::new(&node).send(&["TXEPOCH", "1"]), "+OK\r\n");
        assert_eq!(single.send(&["TXHEARTBEAT", "130", "4"]), fenced(0, 1));
        assert_eq!(
            single.send(&["TXINVALIDATE", "140", "5", "s.t"]),
            fenced(0, 1)
        );
        assert_eq!(
            single.send(&["GET", "k"]),
            "$-1\r\n",
            "the fence holds back stream commands only"
        );
    }

    #[test]
    fn a_fenced_stream_command_in_a_transaction_aborts_it() {
        let node = node();
        let mut stale = Agent::new(&node);
        assert_eq!(stale.send(&["TXEPOCH", "1"]), "+OK\r\n");
        assert_eq!(Agent::new(&node).send(&["TXEPOCH", "2"]), "+OK\r\n");
        assert_eq!(stale.send(&["MULTI"]), "+OK\r\n");
        assert_eq!(stale.send(&["SET", "k", "v"]), "+QUEUED\r\n");
        assert_eq!(stale.send(&["TXHEARTBEAT", "100", "1"]), fenced(1, 2));
        assert_eq!(
            stale.send(&["EXEC"]),
            "-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        assert_eq!(stale.send(&["GET", "k"]), "$-1\r\n");
        assert_eq!(stale.send(&["TXSTATUS"]), "*3\r\n:0\r\n$-1\r\n:0\r\n");
        // At the node's epoch the stream command is refused in a transaction as before.
        let mut current = Agent::new(&node);
        assert_eq!(current.send(&["TXEPOCH", "2"]), "+OK\r\n");
        current.send(&["MULTI"]);
        let refused = current.send(&["TXHEARTBEAT", "100", "1"]);
        assert!(
            refused.starts_with("-ERR Command not allowed inside a transaction"),
            "{refused}"
        );
        current.send(&["DISCARD"]);
    }

    #[test]
    fn the_permission_check_comes_before_the_fence() {
        let node = node();
        assert_eq!(Agent::new(&node).send(&["TXEPOCH", "1"]), "+OK\r\n");
        let mut application = Agent::new(&node);
        application.session.streams = false;
        for command in [&["TXHEARTBEAT", "100", "1"][..], &["TXEPOCH", "5"]] {
            let reply = application.send(command);
            assert!(reply.starts_with("-NOPERM "), "{command:?}: {reply}");
        }
        assert_eq!(node.epoch(), 1, "only the agent may raise the epoch");
    }

    /// A `TXEPOCH` that replied has waited for every stream command admitted at the older
    /// epoch: whatever a stale connection does after it is refused, however the two race.
    #[test]
    fn no_stale_command_lands_after_a_raise_replied() {
        let node = node();
        std::thread::scope(|scope| {
            let stale = scope.spawn(|| {
                let mut stale = Agent::new(&node);
                assert_eq!(stale.send(&["TXEPOCH", "1"]), "+OK\r\n");
                let mut ts = 1;
                while stale.send(&["TXHEARTBEAT", &ts.to_string(), "1"]) == ":1\r\n" {
                    ts += 1;
                }
                ts
            });
            while node.epoch() < 1 {
                std::thread::yield_now();
            }
            let mut current = Agent::new(&node);
            assert_eq!(current.send(&["TXEPOCH", "2"]), "+OK\r\n");
            let position_at_takeover = current.send(&["TXSTATUS"]);
            let first_refused = stale.join().unwrap();
            assert_eq!(current.send(&["TXSTATUS"]), position_at_takeover);
            assert!(
                position_at_takeover.starts_with(&format!("*3\r\n:{}\r\n", first_refused - 1)),
                "{position_at_takeover} / {first_refused}"
            );
        });
    }
}

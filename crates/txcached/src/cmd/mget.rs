//! `MGET key [key ...]`: several plain values at once.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies an array: each key's value, or a null when it is absent, expired or not a plain
/// value (Redis's MGET answers a key of another type with a null, not an error). Keys on
/// several shards are read with all of them locked, at one moment. A reply that would
/// exceed the node's reply limit is refused (one key named many times is many values).
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let keys = args.rest();
    if keys.is_empty() {
        return Err(CommandError::WrongArity(args.command()));
    }
    let (node, protocol) = (context.node, context.session.protocol);
    // One clock reading for all the keys, taken at the first value with a deadline.
    let mut now = None;
    let mut clock = || *now.get_or_insert_with(|| node.now_ms());
    let (start, limit) = (out.len(), node.reply_limit());
    encode::array_header(out, keys.len());
    let complete = context.with_keys_locked(&keys, |context| {
        keys.iter().all(|key| {
            context.with_shard(key, |store| match store.get(key, &mut clock) {
                Ok(Some(value)) => encode::bulk(out, value),
                Ok(None) | Err(_) => protocol.null(out),
            });
            out.len() - start <= limit
        })
    });
    if !complete {
        out.truncate(start);
        return Err(CommandError::ReplyTooLarge { limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cmd::compat_tests::Client;
    use crate::config::Config;
    use crate::node::Node;
    use clap::Parser;

    /// A node of 4 MiB in one shard (its reply limit about as much) holding `big`, 512 KiB.
    fn small_node() -> Node {
        let args = ["txcached", "--max-memory", "4mb", "--shards", "1"];
        let node = Node::new(Config::parse_from(args));
        let mut client = Client::new(&node);
        let value = "x".repeat(1 << 19);
        assert_eq!(client.send(&["SET", "big", &value]), "+OK\r\n");
        node
    }

    #[test]
    fn a_reply_past_the_limit_is_refused_not_built() {
        let node = small_node();
        let mut client = Client::new(&node);
        let three = client.send(&["MGET", "big", "big", "big"]);
        assert!(three.starts_with("*3\r\n$524288\r\n"), "under the limit");
        let keys = vec!["big"; 40];
        let many = client.send(&[&["MGET"][..], &keys].concat());
        let refusal = format!("-ERR the reply would exceed {} bytes", node.reply_limit());
        assert!(many.starts_with(&refusal), "{many:.80}");
        assert_eq!(
            client.send(&["PING"]),
            "+PONG\r\n",
            "the connection goes on"
        );
    }

    #[test]
    fn a_transaction_runs_whole_and_answers_past_the_limit_with_errors() {
        let node = small_node();
        let mut client = Client::new(&node);
        assert_eq!(client.send(&["MULTI"]), "+OK\r\n");
        for _ in 0..10 {
            assert_eq!(client.send(&["GET", "big"]), "+QUEUED\r\n");
        }
        assert_eq!(client.send(&["SET", "after", "1"]), "+QUEUED\r\n");
        let reply = client.send(&["EXEC"]);
        assert!(reply.len() < 5 << 20, "{} bytes", reply.len());
        let fit = node.reply_limit() / "$524288\r\n\r\n".len().saturating_add(1 << 19);
        assert_eq!(reply.matches("$524288\r\n").count(), fit, "as many as fit");
        assert_eq!(
            reply.matches("-ERR the reply would exceed").count(),
            10 - fit
        );
        assert_eq!(
            client.send(&["GET", "after"]),
            "$1\r\n1\r\n",
            "every command ran"
        );
    }
}

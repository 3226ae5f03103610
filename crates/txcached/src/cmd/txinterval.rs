//! `TXINTERVAL s [TAGS tag ...]`: where results computed at snapshot `s` from the rows named
//! by the tags are known valid, from the invalidation history alone; nothing is stored.

use super::{txget::encode_interval, txset::parse_tags, Args, CommandError, Context};
use bytes::BytesMut;

use txcache_resp::encode;

/// Replies `*3 :lo :hi :open`, the effective interval as `TXGET` reports a version's.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let s = args.next_timestamp("s")?;
    let tags = match args.eat_keyword("TAGS") {
        true => parse_tags(args)?,
        false => Vec::new(),
    };
    if args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    // The shards share one history, and the first shard is the first to apply each stream
    // message: it is the furthest along while a message is reaching the shards one by one.
    let answer = context.with_first_shard(|store| {
        store
            .database_interval(s, &tags)
            .and_then(|database| Some((store.effective(&database)?, database.is_open())))
    });
    // Only a snapshot at `u64::MAX` has no interval, and no wire timestamp is one.
    let Some((interval, open)) = answer else {
        return Err(CommandError::InvalidArgument {
            command: args.command(),
            message: format!("no interval holds s ({s})"),
        });
    };
    encode::array_header(out, 3);
    encode_interval(out, &interval, context.session.protocol);
    encode::integer(out, i64::from(open));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cmd::{execute_parts, Context, Session};
    use crate::config::Config;
    use crate::node::Node;
    use bytes::BytesMut;
    use clap::Parser;
    use txcache_model::Timestamp;

    fn reply(node: &Node, parts: &[&str]) -> String {
        let mut session = Session {
            authenticated: true,
            streams: true,
            ..Session::default()
        };
        let mut out = BytesMut::new();
        let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        execute_parts(&parts, &mut Context::new(node, &mut session), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn answers_from_the_history_every_shard_shares() {
        let node = Node::new(Config::parse_from(["txcached", "--shards", "3"]));
        reply(&node, &["TXHEARTBEAT", "100", "1"]);
        reply(&node, &["TXINVALIDATE", "120", "2", "s.t:id=1"]);
        reply(&node, &["TXINVALIDATE", "200", "3", "s.t:id=2"]);
        assert_eq!(
            reply(&node, &["TXINTERVAL", "150", "TAGS", "s.t:id=1"]),
            "*3\r\n:120\r\n:201\r\n:1\r\n"
        );
        assert_eq!(
            reply(&node, &["TXINTERVAL", "110", "TAGS", "s.t:id=1"]),
            "*3\r\n:100\r\n:120\r\n:0\r\n"
        );
        // Memory pressure on one shard sheds the history of all: H = 200 everywhere.
        let mut first = true;
        node.shards.for_each(|store| {
            if std::mem::take(&mut first) {
                let limit = store.config().max_memory;
                store.set_max_memory(0);
                store.set_max_memory(limit);
            }
        });
        let mut horizons = Vec::new();
        node.shards.for_each(|store| horizons.push(store.horizon()));
        let at = |n| Some(Timestamp(n));
        assert_eq!(horizons, [at(200), at(200), at(200)]);
        assert_eq!(
            reply(&node, &["TXINTERVAL", "150", "TAGS", "s.t:id=1"]),
            "*3\r\n:150\r\n:151\r\n:0\r\n"
        );
    }
}

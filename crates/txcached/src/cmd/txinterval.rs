//! `TXINTERVAL s [TAGS tag ...]`: where results computed at snapshot `s` from the rows named
//! by the tags are known valid, from the invalidation history alone; nothing is stored.

use super::{txget::encode_interval, txset::parse_tags, Args, CommandError, Context};
use bytes::BytesMut;
use std::cmp::Reverse;
use txcache_model::{Timestamp, ValidityInterval};
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
    // Every shard receives every stream message, but each trims its history on its own (by
    // age, by budget, and under memory pressure), so horizons differ. Each shard's answer is
    // computed under its own lock, from one consistent state, as a TXGET's is, and each is
    // sound. The shard with the oldest horizon knows the most history, so its `lo` is the
    // lowest and it can answer a snapshot the others see as below their horizon: the widest
    // sound answer. A shard without history ranks last; among equal horizons, the one furthest
    // in the stream (a message may be reaching the shards one by one) vouches the furthest.
    let mut best: Option<(Rank, ValidityInterval, bool)> = None;
    context.node.shards.for_each(|store| {
        let rank = (
            store.horizon().is_none(),
            store.horizon(),
            Reverse(store.last_applied()),
        );
        if best.as_ref().is_some_and(|(kept, ..)| *kept <= rank) {
            return;
        }
        let answer = store
            .database_interval(s, &tags)
            .and_then(|database| Some((store.effective(&database)?, database.is_open())));
        if let Some((effective, open)) = answer {
            best = Some((rank, effective, open));
        }
    });
    // Only a snapshot at `u64::MAX` has no interval, and no wire timestamp is one.
    let Some((_, interval, open)) = best else {
        return Err(CommandError::InvalidArgument {
            command: args.command(),
            message: format!("no interval holds s ({s})"),
        });
    };
    encode::array_header(out, 3);
    encode_interval(out, &interval);
    encode::integer(out, i64::from(open));
    Ok(())
}

/// Orders shards by how widely they can answer, best first: with history before without,
/// oldest horizon first, then furthest `N` first.
type Rank = (bool, Option<Timestamp>, Reverse<Timestamp>);

#[cfg(test)]
mod tests {
    use crate::cmd::{execute, Context, Session};
    use crate::config::Config;
    use crate::node::Node;
    use bytes::{Bytes, BytesMut};
    use clap::Parser;
    use txcache_model::Timestamp;

    fn reply(node: &Node, parts: &[&str]) -> String {
        let mut session = Session {
            authenticated: true,
            ..Session::default()
        };
        let mut out = BytesMut::new();
        let request = parts.iter().map(|p| Bytes::from(p.to_string())).collect();
        execute(
            request,
            &mut Context {
                node,
                session: &mut session,
            },
            &mut out,
        );
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn answers_from_the_shard_with_the_oldest_horizon() {
        let node = Node::new(Config::parse_from(["txcached", "--shards", "3"]));
        reply(&node, &["TXHEARTBEAT", "100", "1"]);
        reply(&node, &["TXINVALIDATE", "120", "2", "s.t:id=1"]);
        reply(&node, &["TXINVALIDATE", "200", "3", "s.t:id=2"]);
        // Memory pressure on the first shard alone sheds its whole history: H = 200 there.
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
        assert_eq!(horizons, [at(200), at(100), at(100)]);
        // The first shard alone would answer [150, 151) and [110, 111).
        assert_eq!(
            reply(&node, &["TXINTERVAL", "150", "TAGS", "s.t:id=1"]),
            "*3\r\n:120\r\n:201\r\n:1\r\n"
        );
        assert_eq!(
            reply(&node, &["TXINTERVAL", "110", "TAGS", "s.t:id=1"]),
            "*3\r\n:100\r\n:120\r\n:0\r\n"
        );
    }
}

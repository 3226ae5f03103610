//! `TXRESET ts commit_time`: the stream has a gap; bound every open version at `N`.
//! `TXREWIND ts commit_time`: the database's positions went back below `N`; drop every
//! versioned entry and continue the stream from `ts`.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_model::{Timestamp, WallClock};
use txcache_store::Store;

/// Resets every shard; replies `+OK`.
pub fn run_reset(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    reposition(
        args,
        context,
        out,
        Store::reset,
        "the invalidation stream had a gap; every open version was bounded at the old position",
    )
}

/// Rewinds every shard; replies `+OK`.
pub fn run_rewind(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    reposition(args, context, out, Store::rewind,
        "the database's positions went back (a restored backup or a failover); every versioned entry was dropped")
}

/// Applies `apply(ts, commit_time)` to every shard and logs `what` happened, loudly when the
/// node held versioned entries (both are rare and cost it its open, or all, entries); at info
/// when it held none, or on a new node's first stream, which loses nothing.
fn reposition(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
    apply: fn(&mut Store, Timestamp, WallClock),
    what: &str,
) -> Result<(), CommandError> {
    let ts = args.next_timestamp("ts")?;
    let commit_time = WallClock(args.next_u64("commit_time")?);
    args.finish()?;
    let mut versions = 0;
    let old_position = context.node.shards.broadcast(|store| {
        let before = store.last_applied();
        versions += store.gauges().versions;
        apply(store, ts, commit_time);
        before
    });
    let command = args.command();
    if old_position == Timestamp::ZERO {
        // What every agent sends a node it meets: normal for a node just started. Versions
        // libraries stored before it are bounded at the point each was computed at, where
        // they are exact: nothing is stale, and nothing the stream had was lost.
        tracing::info!(new_position = %ts, versions,
            "{command}: the node's first stream, starting at the agent's position (versions stored before it stay valid at their own commit points only)");
    } else if versions > 0 {
        tracing::warn!(%old_position, new_position = %ts, versions, "{command}: {what}");
    } else {
        tracing::info!(%old_position, new_position = %ts,
            "{command}: the stream moved to a new position; the node held no versioned entries, so nothing was lost");
    }
    ok(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::compat_tests::{node, Client};

    #[test]
    fn a_reset_on_a_new_node_bounds_nothing_and_one_with_entries_bounds_them() {
        let node = node();
        let mut c = Client::new(&node);
        assert_eq!(c.send(&["TXRESET", "100", "5"]), "+OK\r\n");
        let inserted = c.send(&["TXSET", "k", "v", "100", "OPEN", "SNAPSHOT", "100"]);
        assert!(inserted.contains("inserted"), "{inserted}");
        assert_eq!(c.send(&["TXRESET", "200", "6"]), "+OK\r\n");
        let found = c.send(&["TXGET", "k", "100", "300"]);
        assert!(
            found.contains(":101\r\n"),
            "bounded at the old position: {found}"
        );
    }

    #[test]
    fn what_a_new_node_got_before_its_first_stream_stays_valid_at_its_own_point_only() {
        let node = node();
        let mut c = Client::new(&node);
        let stored = c.send(&["TXSET", "k", "v", "100", "OPEN", "SNAPSHOT", "100"]);
        assert!(!stored.starts_with('-'), "{stored}");
        assert_eq!(c.send(&["TXRESET", "200", "6"]), "+OK\r\n");
        let exact = c.send(&["TXGET", "k", "100", "100"]);
        assert!(exact.contains(":100\r\n:101\r\n"), "{exact:?}");
        let later = c.send(&["TXGET", "k", "101", "300"]);
        assert!(
            !later.contains("$1\r\nv"),
            "served past its point: {later:?}"
        );
    }
}

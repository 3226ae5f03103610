//! Cache nodes that join and leave while the agent runs.
//!
//! Without `--node`, the cache nodes are the rows of `txcache.cache_nodes` for the agent's
//! `--slot` (`txcache setup` creates the table, `txcache nodes add` fills it). The agent
//! reads them once at the start of each term ([`Watch::start`]: the fan-out is built from
//! them), then every `--membership-interval` on a session of its own ([`Watch::run`]),
//! applying each change to the fan-out: a node that joins is replayed or reset at its first
//! connection, as any node that reconnects; one that leaves is fed no more and keeps only
//! entries valid up to its position, so it never serves stale values.

use crate::connect::{connect_sql, SqlSession};
use crate::fanout::Fanout;
use crate::node_link::NodeAddress;
use anyhow::Context as _;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The membership of slot `$1`, in a fixed order: every agent of the slot (and every
/// library, through `NODES`) sees the same list.
const MEMBERS: &str = "SELECT address FROM txcache.cache_nodes WHERE slot = $1 ORDER BY address";

/// Whether the table exists, and whether the agent's role may read it.
const TABLE_CHECK: &str = "
    WITH t(oid) AS (SELECT pg_catalog.to_regclass('txcache.cache_nodes')::oid)
    SELECT t.oid IS NOT NULL,
           coalesce(pg_catalog.has_table_privilege(t.oid, 'SELECT'), false)
    FROM t";

/// Longest a reading may take: a database cut off would otherwise hold the watch forever.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Refuses to start without the table of cache nodes or the right to read it, naming the fix.
pub async fn require_table(sql: &SqlSession) -> anyhow::Result<()> {
    let row = sql
        .client
        .query_one(TABLE_CHECK, &[])
        .await
        .context("cannot read txcache.cache_nodes")?;
    match (row.get::<_, bool>(0), row.get::<_, bool>(1)) {
        (true, true) => Ok(()),
        (true, false) => anyhow::bail!(
            "the agent's role may not read txcache.cache_nodes, the table of cache nodes: grant it SELECT (`txcache setup --print-sql` prints the GRANT), or name the nodes with --node"
        ),
        (false, _) => anyhow::bail!(
            "txcache.cache_nodes does not exist: run `txcache setup` again (it creates the table of cache nodes), or name the nodes with --node"
        ),
    }
}

/// The addresses of slot `slot`'s rows, in the table's order.
pub async fn read(sql: &SqlSession, slot: &str) -> anyhow::Result<Vec<String>> {
    let rows = tokio::time::timeout(READ_TIMEOUT, sql.query_prepared(MEMBERS, &[&slot]))
        .await
        .context("timed out")??;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The watch of one term's membership: what it last reported, so that an outage or a bad
/// row is logged once, not at every reading.
#[derive(Debug)]
pub struct Watch {
    slot: String,
    /// Rows whose address is no cache node's, already logged.
    refused: BTreeSet<String>,
    /// Whether the last reading failed.
    failing: bool,
}

impl Watch {
    /// Reads the membership at the start of a term, on the term's session: the nodes to
    /// build the fan-out with, and the watch that follows them. A missing table or
    /// privilege is an error naming the fix; no node at all only a warning.
    pub async fn start(sql: &SqlSession, slot: &str) -> anyhow::Result<(Self, Vec<String>)> {
        require_table(sql).await?;
        let rows = read(sql, slot).await?;
        let mut watch = Self {
            slot: slot.to_owned(),
            refused: BTreeSet::new(),
            failing: false,
        };
        let nodes = watch.usable(rows);
        if nodes.is_empty() {
            tracing::warn!(slot, "no cache node in txcache.cache_nodes for this slot: the agent delivers to none until one is added (`txcache nodes add HOST:PORT`)");
        } else {
            tracing::info!(slot, nodes = ?nodes, "cache nodes read from txcache.cache_nodes");
        }
        Ok((watch, nodes))
    }

    /// Reads the membership again every `interval` and applies each change to `fanout`,
    /// until the term's runtime ends. A failed reading keeps the membership as it is and
    /// reconnects at the next one.
    pub async fn run(mut self, dsn: String, interval: Duration, fanout: Arc<Fanout>) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await; // the first tick is now: the term's start has just read it
        let mut session = None;
        loop {
            ticker.tick().await;
            match self.read_again(&dsn, &mut session).await {
                Ok(rows) => {
                    let nodes = self.usable(rows);
                    apply(&fanout, &nodes);
                }
                Err(error) => self.failed(&error),
            }
        }
    }

    /// One reading on `session`, opened first when there is none; a session that failed is
    /// dropped, so the next reading opens another.
    async fn read_again(
        &mut self,
        dsn: &str,
        session: &mut Option<SqlSession>,
    ) -> anyhow::Result<Vec<String>> {
        let sql = match session.take() {
            Some(sql) => sql,
            None => connect_sql(dsn, "txcache-agent membership").await?,
        };
        let rows = read(&sql, &self.slot).await?;
        *session = Some(sql);
        if std::mem::replace(&mut self.failing, false) {
            tracing::info!(slot = %self.slot, "txcache.cache_nodes read again");
        }
        Ok(rows)
    }

    /// Logs a failed reading, once per outage: a database that restarts would log it at
    /// every interval.
    fn failed(&mut self, error: &anyhow::Error) {
        if !std::mem::replace(&mut self.failing, true) {
            tracing::warn!(slot = %self.slot, error = format!("{error:#}"),
                "cannot read txcache.cache_nodes; keeping the current cache nodes and trying again every --membership-interval");
        }
    }

    /// The nodes the rows name, each once and by its canonical address
    /// ([`NodeAddress::canonical`]): a row that names no cache node, or one an earlier row
    /// names already, is logged once (while it stays in the table) and skipped; the others
    /// still apply.
    fn usable(&mut self, rows: Vec<String>) -> Vec<String> {
        self.refused.retain(|address| rows.contains(address));
        let mut nodes: Vec<String> = Vec::with_capacity(rows.len());
        for address in rows {
            match NodeAddress::parse(&address).map(|node| node.canonical()) {
                Ok(node) if !nodes.contains(&node) => nodes.push(node),
                Ok(node) => {
                    if self.refused.insert(address.clone()) {
                        tracing::warn!(slot = %self.slot, %address, node = %node,
                            "a row of txcache.cache_nodes names a node an earlier row names: skipped (remove it with txcache nodes remove)");
                    }
                }
                Err(error) => {
                    if self.refused.insert(address.clone()) {
                        tracing::error!(slot = %self.slot, %address, error = format!("{error:#}"),
                            "a row of txcache.cache_nodes names no cache node (host:port, or rediss://host:port for TLS): skipped");
                    }
                }
            }
        }
        nodes
    }
}

/// Makes `fanout`'s membership `nodes`, in that order: the nodes that left first, then the
/// ones that joined, each at its place.
pub fn apply(fanout: &Arc<Fanout>, nodes: &[String]) {
    for address in fanout.addresses() {
        if !nodes.contains(&address) && fanout.remove_node(&address) {
            tracing::info!(node = %address, "cache node left");
        }
    }
    for (position, address) in nodes.iter().enumerate() {
        if fanout.add_node(position, address) {
            tracing::info!(node = %address, "cache node joined");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use txcache_model::Timestamp;

    fn owned(list: &[&str]) -> Vec<String> {
        list.iter().map(|address| (*address).to_owned()).collect()
    }

    #[test]
    fn a_change_of_membership_is_applied_in_the_tables_order() {
        let fanout = Fanout::new(&owned(&["b:2", "d:4"]), Timestamp(100), 10);
        apply(&fanout, &owned(&["a:1", "b:2", "c:3"]));
        assert_eq!(fanout.addresses(), owned(&["a:1", "b:2", "c:3"]));
        apply(&fanout, &owned(&["c:3"]));
        assert_eq!(fanout.addresses(), owned(&["c:3"]));
        apply(&fanout, &[]);
        assert_eq!(fanout.node_count(), 0);
    }

    #[test]
    fn rows_that_name_no_node_are_skipped_and_the_others_kept() {
        let mut watch = Watch {
            slot: "txcache".to_owned(),
            refused: BTreeSet::new(),
            failing: false,
        };
        let rows = owned(&["a:1", "ftp://b:2", "nothing", "rediss://c:3", "d:99999"]);
        assert_eq!(watch.usable(rows), owned(&["a:1", "rediss://c:3"]));
        assert_eq!(
            watch.refused,
            owned(&["d:99999", "ftp://b:2", "nothing"])
                .into_iter()
                .collect()
        );
        watch.usable(owned(&["nothing"]));
        assert_eq!(
            watch.refused,
            owned(&["nothing"]).into_iter().collect(),
            "a row gone is forgotten"
        );
    }

    #[test]
    fn a_node_is_named_once_however_its_rows_write_it() {
        let mut watch = Watch {
            slot: "txcache".to_owned(),
            refused: BTreeSet::new(),
            failing: false,
        };
        let rows = owned(&[" A:1 ", "redis://a:1", "a:0001", "rediss://a:1", "[::1]:2"]);
        assert_eq!(
            watch.usable(rows),
            owned(&["a:1", "rediss://a:1", "[::1]:2"])
        );
        assert_eq!(
            watch.refused,
            owned(&["a:0001", "redis://a:1"]).into_iter().collect()
        );
    }
}

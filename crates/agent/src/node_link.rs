//! A RESP connection from the agent to one cache node.

use crate::message::StreamMessage;
use crate::term::Term;
use anyhow::{bail, Context as _};
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use txcache_model::{Timestamp, WallClock};
use txcache_resp::{encode, Frame, Limits};
use txcache_tls::{ClientConfig, Duplex};

/// How long a node may take to answer before the link is considered dead.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// One open connection to a node, speaking for one term of this agent.
pub struct NodeLink {
    stream: Box<dyn Duplex>,
    input: BytesMut,
    output: BytesMut,
    term: Arc<Term>,
}

/// A cache node's address (`--node`, or a row of `txcache.cache_nodes`): `host:port`,
/// `redis://host:port`, or `rediss://host:port` (TLS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddress {
    /// `host:port` to connect to.
    pub host_port: String,
    /// Whether the node is spoken to over TLS.
    pub tls: bool,
}

impl NodeAddress {
    /// Reads an address; an unknown scheme is refused.
    pub fn parse(address: &str) -> anyhow::Result<Self> {
        let address = address.trim();
        let (tls, host_port) = match address.split_once("://") {
            None => (false, address),
            Some(("redis", rest)) => (false, rest),
            Some(("rediss", rest)) => (true, rest),
            Some((scheme, _)) => {
                bail!("{address}: unknown scheme {scheme:?} (host:port, or rediss://host:port for TLS)")
            }
        };
        let Some((host, port)) = host_port.trim_end_matches('/').rsplit_once(':') else {
            bail!("{address}: not host:port");
        };
        if host.is_empty() || host.chars().any(char::is_whitespace) {
            bail!("{address}: not host:port (no host, or a space in it)");
        }
        if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
            bail!("{address}: an IPv6 address goes in brackets ([::1]:6380)");
        }
        let port = port.parse::<u16>().ok().filter(|port| *port > 0);
        let Some(port) = port else {
            bail!("{address}: the port is not a number from 1 to 65535");
        };
        let host_port = format!("{}:{port}", host.to_ascii_lowercase());
        Ok(Self { host_port, tls })
    }

    /// The address as the agent names the node (`NODES`, its logs): `host:port`, or
    /// `rediss://host:port`, the host in lower case and the port as a plain number — one
    /// name per node, however it was written.
    pub fn canonical(&self) -> String {
        if self.tls {
            format!("rediss://{}", self.host_port)
        } else {
            self.host_port.clone()
        }
    }

    /// The host, for checking the node's certificate (without an IPv6 address's brackets).
    pub fn host(&self) -> &str {
        let host = self.host_port.rsplit_once(':').map_or("", |(host, _)| host);
        host.trim_start_matches('[').trim_end_matches(']')
    }
}

/// Where a node stands in the invalidation stream (`TXSTATUS`).
#[derive(Clone, Copy, Debug)]
pub struct NodePosition {
    /// The last timestamp the node applied (`N`).
    pub applied: Timestamp,
}

/// A node that follows another database's stream (its `-WRONGDB` refusal of `TXDATABASE`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OtherDatabase(String);

/// The key `TXRELEASE` names to learn whether a node knows column sets in tags.
const CAPABILITY_PROBE: &[u8] = b"txcache:capability-probe";

impl NodeLink {
    /// Connects to `address` (`host:port`, or `rediss://host:port` for TLS checked with
    /// `tls`), authenticates when a password is given, names the database it feeds
    /// (`TXDATABASE`: [`OtherDatabase`] when the node follows another, and nothing is sent
    /// to it) and the term's epoch (`TXEPOCH`: the node refuses every older one from then
    /// on). Every later write first checks that the term is still valid.
    pub async fn connect(
        address: &str,
        password: Option<&str>,
        tls: Option<&Arc<ClientConfig>>,
        database: &str,
        term: Arc<Term>,
    ) -> anyhow::Result<Self> {
        let target = NodeAddress::parse(address)?;
        let tcp = tokio::time::timeout(REPLY_TIMEOUT, TcpStream::connect(&target.host_port))
            .await
            .context("timed out")??;
        tcp.set_nodelay(true)?;
        let stream: Box<dyn Duplex> = match (target.tls, tls) {
            (false, _) => Box::new(tcp),
            (true, None) => bail!("{address}: TLS node, but no TLS settings (a bug)"),
            (true, Some(config)) => {
                let handshake = txcache_tls::connect(config, target.host(), tcp);
                let stream = tokio::time::timeout(REPLY_TIMEOUT, handshake)
                    .await
                    .context("TLS handshake timed out")?
                    .with_context(|| {
                        format!("TLS handshake with {address} failed (is --node-tls-ca the CA that signed its --tls-cert, for this host name?)")
                    })?;
                Box::new(stream)
            }
        };
        let mut link = Self {
            stream,
            input: BytesMut::with_capacity(4096),
            output: BytesMut::with_capacity(4096),
            term,
        };
        if let Some(password) = password {
            link.call(&[b"AUTH", password.as_bytes()]).await?;
        }
        match link
            .call_frame(&[b"TXDATABASE", database.as_bytes()])
            .await?
        {
            Frame::Error(refusal) if refusal.starts_with("WRONGDB") => {
                return Err(OtherDatabase(refusal).into());
            }
            // NOAUTH, say (a node given a password the agent lacks): not another database.
            Frame::Error(refusal) => bail!("the node refused TXDATABASE: {refusal}"),
            _ => {}
        }
        let epoch = link.term.epoch().to_string();
        link.call(&[b"TXEPOCH", epoch.as_bytes()])
            .await
            .context("the node refused this agent's epoch")?;
        link.check_column_sets(address).await?;
        Ok(link)
    }

    /// Refuses a node older than tags with column sets (`schema.table#1c:…`): it would file
    /// them under another table and never invalidate what they name. `TXRELEASE` came with
    /// them, so a node that does not know it does not know them either.
    async fn check_column_sets(&mut self, address: &str) -> anyhow::Result<()> {
        match self.call_frame(&[b"TXRELEASE", CAPABILITY_PROBE]).await? {
            Frame::Error(error) => bail!(
                "cache node {address} is older than this agent (it answered TXRELEASE with \
                 {error}): it does not know tags that name columns and would never apply \
                 them; upgrade the cache nodes before the agent and the libraries"
            ),
            _ => Ok(()),
        }
    }

    /// `TXSTATUS`: the node's position.
    pub async fn position(&mut self) -> anyhow::Result<NodePosition> {
        match self.call(&[b"TXSTATUS"]).await? {
            Frame::Array(items) => match items.first() {
                Some(Frame::Integer(applied)) => Ok(NodePosition {
                    applied: Timestamp(u64::try_from(*applied).unwrap_or(0)),
                }),
                other => bail!("unexpected TXSTATUS reply element {other:?}"),
            },
            other => bail!("unexpected TXSTATUS reply {other:?}"),
        }
    }

    /// `TXORIGIN`: the database history the node follows, if one was named.
    pub async fn origin(&mut self) -> anyhow::Result<Option<String>> {
        match self.call(&[b"TXORIGIN"]).await? {
            Frame::Bulk(origin) => Ok(Some(String::from_utf8_lossy(&origin).into_owned())),
            Frame::Null => Ok(None),
            other => bail!("unexpected TXORIGIN reply {other:?}"),
        }
    }

    /// `TXORIGIN history`: the node follows `history` from now on.
    pub async fn set_origin(&mut self, history: &str) -> anyhow::Result<()> {
        self.call(&[b"TXORIGIN", history.as_bytes()]).await?;
        Ok(())
    }

    /// `TXRESET ts commit_time`.
    pub async fn reset(&mut self, ts: Timestamp, time: WallClock) -> anyhow::Result<()> {
        let (ts, time) = (ts.0.to_string(), time.0.to_string());
        self.call(&[b"TXRESET", ts.as_bytes(), time.as_bytes()])
            .await?;
        Ok(())
    }

    /// `TXREWIND ts commit_time`: the node is past the database; it drops its versioned
    /// entries and continues from `ts`.
    pub async fn rewind(&mut self, ts: Timestamp, time: WallClock) -> anyhow::Result<()> {
        let (ts, time) = (ts.0.to_string(), time.0.to_string());
        self.call(&[b"TXREWIND", ts.as_bytes(), time.as_bytes()])
            .await?;
        Ok(())
    }

    /// Sends a batch of stream messages pipelined, then reads every reply.
    pub async fn deliver(&mut self, batch: &[StreamMessage]) -> anyhow::Result<()> {
        self.term.check()?;
        for message in batch {
            message.encode(&mut self.output);
        }
        // A frozen node must not hold its task (and the slot acknowledgement) forever.
        tokio::time::timeout(REPLY_TIMEOUT, self.stream.write_all(&self.output))
            .await
            .context("node stopped reading")??;
        self.output.clear();
        for _ in batch {
            if let Frame::Error(error) = self.read_frame().await? {
                bail!("node refused a stream message: {error}");
            }
        }
        Ok(())
    }

    async fn call(&mut self, parts: &[&[u8]]) -> anyhow::Result<Frame> {
        match self.call_frame(parts).await? {
            Frame::Error(error) => bail!("node answered {error}"),
            frame => Ok(frame),
        }
    }

    /// One command and its reply, an error reply included.
    async fn call_frame(&mut self, parts: &[&[u8]]) -> anyhow::Result<Frame> {
        self.term.check()?;
        encode::request(&mut self.output, parts);
        tokio::time::timeout(REPLY_TIMEOUT, self.stream.write_all(&self.output))
            .await
            .context("node stopped reading")??;
        self.output.clear();
        self.read_frame().await
    }

    async fn read_frame(&mut self) -> anyhow::Result<Frame> {
        loop {
            if let Some(frame) = Frame::parse(&mut self.input, &Limits::default())? {
                return Ok(frame);
            }
            let read = tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_buf(&mut self.input))
                .await
                .context("node did not answer in time")??;
            if read == 0 {
                bail!("node closed the connection");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{NodeAddress, NodeLink, OtherDatabase};
    use crate::term::Term;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A node that answers `TXDATABASE` with `txdatabase`, then `TXEPOCH` and `TXRELEASE`
    /// with one reply each.
    async fn fake_node(txdatabase: &'static [u8], txrelease: &'static [u8]) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0; 4096];
            for reply in [txdatabase, &b"+OK\r\n"[..], txrelease] {
                let _ = socket.read(&mut buffer).await.unwrap();
                socket.write_all(reply).await.unwrap();
            }
            let _ = socket.read(&mut buffer).await;
        });
        address
    }

    #[tokio::test]
    async fn a_node_that_does_not_know_column_sets_is_refused() {
        let old = fake_node(b"+OK\r\n", b"-ERR unknown command 'TXRELEASE'\r\n").await;
        let term = Arc::new(Term::unbounded());
        let error = NodeLink::connect(&old, None, None, "1/5", term.clone())
            .await
            .err()
            .expect("an old node is refused");
        let message = format!("{error:#}");
        assert!(message.contains("older than this agent"), "{message}");
        assert!(message.contains("upgrade the cache nodes"), "{message}");
        let current = fake_node(b"+OK\r\n", b":0\r\n").await;
        assert!(NodeLink::connect(&current, None, None, "1/5", term)
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn a_node_of_another_database_is_left_alone() {
        let refusal = b"-WRONGDB this node follows database 1/6, not 1/5: each database needs cache nodes of its own (restart a node to give it to another database)\r\n";
        let other = fake_node(refusal, b":0\r\n").await;
        let term = Arc::new(Term::unbounded());
        let error = NodeLink::connect(&other, None, None, "1/5", term)
            .await
            .err()
            .expect("a node of another database is refused");
        assert!(error.downcast_ref::<OtherDatabase>().is_some(), "{error:#}");
        assert!(
            format!("{error:#}").contains("follows database 1/6"),
            "{error:#}"
        );
    }

    #[test]
    fn addresses_say_whether_they_are_tls() {
        let parse = |text: &str| {
            NodeAddress::parse(text)
                .ok()
                .map(|a| (a.host().to_owned(), a.tls))
        };
        assert_eq!(parse("127.0.0.1:6380"), Some(("127.0.0.1".into(), false)));
        assert_eq!(parse("redis://cache:6380"), Some(("cache".into(), false)));
        assert_eq!(parse("rediss://[::1]:6380/"), Some(("::1".into(), true)));
        assert_eq!(parse("http://cache:6380"), None);
        assert_eq!(parse("rediss://cache"), None);
    }
}

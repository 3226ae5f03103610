//! A RESP connection from the agent to one cache node.

use crate::message::StreamMessage;
use anyhow::{bail, Context as _};
use bytes::BytesMut;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use txcache_model::{Timestamp, WallClock};
use txcache_resp::{encode, Frame, Limits};

/// How long a node may take to answer before the link is considered dead.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// One open connection to a node.
pub struct NodeLink {
    stream: TcpStream,
    input: BytesMut,
    output: BytesMut,
}

/// Where a node stands in the invalidation stream (`TXSTATUS`).
#[derive(Clone, Copy, Debug)]
pub struct NodePosition {
    /// The last timestamp the node applied (`N`).
    pub applied: Timestamp,
}

impl NodeLink {
    /// Connects to `address` and authenticates when a password is given.
    pub async fn connect(address: &str, password: Option<&str>) -> anyhow::Result<Self> {
        let stream = tokio::time::timeout(REPLY_TIMEOUT, TcpStream::connect(address))
            .await
            .context("timed out")??;
        stream.set_nodelay(true)?;
        let mut link = Self {
            stream,
            input: BytesMut::with_capacity(4096),
            output: BytesMut::with_capacity(4096),
        };
        if let Some(password) = password {
            link.call(&[b"AUTH", password.as_bytes()]).await?;
        }
        Ok(link)
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
        encode::request(&mut self.output, parts);
        tokio::time::timeout(REPLY_TIMEOUT, self.stream.write_all(&self.output))
            .await
            .context("node stopped reading")??;
        self.output.clear();
        match self.read_frame().await? {
            Frame::Error(error) => bail!("node answered {error}"),
            frame => Ok(frame),
        }
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

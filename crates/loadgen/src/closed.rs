//! Closed-loop load and the preload, on tokio: each connection sends a batch of `depth`
//! requests in one write, waits for all their replies, and sends the next. Latency of a
//! request is from its batch's write to the read that completed its reply.

use crate::outcome::Outcome;
use crate::protocol::{Protocol, Reply};
use crate::workload::{Op, Requests, Workload, MAX_CONNECTIONS};
use anyhow::{bail, Context as _};
use bytes::{Buf, BytesMut};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a server may take to answer a batch before the run fails.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Stores per batch while preloading.
const PRELOAD_BATCH: usize = 64;

/// The shape of a closed-loop run.
#[derive(Clone, Copy, Debug)]
pub struct ClosedLoop {
    /// Connections, each with one batch outstanding.
    pub connections: usize,
    /// Requests per batch (1 = no pipelining).
    pub depth: usize,
    /// Load before measuring starts.
    pub warmup: Duration,
    /// How long to measure.
    pub duration: Duration,
    /// At most this many requests in all, warm-up included.
    pub max_requests: u64,
}

/// One client connection with its read buffer.
struct Connection {
    stream: TcpStream,
    input: BytesMut,
    protocol: Protocol,
}

impl Connection {
    async fn open(address: SocketAddr, protocol: Protocol) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(address)
            .await
            .with_context(|| format!("cannot connect to {address}"))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            input: BytesMut::with_capacity(64 * 1024),
            protocol,
        })
    }

    /// Writes `batch` and reads `expected` replies; `on_reply` gets each (its index, kind
    /// and bytes) with the time of the read that completed it.
    async fn round_trip(
        &mut self,
        batch: &[u8],
        expected: usize,
        mut on_reply: impl FnMut(usize, Reply, &[u8], Instant),
    ) -> anyhow::Result<()> {
        self.stream.write_all(batch).await?;
        let mut answered = 0;
        while answered < expected {
            let read = tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_buf(&mut self.input))
                .await
                .context("the server did not reply within 10 s")??;
            if read == 0 {
                bail!("the server closed the connection");
            }
            let now = Instant::now();
            let mut consumed = 0;
            while answered < expected {
                let Some((len, reply)) = self.protocol.parse_reply(&self.input[consumed..])? else {
                    break;
                };
                on_reply(answered, reply, &self.input[consumed..consumed + len], now);
                consumed += len;
                answered += 1;
            }
            self.input.advance(consumed);
        }
        Ok(())
    }
}

/// Removes every key from the server.
pub async fn flush(address: SocketAddr, protocol: Protocol) -> anyhow::Result<()> {
    let mut connection = Connection::open(address, protocol).await?;
    let mut request = BytesMut::new();
    protocol.encode_flush(&mut request);
    let mut refusal = None;
    connection
        .round_trip(&request, 1, |_, reply, bytes, _| {
            refusal = (reply == Reply::Error).then(|| String::from_utf8_lossy(bytes).into_owned());
        })
        .await?;
    match refusal {
        Some(text) => bail!("flush refused: {}", text.trim_end()),
        None => Ok(()),
    }
}

/// Stores every key of `workload` once, over `connections` connections; returns the
/// number of stores. Fails if the server refuses any, naming the first refusal.
pub async fn preload(
    address: SocketAddr,
    workload: Arc<Workload>,
    connections: usize,
    seed: u64,
) -> anyhow::Result<u64> {
    anyhow::ensure!(connections > 0, "preload: no connection");
    let mut tasks = Vec::new();
    for c in 0..connections {
        let connection = Connection::open(address, workload.protocol).await?;
        let requests = Requests::preloading(Arc::clone(&workload), c as u64, seed);
        let keys = (c as u64..workload.keys).step_by(connections);
        tasks.push(tokio::spawn(preload_keys(connection, requests, keys)));
    }
    let (mut errors, mut first_error) = (0, None);
    for task in tasks {
        let (count, text) = task.await??;
        errors += count;
        first_error = first_error.or(text);
    }
    if let Some(text) = first_error {
        bail!(
            "preload: the server refused {errors} stores, e.g. {}",
            text.trim_end()
        );
    }
    Ok(workload.keys)
}

/// Stores `keys` over one connection in batches; returns the refusals and the first one.
async fn preload_keys(
    mut connection: Connection,
    mut requests: Requests,
    keys: impl Iterator<Item = u64>,
) -> anyhow::Result<(u64, Option<String>)> {
    let (mut errors, mut first_error, mut batch) = (0u64, None, BytesMut::new());
    let mut keys = keys.peekable();
    while keys.peek().is_some() {
        batch.clear();
        let count = keys
            .by_ref()
            .take(PRELOAD_BATCH)
            .map(|i| requests.set(i, &mut batch))
            .count();
        let on_reply = |_, reply, bytes: &[u8], _| {
            if reply == Reply::Error {
                errors += 1;
                first_error.get_or_insert_with(|| String::from_utf8_lossy(bytes).into_owned());
            }
        };
        connection.round_trip(&batch, count, on_reply).await?;
    }
    Ok((errors, first_error))
}

/// Runs closed-loop load and returns what every connection counted.
pub async fn run(
    address: SocketAddr,
    workload: Arc<Workload>,
    plan: ClosedLoop,
    seed: u64,
) -> anyhow::Result<Outcome> {
    let allowed = 1..=MAX_CONNECTIONS;
    anyhow::ensure!(
        allowed.contains(&plan.connections),
        "{} connections: 1 to {MAX_CONNECTIONS} are allowed",
        plan.connections
    );
    let mut connections = Vec::new();
    for _ in 0..plan.connections {
        connections.push(Connection::open(address, workload.protocol).await?);
    }
    let warmup_end = Instant::now() + plan.warmup;
    let end = warmup_end + plan.duration;
    let budget = plan.max_requests / plan.connections as u64;
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(c, connection)| {
            let requests = Requests::new(Arc::clone(&workload), c as u64, seed);
            let limits = (warmup_end, end, budget);
            tokio::spawn(drive(connection, requests, plan.depth, limits))
        })
        .collect();
    let mut total = Outcome::default();
    for task in tasks {
        total.merge(&task.await??);
    }
    Ok(total)
}

/// One connection's closed loop until `end` or its request budget.
async fn drive(
    mut connection: Connection,
    mut requests: Requests,
    depth: usize,
    (warmup_end, end, budget): (Instant, Instant, u64),
) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    let (mut batch, mut ops) = (BytesMut::new(), Vec::<Op>::with_capacity(depth));
    while outcome.requests < budget {
        let sent = Instant::now();
        if sent >= end {
            break;
        }
        batch.clear();
        ops.clear();
        ops.extend((0..depth).map(|_| requests.next(&mut batch)));
        let measured = sent >= warmup_end;
        connection
            .round_trip(&batch, depth, |i, reply, _, at| {
                outcome.record(ops[i], reply, at - sent, measured);
            })
            .await?;
    }
    Ok(outcome)
}

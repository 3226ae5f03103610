//! Open-loop load: requests leave at a fixed mean rate (Poisson arrivals) whatever the server
//! does, and each latency is measured from the request's *intended* send time, so a server
//! that stalls is charged for every request that should have been sent meanwhile (no
//! coordinated omission).
//!
//! ```text
//!   pacer (this thread) ──▶ connection i: write ──▶ server ──▶ reader thread i
//!          └── (intended time, op) over a channel, sent before the write ──┘
//! ```
//! Plain threads, not tokio: tokio's timer has millisecond resolution, which alone would add
//! up to a millisecond to the latencies this mode exists to measure. The pacer lowers its
//! timer slack to 1 ns (`/proc/self/timerslack_ns`) so its sleeps end on time.

use crate::outcome::Outcome;
use crate::protocol::Protocol;
use crate::rng::Rng;
use crate::workload::{Op, Requests, Workload, MAX_CONNECTIONS};
use anyhow::{bail, Context as _};
use bytes::BytesMut;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How long readers wait for outstanding replies after the last send.
const DRAIN: Duration = Duration::from_secs(5);

/// The largest reply buffer a reader grows to.
const MAX_BUFFER: usize = 4 << 20;

/// The shape of an open-loop run.
#[derive(Clone, Copy, Debug)]
pub struct OpenLoop {
    /// Connections requests are spread over, round robin.
    pub connections: usize,
    /// Requests per second, over all connections.
    pub rate: f64,
    /// Load before measuring starts.
    pub warmup: Duration,
    /// How long to measure.
    pub duration: Duration,
}

/// One connection's sending side.
struct Lane {
    stream: TcpStream,
    requests: Requests,
    pending: Sender<(Instant, Op)>,
    batch: BytesMut,
}

/// Runs open-loop load and returns what every connection counted.
pub fn run(
    address: SocketAddr,
    workload: Arc<Workload>,
    plan: OpenLoop,
    seed: u64,
) -> anyhow::Result<Outcome> {
    let allowed = 1..=MAX_CONNECTIONS;
    anyhow::ensure!(
        allowed.contains(&plan.connections),
        "{} connections: 1 to {MAX_CONNECTIONS} are allowed",
        plan.connections
    );
    let mut lanes = Vec::new();
    let mut streams = Vec::new();
    for c in 0..plan.connections {
        let stream = TcpStream::connect(address).with_context(|| format!("connect {address}"))?;
        stream.set_nodelay(true)?;
        let reader = stream.try_clone()?;
        reader.set_read_timeout(Some(Duration::from_millis(20)))?;
        let (pending, receiver) = mpsc::channel();
        let requests = Requests::new(Arc::clone(&workload), c as u64, seed);
        let batch = BytesMut::new();
        lanes.push(Lane {
            stream,
            requests,
            pending,
            batch,
        });
        streams.push((reader, receiver));
    }
    let start = Instant::now();
    let warmup_end = start + plan.warmup;
    let readers: Vec<_> = streams
        .into_iter()
        .map(|(stream, receiver)| {
            let protocol = workload.protocol;
            thread::spawn(move || read_replies(stream, receiver, protocol, warmup_end))
        })
        .collect();
    let end = warmup_end + plan.duration;
    let paced = pace(&mut lanes, plan.rate, start, end, seed);
    drop(lanes); // closes the channels: readers finish once their requests are answered
    let mut total = Outcome::default();
    for reader in readers {
        let outcome = reader
            .join()
            .map_err(|_| anyhow::anyhow!("a reader panicked"))??;
        total.merge(&outcome);
    }
    total.send_lag_ns = paced?;
    Ok(total)
}

/// Sends requests at Poisson arrival times from `start` until `end`, round robin over the
/// lanes; several requests due at once on a lane go in one write. Returns the summed lag of
/// actual behind intended send times.
fn pace(
    lanes: &mut [Lane],
    rate: f64,
    start: Instant,
    end: Instant,
    seed: u64,
) -> anyhow::Result<u128> {
    // Best effort: without it sleeps overshoot by up to the default 50 µs slack.
    let _ = std::fs::write("/proc/self/timerslack_ns", "1");
    let mut rng = Rng::new(seed ^ 0x0BE1_100B);
    let mut gap = || Duration::from_secs_f64(-rng.open01().ln() / rate);
    let (mut next, mut lane, mut lag) = (start, 0, 0u128);
    while next < end {
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
            continue;
        }
        while next <= now && next < end {
            let current = &mut lanes[lane];
            let op = current.requests.next(&mut current.batch);
            current
                .pending
                .send((next, op))
                .context("a reader stopped")?;
            lag += (now - next).as_nanos();
            lane = (lane + 1) % lanes.len();
            next += gap();
        }
        for current in lanes.iter_mut().filter(|l| !l.batch.is_empty()) {
            current.stream.write_all(&current.batch)?;
            current.batch.clear();
        }
    }
    Ok(lag)
}

/// Reads one connection's replies, matching each with its request's intended send time,
/// until the pacer is done and every request is answered (or [`DRAIN`] has passed).
fn read_replies(
    mut stream: TcpStream,
    requests: Receiver<(Instant, Op)>,
    protocol: Protocol,
    warmup_end: Instant,
) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    let mut pending = VecDeque::new();
    let (mut buffer, mut filled) = (vec![0u8; 64 * 1024], 0);
    let mut drain_deadline = None;
    loop {
        let paced_all = take_sent(&requests, &mut pending);
        if paced_all {
            if pending.is_empty() {
                return Ok(outcome);
            }
            let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN);
            if Instant::now() > deadline {
                outcome.unanswered = pending.len() as u64;
                return Ok(outcome);
            }
        }
        if filled == buffer.len() {
            if buffer.len() >= MAX_BUFFER {
                bail!("a reply larger than {MAX_BUFFER} bytes");
            }
            buffer.resize(buffer.len() * 2, 0);
        }
        let read = match stream.read(&mut buffer[filled..]) {
            Ok(0) => bail!("the server closed the connection"),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => return Err(e.into()),
        };
        let now = Instant::now();
        filled += read;
        let mut consumed = 0;
        while let Some((len, reply)) = protocol.parse_reply(&buffer[consumed..filled])? {
            consumed += len;
            let (intended, op) = match pending.pop_front() {
                Some(request) => request,
                None => requests.recv().context("a reply to no request")?,
            };
            outcome.record(
                op,
                reply,
                now.saturating_duration_since(intended),
                intended >= warmup_end,
            );
        }
        buffer.copy_within(consumed..filled, 0);
        filled -= consumed;
    }
}

/// Moves every request the pacer has sent into `pending`; true once the pacer is done.
fn take_sent(requests: &Receiver<(Instant, Op)>, pending: &mut VecDeque<(Instant, Op)>) -> bool {
    loop {
        match requests.try_recv() {
            Ok(request) => pending.push_back(request),
            Err(TryRecvError::Empty) => return false,
            Err(TryRecvError::Disconnected) => return true,
        }
    }
}

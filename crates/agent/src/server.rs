//! The agent's RESP endpoint for libraries: pins and read-your-writes.
//!
//! Commands (docs/protocol.md, "Agent commands"): `PINS`, `PIN`,
//! `COMMITLSN xid [timeout_ms [upto]]`,
//! `TAGCOLUMNS`, `BARRIER`, `DATABASE`, `STATUS`, `PING`, `AUTH`, `QUIT`.

use crate::database::DatabaseIdentity;
use crate::fanout::Fanout;
use crate::metrics::{self, StreamStats};
use crate::pincushion::{Pin, Pincushion};
use crate::tracker::{CatalogVersion, CommitWait, StreamTracker};
use bytes::{Bytes, BytesMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use txcache_model::Timestamp;
use txcache_resp::{encode, Limits, RequestDecoder};

/// Longest a `COMMITLSN` may wait.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// What the endpoint serves from.
pub struct Endpoint {
    /// Connections open now.
    pub connections: std::sync::atomic::AtomicUsize,
    /// The pins.
    pub pincushion: Arc<Pincushion>,
    /// The stream's record.
    pub tracker: Arc<StreamTracker>,
    /// Node delivery state.
    pub fanout: Arc<Fanout>,
    /// The stream's positions and events.
    pub stream: Arc<StreamStats>,
    /// When the agent started, for `uptime_in_seconds`.
    pub started: Instant,
    /// The password clients must send, if any.
    pub password: Option<String>,
    /// The database the stream decodes (`DATABASE`).
    pub database: DatabaseIdentity,
}

/// A connection's place under [`MAX_CONNECTIONS`]; released on drop.
struct ConnectionSlot<'a>(&'a Endpoint);

impl Drop for ConnectionSlot<'_> {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Endpoint {
    fn admit(&self) -> Option<ConnectionSlot<'_>> {
        if self.connections.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            self.connections.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionSlot(self))
    }
}

/// Accepts library connections forever.
pub async fn run(listener: TcpListener, endpoint: Arc<Endpoint>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream, Arc::clone(&endpoint)));
            }
            Err(error) => {
                tracing::error!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The most one library request may be: commands here take a few short arguments.
const MAX_REQUEST: usize = 64 * 1024;

/// Most library connections at once.
const MAX_CONNECTIONS: usize = 4096;

async fn serve(mut stream: TcpStream, endpoint: Arc<Endpoint>) {
    let _ = stream.set_nodelay(true);
    let Some(_slot) = endpoint.admit() else {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    };
    let limits = Limits {
        max_bulk_len: 4096,
        max_array_len: 16,
        max_inline_len: 4096,
        max_depth: 1,
    };
    let (mut input, mut output) = (BytesMut::with_capacity(4096), BytesMut::with_capacity(4096));
    let mut decoder = RequestDecoder::new();
    let mut authenticated = endpoint.password.is_none();
    loop {
        loop {
            match decoder.decode(&mut input, &limits) {
                Ok(Some(request)) if request.is_empty() => {}
                Ok(Some(request)) => {
                    if !execute(&request, &endpoint, &mut authenticated, &mut output).await {
                        let _ = stream.write_all(&output).await;
                        return;
                    }
                }
                Ok(None) if input.len() > MAX_REQUEST => {
                    let _ = stream
                        .write_all(b"-ERR Protocol error: request too large\r\n")
                        .await;
                    return;
                }
                Ok(None) => break,
                Err(error) => {
                    error.write_reply(&mut output);
                    let _ = stream.write_all(&output).await;
                    return;
                }
            }
        }
        if !output.is_empty() && stream.write_all(&output).await.is_err() {
            return;
        }
        output.clear();
        match stream.read_buf(&mut input).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Runs one command; false when the connection must close.
async fn execute(
    request: &[Bytes],
    endpoint: &Endpoint,
    authenticated: &mut bool,
    out: &mut BytesMut,
) -> bool {
    let name = request[0].to_ascii_uppercase();
    let args = &request[1..];
    match (name.as_slice(), args) {
        (b"AUTH", [.., password]) => match &endpoint.password {
            Some(expected) if expected.as_bytes() == password.as_ref() => {
                *authenticated = true;
                encode::simple(out, "OK");
            }
            Some(_) => encode::error(out, "WRONGPASS invalid username-password pair"),
            None => encode::error(
                out,
                "ERR AUTH: no password is configured (txcache-agent --password)",
            ),
        },
        (b"QUIT", _) => {
            encode::simple(out, "OK");
            return false;
        }
        _ if !*authenticated => encode::error(out, "NOAUTH Authentication required."),
        (b"PING", []) => encode::simple(out, "PONG"),
        (b"PINS", []) => {
            let pins = endpoint.pincushion.pins();
            encode::array_header(out, pins.len());
            pins.iter().for_each(|pin| encode_pin(out, pin));
        }
        (b"PIN", []) => match endpoint.pincushion.fresh().await {
            Ok(pin) => encode_pin(out, &pin),
            Err(error) => encode::error(out, &format!("ERR PIN: {error:#}")),
        },
        (b"COMMITLSN", [xid, rest @ ..]) if rest.len() <= 2 => {
            commit_lsn(endpoint, xid, rest.first(), rest.get(1), out).await
        }
        (b"STATUS", []) => {
            encode::bulk(out, metrics::status(&metrics::collect(endpoint)).as_bytes())
        }
        (b"TAGCOLUMNS", []) => encode_catalogs(out, &endpoint.tracker.catalogs()),
        (b"BARRIER", []) => {
            let (barrier, decoded) = endpoint.tracker.schema_fence();
            encode::array_header(out, 2);
            encode::integer(out, i64::try_from(barrier.0).unwrap_or(i64::MAX));
            encode::integer(out, i64::try_from(decoded.0).unwrap_or(i64::MAX));
        }
        (b"DATABASE", []) => {
            let database = &endpoint.database;
            encode::array_header(out, 3);
            encode::bulk(out, database.system_identifier.as_bytes());
            encode::integer(out, i64::from(database.oid));
            encode::bulk(out, database.name.as_bytes());
        }
        _ => encode::error(
            out,
            &format!(
                "ERR unknown command or wrong arguments '{}'",
                String::from_utf8_lossy(&name)
            ),
        ),
    }
    true
}

/// `*n` versions, each `*2 :since *tables`, each table `*2 $schema.table *columns`.
fn encode_catalogs(out: &mut BytesMut, versions: &[CatalogVersion]) {
    encode::array_header(out, versions.len());
    for version in versions {
        encode::array_header(out, 2);
        encode::integer(out, i64::try_from(version.since.0).unwrap_or(i64::MAX));
        encode::array_header(out, version.tables.len());
        for (table, columns) in version.tables.iter() {
            encode::array_header(out, 2);
            encode::bulk(out, table.as_bytes());
            encode::array_header(out, columns.len());
            columns
                .iter()
                .for_each(|column| encode::bulk(out, column.as_bytes()));
        }
    }
}

/// `*4 :ts $snapshot_id :current_as_of $snapshot`.
fn encode_pin(out: &mut BytesMut, pin: &Pin) {
    encode::array_header(out, 4);
    encode::integer(out, i64::try_from(pin.ts.0).unwrap_or(i64::MAX));
    encode::bulk(out, pin.snapshot_id.as_bytes());
    encode::integer(out, i64::try_from(pin.current_as_of.0).unwrap_or(i64::MAX));
    encode::bulk(out, pin.snapshot.as_bytes());
}

async fn commit_lsn(
    endpoint: &Endpoint,
    xid: &[u8],
    timeout: Option<&Bytes>,
    upto: Option<&Bytes>,
    out: &mut BytesMut,
) {
    let parse = |bytes: &[u8]| {
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
    };
    let Some(xid) = parse(xid) else {
        return encode::error(
            out,
            "ERR COMMITLSN: xid must be a transaction id (pg_current_xact_id())",
        );
    };
    let wait = timeout
        .map_or(Some(5000), |t| parse(t))
        .map(Duration::from_millis);
    let Some(wait) = wait else {
        return encode::error(out, "ERR COMMITLSN: timeout must be milliseconds");
    };
    let upto = match upto.map(|bytes| parse(bytes)) {
        None => None,
        Some(Some(position)) => Some(Timestamp(position)),
        Some(None) => {
            return encode::error(
                out,
                "ERR COMMITLSN: upto must be a WAL position (an integer)",
            )
        }
    };
    // Logical decoding reports 32-bit xids: compare the low half of the caller's xid8.
    match endpoint.tracker.commit_lsn(xid as u32, wait.min(MAX_WAIT), upto).await {
        CommitWait::Decoded(lsn) => encode::integer(out, i64::try_from(lsn.0).unwrap_or(i64::MAX)),
        CommitWait::Passed => encode::error(out, "NOTDECODED the stream passed the position given without the commit: the transaction changed nothing it decodes"),
        CommitWait::TimedOut => encode::error(out, "TIMEOUT the commit was not decoded in time (did the transaction write to a tracked table?)"),
    }
}

//! The accept loop: admits connections up to `--max-clients`, one task each.

use crate::cmd::Session;
use crate::node::Node;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use txcache_tls::TlsAcceptor;

/// Accepts clients forever (until the runtime shuts down), over TLS when `tls` is given.
pub async fn run(listener: TcpListener, node: Arc<Node>, tls: Option<TlsAcceptor>) {
    let next_id = AtomicU64::new(1);
    let mut spare = Spare::open();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Usually EMFILE: refuse the waiting client with the spare descriptor, back
                // off instead of spinning, and say what to do once a minute, not at every
                // retry (a full table would otherwise log 20 lines a second).
                let refused = out_of_files(&error) && spare.refuse_one(&listener).await;
                if let Some(failures_not_logged) = node.logs.accept_failed.admit() {
                    tracing::error!(%error, failures_not_logged, max_clients = node.config.max_clients, refused,
                        "accept failed: new clients are refused or wait (out of open files? raise the limit: ulimit -n, or LimitNOFILE= under systemd; or lower --max-clients)");
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(admit(stream, peer, Arc::clone(&node), id, tls.clone()));
    }
}

/// Whether `error` says the process or the system is out of file descriptors.
fn out_of_files(error: &std::io::Error) -> bool {
    let code = error.raw_os_error();
    code == Some(rustix::io::Errno::MFILE.raw_os_error())
        || code == Some(rustix::io::Errno::NFILE.raw_os_error())
}

/// A descriptor held in reserve: out of descriptors, the accept loop gives it up to take
/// the waiting client and refuse it, so that the client hears "no" at once instead of
/// waiting in the kernel's queue (the libev and nginx answer to EMFILE).
struct Spare(Option<std::fs::File>);

impl Spare {
    fn open() -> Self {
        Spare(std::fs::File::open("/dev/null").ok())
    }

    /// Refuses one waiting client; whether one was. The spare is opened again after.
    async fn refuse_one(&mut self, listener: &TcpListener) -> bool {
        if self.0.take().is_none() {
            *self = Spare::open();
            return false;
        }
        // A client waits (accept failed on it), but do not stall the loop if it left.
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(100), listener.accept());
        let refused = match waiting.await {
            Ok(Ok((mut stream, _))) => {
                let _ = stream
                    .write_all(
                        b"-ERR max number of clients reached (the node is out of open files)\r\n",
                    )
                    .await;
                true
            }
            Ok(Err(_)) | Err(_) => false,
        };
        *self = Spare::open();
        refused
    }
}

async fn admit(
    mut stream: TcpStream,
    peer: SocketAddr,
    node: Arc<Node>,
    id: u64,
    tls: Option<TlsAcceptor>,
) {
    let _ = stream.set_nodelay(true);
    let Some(_slot) = node.metrics.open_connection(node.config.max_clients) else {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        if let Some(refusals_not_logged) = node.logs.refused.admit() {
            tracing::warn!(
                %peer,
                max_clients = node.config.max_clients,
                refusals_not_logged,
                "refused a connection at --max-clients: raise --max-clients (and the open-file \
                 limit with it), or find the client holding many connections; at most one such \
                 line a minute"
            );
        }
        return;
    };
    let authenticated = node.config.password.is_none();
    let session = Session {
        id,
        peer: Some(peer),
        authenticated,
        streams: authenticated && node.config.stream_password.is_none(),
        ..Session::default()
    };
    let served = match tls {
        None => crate::connection::serve(stream, &node, session).await,
        Some(acceptor) => match txcache_tls::handshake(&acceptor, stream).await {
            Ok(stream) => crate::connection::serve(stream, &node, session).await,
            Err(error) => {
                if let Some(failures_not_logged) = node.logs.tls_failed.admit() {
                    tracing::info!(client = id, %peer, %error, failures_not_logged,
                        "TLS handshake failed (a client without TLS, or one that does not trust --tls-cert?); at most one such line a minute");
                }
                return;
            }
        },
    };
    if let Err(error) = served {
        tracing::debug!(client = id, %peer, %error, "connection ended with an error");
    }
}

//! The accept loop: admits connections up to `--max-clients`, one task each.

use crate::cmd::Session;
use crate::node::Node;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use txcache_tls::TlsAcceptor;

/// Accepts clients forever (until the runtime shuts down), over TLS when `tls` is given.
pub async fn run(listener: TcpListener, node: Arc<Node>, tls: Option<TlsAcceptor>) {
    let next_id = AtomicU64::new(1);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Usually EMFILE: back off instead of spinning, and say what to do.
                tracing::error!(%error, "accept failed (raise the open-file limit with `ulimit -n`?)");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(admit(stream, Arc::clone(&node), id, tls.clone()));
    }
}

async fn admit(mut stream: TcpStream, node: Arc<Node>, id: u64, tls: Option<TlsAcceptor>) {
    let _ = stream.set_nodelay(true);
    let Some(_slot) = node.metrics.open_connection(node.config.max_clients) else {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        tracing::warn!(
            max_clients = node.config.max_clients,
            "refused a connection: raise --max-clients"
        );
        return;
    };
    let authenticated = node.config.password.is_none();
    let session = Session {
        id,
        authenticated,
        streams: authenticated && node.config.stream_password.is_none(),
        ..Session::default()
    };
    let served = match tls {
        None => crate::connection::serve(stream, &node, session).await,
        Some(acceptor) => match txcache_tls::handshake(&acceptor, stream).await {
            Ok(stream) => crate::connection::serve(stream, &node, session).await,
            Err(error) => {
                tracing::info!(client = id, %error, "TLS handshake failed (a client without TLS, or one that does not trust --tls-cert?)");
                return;
            }
        },
    };
    if let Err(error) = served {
        tracing::debug!(client = id, %error, "connection ended with an error");
    }
}

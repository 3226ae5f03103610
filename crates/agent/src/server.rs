//! The agent's RESP endpoint for libraries: accepts connections, reads requests, writes
//! replies. What each command does is `cmd/`'s; this is the only code that touches a
//! library's socket.

use crate::cmd::{self, Endpoint, Session};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use txcache_resp::{Limits, RequestDecoder};
use txcache_tls::{Duplex, TlsAcceptor};

/// The most one library request may be: commands here take a few short arguments.
const MAX_REQUEST: usize = 64 * 1024;

/// Most library connections at once.
const MAX_CONNECTIONS: usize = 4096;

/// With `--password`: how long a connection may stay without a successful `AUTH` before it
/// is closed, so that connections that never authenticate cannot hold every slot of
/// [`MAX_CONNECTIONS`] and lock the libraries out.
pub const AUTH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Limits on what a request may claim: a few short arguments, no nesting.
const LIMITS: Limits = Limits {
    max_bulk_len: 4096,
    max_array_len: 16,
    max_inline_len: 4096,
    max_depth: 1,
};

/// A connection's place under [`MAX_CONNECTIONS`] in the count of open ones (the
/// `connected_clients` metric); released on drop.
struct ConnectionSlot<'a>(&'a AtomicUsize);

impl<'a> ConnectionSlot<'a> {
    fn admit(open: &'a AtomicUsize) -> Option<Self> {
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Self(open))
    }
}

impl Drop for ConnectionSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts library connections forever, counting the open ones in `clients`; over TLS
/// when `tls` is given.
pub async fn run(
    listener: TcpListener,
    endpoint: Arc<Endpoint>,
    clients: Arc<AtomicUsize>,
    tls: Option<TlsAcceptor>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let (endpoint, clients) = (Arc::clone(&endpoint), Arc::clone(&clients));
                tokio::spawn(admit(stream, peer, endpoint, clients, tls.clone()));
            }
            Err(error) => {
                tracing::error!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn admit(
    mut stream: TcpStream,
    peer: SocketAddr,
    endpoint: Arc<Endpoint>,
    clients: Arc<AtomicUsize>,
    tls: Option<TlsAcceptor>,
) {
    let _ = stream.set_nodelay(true);
    let Some(_slot) = ConnectionSlot::admit(&clients) else {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    };
    match tls {
        None => serve(stream, &endpoint, Some(peer)).await,
        Some(acceptor) => match txcache_tls::handshake(&acceptor, stream).await {
            Ok(stream) => serve(stream, &endpoint, Some(peer)).await,
            Err(error) => {
                tracing::info!(%error, "TLS handshake failed (a library without TLS, or one that does not trust --tls-cert?)")
            }
        },
    }
}

/// Serves one library at `peer` (its address, for the log) until it closes or must go.
async fn serve(mut stream: impl Duplex, endpoint: &Arc<Endpoint>, peer: Option<SocketAddr>) {
    let (mut input, mut output) = (BytesMut::with_capacity(4096), BytesMut::with_capacity(4096));
    let mut decoder = RequestDecoder::new();
    let mut session = Session::new(endpoint);
    session.peer = peer;
    let auth_deadline = tokio::time::Instant::now() + AUTH_DEADLINE;
    loop {
        loop {
            match decoder.decode(&mut input, &LIMITS) {
                Ok(Some(request)) if request.is_empty() => {}
                Ok(Some(request)) => {
                    cmd::execute(&request, endpoint, &mut session, &mut output).await;
                    if session.closing {
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
        let read = stream.read_buf(&mut input);
        let read = if session.authenticated {
            read.await
        } else if let Ok(read) = tokio::time::timeout_at(auth_deadline, read).await {
            read
        } else {
            tracing::info!("closing a library connection that did not authenticate within 10 s");
            return;
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{serve, AUTH_DEADLINE};
    use crate::cmd::{Endpoint, Role};
    use crate::term::Holder;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn endpoint() -> Arc<Endpoint> {
        Arc::new(Endpoint {
            password: Some("pw".to_owned()),
            role: Role::Standby(Arc::new(Holder::default())),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_never_authenticates_is_closed_at_the_deadline() {
        let (mut client, server) = tokio::io::duplex(4096);
        let served = tokio::spawn(async move { serve(server, &endpoint(), None).await });
        tokio::time::timeout(AUTH_DEADLINE + Duration::from_secs(1), served)
            .await
            .expect("closed at the deadline")
            .unwrap();
        assert_eq!(
            client.read(&mut [0; 16]).await.unwrap(),
            0,
            "the connection ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_authenticated_connection_stays_open() {
        let (mut client, server) = tokio::io::duplex(4096);
        let served = tokio::spawn(async move { serve(server, &endpoint(), None).await });
        client.write_all(b"AUTH pw\r\n").await.unwrap();
        let mut reply = [0; 5];
        client.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"+OK\r\n");
        let waited = tokio::time::timeout(AUTH_DEADLINE * 3, served).await;
        assert!(waited.is_err(), "still served past the deadline");
    }

    #[tokio::test]
    async fn a_wrong_password_is_refused_and_counted() {
        let before = crate::auth_failures::count();
        let (mut client, server) = tokio::io::duplex(4096);
        let peer = "192.0.2.1:4000".parse().ok();
        tokio::spawn(async move { serve(server, &endpoint(), peer).await });
        client.write_all(b"AUTH nope\r\n").await.unwrap();
        let mut reply = [0; 10];
        client.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"-WRONGPASS");
        assert!(crate::auth_failures::count() > before);
    }
}

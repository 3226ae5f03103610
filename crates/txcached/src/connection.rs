//! One client connection: the only code that reads from or writes to a client socket.
//!
//! Each read is decoded into as many complete requests as it holds; their replies are
//! gathered in one buffer and written with one `write_all`, so a pipelined batch costs one
//! write system call however many requests it carried. A request is answered while it is
//! still in the read buffer (its arguments are slices of it), then the buffer moves past it.

use crate::cmd::{self, Context, Session};
use crate::node::Node;
use bytes::{Buf, BytesMut};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use txcache_resp::{Limits, ProtocolError, RequestDecoder};
use txcache_tls::Duplex;

/// Bytes read per system call, and the buffer size kept between batches.
const READ_CHUNK: usize = 16 * 1024;

/// A reply buffer that grew past this is dropped after the write, returning the memory.
const KEEP_OUTPUT_CAPACITY: usize = 1 << 20;

/// Replies gathered before they are written, even if more requests are waiting: a small
/// pipeline of GETs of large values must not make the node hold all their replies at once.
const OUTPUT_HIGH_WATER: usize = 1 << 20;

/// What answering the buffered requests left to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Every complete request was answered: read more.
    Read,
    /// The reply buffer is full: write it, then keep answering what is buffered.
    Flush,
    /// Close the connection after writing the replies.
    Close,
}

/// Serves one client until it disconnects, sends `QUIT`, or breaks the protocol.
pub async fn serve(mut stream: impl Duplex, node: &Node, mut session: Session) -> io::Result<()> {
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    // Resumes a partial request where it stopped: a request trickling in costs linear work.
    let mut decoder = RequestDecoder::new();
    let auth_deadline = Instant::now() + node.config.auth_timeout;
    loop {
        let next = answer_buffered(&mut decoder, &mut input, &mut output, node, &mut session);
        if !output.is_empty() {
            stream.write_all(&output).await?;
            output.clear();
            if output.capacity() > KEEP_OUTPUT_CAPACITY {
                output = BytesMut::with_capacity(READ_CHUNK);
            }
        }
        match next {
            Next::Close => return Ok(()),
            Next::Flush => continue,
            Next::Read => {}
        }
        if input.capacity() - input.len() < READ_CHUNK / 4 {
            input.reserve(READ_CHUNK);
        }
        let read = stream.read_buf(&mut input);
        let read = if session.authenticated {
            read.await?
        } else if let Ok(read) = tokio::time::timeout_at(auth_deadline, read).await {
            read?
        } else {
            tracing::info!(client = session.id, peer = %session.peer_text(), timeout = ?node.config.auth_timeout,
                "closing a connection that did not authenticate in time (--auth-timeout)");
            return Ok(());
        };
        if read == 0 {
            return Ok(());
        }
    }
}

/// Answers the complete requests in `input` until the reply buffer is full.
fn answer_buffered(
    decoder: &mut RequestDecoder,
    input: &mut BytesMut,
    output: &mut BytesMut,
    node: &Node,
    session: &mut Session,
) -> Next {
    while output.len() < OUTPUT_HIGH_WATER {
        // Read per request: an AUTH earlier in this batch lifts the limits for the next one.
        let limits = limits_for(node, session);
        match decoder.peek(input, &limits) {
            Ok(Some(request)) => {
                let len = request.len();
                let mut context = Context::new(node, session);
                cmd::execute(request.args(), &mut context, output);
                input.advance(len);
                if session.closing {
                    return Next::Close;
                }
            }
            Ok(None) if input.len() > max_partial_request(&limits) => {
                return refuse(&ProtocolError::TooBigRequest, output, node, session);
            }
            Ok(None) => return Next::Read,
            // The framing is lost: nothing after this point can be trusted to be a request.
            Err(error) => return refuse(&error, output, node, session),
        }
    }
    Next::Flush
}

/// The limits for the session's next request: Redis's small ones until a session that must
/// authenticate has, so that a client without the password cannot make the node buffer a
/// request of up to the bulk limit (hundreds of MiB) until `--auth-timeout`.
fn limits_for(node: &Node, session: &Session) -> Limits {
    if session.authenticated {
        node.limits()
    } else {
        Limits::UNAUTHENTICATED
    }
}

/// The most a client may buffer of one request: its largest argument plus the rest of it
/// (1 MiB, or all its elements at their largest when that is less). Every argument is already
/// bounded; this bounds their sum, like Redis's query buffer limit.
fn max_partial_request(limits: &Limits) -> usize {
    let whole = limits
        .max_array_len
        .saturating_mul(limits.max_bulk_len.saturating_add(32))
        .max(limits.max_inline_len);
    limits.max_bulk_len.saturating_add(1 << 20).min(whole)
}

/// Replies with the protocol error; the connection must close.
fn refuse(error: &ProtocolError, output: &mut BytesMut, node: &Node, session: &Session) -> Next {
    node.metrics.count_protocol_error();
    tracing::debug!(client = session.id, peer = %session.peer_text(), %error, "closing connection");
    if session.authenticated {
        error.write_reply(output);
    } else {
        // Say that the small limit is the one before AUTH, or the client's author would look
        // for a bug in the bulk limit.
        let message = format!("ERR {error} before AUTH (unauthenticated clients' limit)");
        txcache_resp::encode::error(output, &message);
    }
    Next::Close
}

#[cfg(test)]
mod tests {
    use super::serve;
    use crate::cmd::Session;
    use crate::config::Config;
    use crate::node::Node;
    use clap::Parser;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn node_with_password() -> Arc<Node> {
        let args = ["txcached", "--password", "pw", "--auth-timeout", "5s"];
        Arc::new(Node::new(Config::parse_from(args)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_never_authenticates_is_closed_at_the_timeout() {
        let node = node_with_password();
        let (mut client, server) = tokio::io::duplex(4096);
        let served = tokio::spawn(async move { serve(server, &node, Session::default()).await });
        client.write_all(b"PING\r\n").await.unwrap(); // refused: -NOAUTH, the clock runs on
        let waited = tokio::time::timeout(Duration::from_secs(6), served).await;
        waited.expect("closed at the timeout").unwrap().unwrap();
        let mut replies = Vec::new();
        client.read_to_end(&mut replies).await.unwrap();
        assert!(replies.starts_with(b"-NOAUTH"), "{replies:?}");
    }

    #[tokio::test]
    async fn before_auth_a_large_bulk_is_refused_at_once_naming_the_limit() {
        let node = node_with_password();
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(async move { serve(server, &node, Session::default()).await });
        client
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$60000000\r\n")
            .await
            .unwrap();
        served.await.unwrap().unwrap();
        let mut reply = String::new();
        client.read_to_string(&mut reply).await.unwrap();
        assert_eq!(
            reply,
            "-ERR Protocol error: bulk length 60000000 exceeds the limit of 16384 before AUTH \
             (unauthenticated clients' limit)\r\n"
        );
    }

    #[tokio::test]
    async fn auth_lifts_the_limits_for_the_next_request_of_the_same_batch() {
        let node = node_with_password();
        let (mut client, server) = tokio::io::duplex(256 * 1024);
        tokio::spawn(async move { serve(server, &node, Session::default()).await });
        let value = "v".repeat(100_000);
        let mut batch = b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n".to_vec();
        batch.extend(
            format!(
                "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n{value}\r\n",
                value.len()
            )
            .bytes(),
        );
        client.write_all(&batch).await.unwrap();
        let mut replies = [0; 10];
        client.read_exact(&mut replies).await.unwrap();
        assert_eq!(&replies, b"+OK\r\n+OK\r\n");
    }

    #[tokio::test]
    async fn before_auth_a_request_of_many_elements_is_refused() {
        let node = node_with_password();
        let (mut client, server) = tokio::io::duplex(4096);
        let served = tokio::spawn(async move { serve(server, &node, Session::default()).await });
        client.write_all(b"*11\r\n").await.unwrap();
        served.await.unwrap().unwrap();
        let mut reply = String::new();
        client.read_to_string(&mut reply).await.unwrap();
        assert!(
            reply.starts_with(
                "-ERR Protocol error: multibulk length 11 exceeds the limit of 10 before AUTH"
            ),
            "{reply}"
        );
    }

    #[test]
    fn a_partial_request_is_bounded_by_its_elements_before_auth() {
        use txcache_resp::Limits;
        let before_auth = super::max_partial_request(&Limits::UNAUTHENTICATED);
        assert!(before_auth < 200 * 1024, "{before_auth}");
        let after = super::max_partial_request(&Limits::DEFAULT);
        assert_eq!(after, (512 << 20) + (1 << 20));
    }

    #[tokio::test(start_paused = true)]
    async fn an_authenticated_connection_stays_open() {
        let node = node_with_password();
        let (mut client, server) = tokio::io::duplex(4096);
        let served = tokio::spawn(async move { serve(server, &node, Session::default()).await });
        client.write_all(b"AUTH pw\r\n").await.unwrap();
        let mut reply = [0; 5];
        client.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"+OK\r\n");
        assert!(tokio::time::timeout(Duration::from_secs(30), served)
            .await
            .is_err());
    }
}

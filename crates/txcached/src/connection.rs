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
use txcache_resp::{ProtocolError, RequestDecoder};
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
            tracing::info!(client = session.id, timeout = ?node.config.auth_timeout,
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
    let limits = node.limits();
    while output.len() < OUTPUT_HIGH_WATER {
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

/// The most a client may buffer of one request: its largest argument plus the rest of it.
/// Every argument is already bounded; this bounds their sum, like Redis's query buffer limit.
fn max_partial_request(limits: &txcache_resp::Limits) -> usize {
    limits.max_bulk_len.saturating_add(1 << 20)
}

/// Replies with the protocol error; the connection must close.
fn refuse(error: &ProtocolError, output: &mut BytesMut, node: &Node, session: &Session) -> Next {
    node.metrics.count_protocol_error();
    tracing::debug!(client = session.id, %error, "closing connection");
    error.write_reply(output);
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

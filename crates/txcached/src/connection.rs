//! One client connection: the only code that reads from or writes to a client socket.
//!
//! Each read is decoded into as many complete requests as it holds; their replies are
//! gathered in one buffer and written with one `write_all`, so a pipelined batch costs one
//! write system call however many requests it carried.

use crate::cmd::{self, Context, Session};
use crate::node::Node;
use bytes::BytesMut;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use txcache_resp::{ProtocolError, RequestDecoder};

/// Bytes read per system call, and the buffer size kept between batches.
const READ_CHUNK: usize = 16 * 1024;

/// A reply buffer that grew past this is dropped after the write, returning the memory.
const KEEP_OUTPUT_CAPACITY: usize = 1 << 20;

/// Serves one client until it disconnects, sends `QUIT`, or breaks the protocol.
pub async fn serve(mut stream: TcpStream, node: &Node, mut session: Session) -> io::Result<()> {
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    // Resumes a partial request where it stopped: a request trickling in costs linear work.
    let mut decoder = RequestDecoder::new();
    loop {
        let keep_going = answer_buffered(&mut decoder, &mut input, &mut output, node, &mut session);
        if !output.is_empty() {
            stream.write_all(&output).await?;
            output.clear();
            if output.capacity() > KEEP_OUTPUT_CAPACITY {
                output = BytesMut::with_capacity(READ_CHUNK);
            }
        }
        if !keep_going {
            return Ok(());
        }
        if input.capacity() - input.len() < READ_CHUNK / 4 {
            input.reserve(READ_CHUNK);
        }
        if stream.read_buf(&mut input).await? == 0 {
            return Ok(());
        }
    }
}

/// Answers every complete request in `input`; false when the connection must close.
fn answer_buffered(
    decoder: &mut RequestDecoder,
    input: &mut BytesMut,
    output: &mut BytesMut,
    node: &Node,
    session: &mut Session,
) -> bool {
    let limits = node.limits();
    loop {
        match decoder.decode(input, &limits) {
            Ok(Some(request)) => {
                let mut context = Context { node, session };
                cmd::execute(request, &mut context, output);
                if session.closing {
                    return false;
                }
            }
            Ok(None) if input.len() > max_partial_request(&limits) => {
                return refuse(&ProtocolError::TooBigRequest, output, node, session);
            }
            Ok(None) => return true,
            // The framing is lost: nothing after this point can be trusted to be a request.
            Err(error) => return refuse(&error, output, node, session),
        }
    }
}

/// The most a client may buffer of one request: its largest argument plus the rest of it.
/// Every argument is already bounded; this bounds their sum, like Redis's query buffer limit.
fn max_partial_request(limits: &txcache_resp::Limits) -> usize {
    limits.max_bulk_len.saturating_add(1 << 20)
}

/// Replies with the protocol error and reports that the connection must close.
fn refuse(error: &ProtocolError, output: &mut BytesMut, node: &Node, session: &Session) -> bool {
    node.metrics.count_protocol_error();
    tracing::debug!(client = session.id, %error, "closing connection");
    error.write_reply(output);
    false
}

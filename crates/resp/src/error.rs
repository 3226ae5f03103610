//! The error returned for input that violates the protocol or a [`Limits`](crate::Limits).

use bytes::BytesMut;

/// Malformed or over-limit input. The messages follow Redis's wording; a server
/// replies `-ERR <message>` (see [`ProtocolError::write_reply`]) and closes the
/// connection, since the stream can no longer be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A `$` length that is not a canonical integer, or negative where no null is allowed.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// A `*` count that is not a canonical integer, or negative other than `-1`.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// A bulk string longer than [`Limits::max_bulk_len`](crate::Limits::max_bulk_len).
    #[error("Protocol error: bulk length {len} exceeds the limit of {limit}")]
    BulkTooLong {
        /// The length the peer claimed.
        len: i64,
        /// The configured limit.
        limit: usize,
    },
    /// An array with more elements than [`Limits::max_array_len`](crate::Limits::max_array_len).
    #[error("Protocol error: multibulk length {len} exceeds the limit of {limit}")]
    MultibulkTooLong {
        /// The count the peer claimed.
        len: i64,
        /// The configured limit.
        limit: usize,
    },
    /// A specific type byte was required (e.g. `$` for each element of a request).
    #[error("Protocol error: expected '{}', got '{}'", .expected.escape_ascii(), .got.escape_ascii())]
    UnexpectedByte {
        /// The byte the protocol requires here.
        expected: u8,
        /// The byte the peer sent.
        got: u8,
    },
    /// A reply frame starting with none of `+ - : $ *`.
    #[error("Protocol error: invalid frame type '{}'", .0.escape_ascii())]
    InvalidFrameType(u8),
    /// Bulk data not followed by `\r\n`.
    #[error("Protocol error: expected CRLF after bulk data")]
    MissingCrlf,
    /// A `:` integer reply that is not a canonical `i64`.
    #[error("Protocol error: invalid integer")]
    InvalidInteger,
    /// An inline request longer than [`Limits::max_inline_len`](crate::Limits::max_inline_len).
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    /// A simple string or error line longer than [`Limits::max_inline_len`](crate::Limits::max_inline_len).
    #[error("Protocol error: line longer than {limit} bytes")]
    LineTooLong {
        /// The configured limit.
        limit: usize,
    },
    /// An inline request with an unterminated quote, or a closing quote not
    /// followed by a space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// Arrays nested deeper than [`Limits::max_depth`](crate::Limits::max_depth).
    #[error("Protocol error: nesting deeper than {limit} levels")]
    TooDeep {
        /// The configured limit.
        limit: usize,
    },
    /// A partial request larger than its receiver will buffer (each argument is within its
    /// limit, but together they exceed what the server accepts in one request).
    #[error("Protocol error: request larger than the server accepts")]
    TooBigRequest,
    /// Input ended inside a frame that an earlier pass found complete; only happens
    /// when a [`RequestDecoder`](crate::RequestDecoder) is fed a different buffer
    /// than the one it was resuming.
    #[error("Protocol error: frame ended unexpectedly")]
    Truncated,
}

impl ProtocolError {
    /// Appends the reply a Redis server sends for this error:
    /// `-ERR Protocol error: ...\r\n`.
    pub fn write_reply(&self, out: &mut BytesMut) {
        crate::encode::error(out, &format!("ERR {self}"));
    }
}

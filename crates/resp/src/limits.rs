//! Limits on what a peer may claim before the codec refuses the input.

/// Upper bounds checked against every length a peer claims, before anything is
/// allocated or buffered for it.
///
/// A violation is a [`ProtocolError`](crate::ProtocolError); the peer is misbehaving
/// (or hostile) and the connection should be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string accepted (`$<len>`). Default: 512 MiB, Redis's
    /// `proto-max-bulk-len`.
    pub max_bulk_len: usize,
    /// Most elements in one array or multibulk request (`*<count>`). Default:
    /// 1_048_576 (1 Mi), Redis's multibulk limit for authenticated clients.
    pub max_array_len: usize,
    /// Longest line without a length prefix: an inline request, or a simple string
    /// or error line in a reply frame (excluding the line terminator). Default:
    /// 64 KiB, Redis's `PROTO_INLINE_MAX_SIZE`.
    pub max_inline_len: usize,
    /// Deepest nesting of arrays in a reply frame; a flat array has depth 1, so `0`
    /// forbids arrays altogether. Also bounds the recursion of
    /// [`Frame::check`](crate::Frame::check). Default: 32.
    pub max_depth: usize,
}

impl Limits {
    /// The default limits as a constant (see the field docs for each value).
    pub const DEFAULT: Self = Self {
        max_bulk_len: 512 * 1024 * 1024,
        max_array_len: 1_048_576,
        max_inline_len: 64 * 1024,
        max_depth: 32,
    };

    /// The limits for a client that must authenticate and has not yet, as Redis applies
    /// them: at most 10 elements and 16 KiB per bulk string (and per inline line), enough for
    /// any `AUTH` or `HELLO … AUTH … SETNAME …`, so that a client without the password cannot
    /// make a server buffer more than about 160 KiB of one request.
    pub const UNAUTHENTICATED: Self = Self {
        max_bulk_len: 16 * 1024,
        max_array_len: 10,
        max_inline_len: 16 * 1024,
        max_depth: 32,
    };
}

impl Default for Limits {
    /// [`Limits::DEFAULT`]: 512 MiB bulk strings, 1 Mi array elements, 64 KiB
    /// inline lines, 32 levels of nesting.
    fn default() -> Self {
        Self::DEFAULT
    }
}

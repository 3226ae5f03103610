//! What can be wrong with a pgoutput message, and where.

/// A pgoutput message that could not be parsed: what was malformed and at which byte offset
/// of the message (0 is the message-type byte).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed pgoutput message at byte {offset}: {kind}")]
pub struct PgOutputError {
    /// Byte offset into the message where the malformed field starts.
    pub offset: usize,
    /// What was malformed.
    pub kind: PgOutputErrorKind,
}

/// The ways a pgoutput message can be malformed. `what` names the field being read, as the
/// PostgreSQL documentation calls it, so that a log line points at the culprit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PgOutputErrorKind {
    /// The message has no bytes at all, not even its type.
    #[error("empty message")]
    Empty,
    /// The first byte names no protocol-version-1 message.
    #[error("unknown message type byte 0x{0:02x}")]
    UnknownMessageType(u8),
    /// The message ends before a field does.
    #[error("{what} needs {needed} bytes but only {left} remain")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the message.
        left: usize,
    },
    /// A string field has no terminating NUL byte before the end of the message.
    #[error("{what} is not NUL-terminated")]
    UnterminatedString {
        /// The field being read.
        what: &'static str,
    },
    /// A string field is not UTF-8.
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 {
        /// The field being read.
        what: &'static str,
    },
    /// A marker byte has a value the protocol does not allow there.
    #[error("expected {what}, found byte 0x{found:02x}")]
    UnexpectedByte {
        /// What was expected.
        what: &'static str,
        /// The byte found.
        found: u8,
    },
    /// A length or count is negative.
    #[error("{what} is negative ({value})")]
    Negative {
        /// The field being read.
        what: &'static str,
        /// The value read.
        value: i64,
    },
    /// A count claims more items than the rest of the message could hold, so it is refused
    /// before anything is allocated for it.
    #[error("{what} of {count} cannot fit in the {left} bytes that remain")]
    CountTooLarge {
        /// The field being read.
        what: &'static str,
        /// The count claimed.
        count: usize,
        /// Bytes left in the message.
        left: usize,
    },
    /// Bytes remain after a complete message: version 1 messages have no optional tail, so
    /// this is a framing or version mismatch.
    #[error("{left} unexpected bytes after the end of the message")]
    TrailingBytes {
        /// Bytes left over.
        left: usize,
    },
}

//! Errors a command reports to its client; each renders as one RESP error reply.

use txcache_resp::encode;
use txcache_store::StoreError;

/// Why a command was refused. The connection stays open after any of these.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command name is not one the node knows.
    #[error("ERR unknown command '{0}'")]
    Unknown(String),
    /// Too few or too many arguments.
    #[error("ERR wrong number of arguments for '{}' command", .0.to_ascii_lowercase())]
    WrongArity(&'static str),
    /// Arguments left over, or an unsupported option.
    #[error("ERR syntax error in '{}' command", .0.to_ascii_lowercase())]
    Syntax(&'static str),
    /// An argument of the wrong form.
    #[error("ERR {command}: {message}")]
    InvalidArgument {
        /// The command refused.
        command: &'static str,
        /// What was wrong, naming the argument.
        message: String,
    },
    /// A plain command on a versioned key, or the reverse.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// A value that can never fit in the node's memory.
    #[error("TOOLARGE value of {size} bytes can never fit: each of the node's shards holds at most {limit} bytes (raise --max-memory)")]
    TooLarge {
        /// The value's accounted size.
        size: usize,
        /// One shard's memory limit.
        limit: usize,
    },
    /// A reply of several values that would exceed the node's reply limit.
    #[error("ERR the reply would exceed {limit} bytes (the node's bulk limit, which follows --max-memory): ask for fewer keys at once")]
    ReplyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A password is configured and this connection has not authenticated.
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    /// `HELLO` asked for a protocol other than RESP2 and RESP3.
    #[error("NOPROTO unsupported protocol version")]
    NoProtocol,
    /// An option `HELLO` does not know, or one missing its arguments.
    #[error("ERR Syntax error in HELLO option '{0}'")]
    HelloOption(String),
    /// An error Redis words this way, with no argument to name (`ERR <message>`).
    #[error("ERR {0}")]
    Redis(&'static str),
    /// An integer argument, or a value `INCRBY` reads, that is not a 64-bit integer.
    #[error("ERR value is not an integer or out of range")]
    NotAnInteger,
    /// `INCRBY` and friends beyond the 64-bit range.
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    /// An expire time that is not positive (where it must be) or overflows.
    #[error("ERR invalid expire time in '{}' command", .0.to_ascii_lowercase())]
    InvalidExpireTime(&'static str),
    /// An option the command does not know (Redis's wording for `EXPIRE`).
    #[error("ERR Unsupported option {0}")]
    UnsupportedOption(String),
    /// A command that cannot be queued in a transaction.
    #[error("ERR Command not allowed inside a transaction ({0} must be sent outside MULTI)")]
    NotInTransaction(&'static str),
    /// `MULTI` inside a transaction.
    #[error("ERR MULTI calls can not be nested")]
    MultiNested,
    /// `EXEC` without `MULTI`.
    #[error("ERR EXEC without MULTI")]
    ExecWithoutMulti,
    /// `DISCARD` without `MULTI`.
    #[error("ERR DISCARD without MULTI")]
    DiscardWithoutMulti,
    /// `EXEC` of a transaction in which queuing a command failed.
    #[error("EXECABORT Transaction discarded because of previous errors.")]
    ExecAbort,
    /// `WATCH` inside a transaction.
    #[error("ERR WATCH inside MULTI is not allowed")]
    WatchInsideMulti,
    /// `WATCH`, which txcached does not offer.
    #[error("ERR WATCH is not supported by txcached: a transaction locks the shards of its keys while EXEC runs it, so MULTI/EXEC needs no optimistic check")]
    WatchUnsupported,
    /// Queued commands beyond what a connection may hold.
    #[error("ERR transaction too large: the queued commands may take at most {0} bytes")]
    TransactionTooLarge(usize),
    /// A stream command on a connection not authenticated with the stream password.
    #[error("NOPERM {0} is a stream command: only txcache-agent may send it (AUTH with the node's --stream-password)")]
    NoStreamPermission(&'static str),
    /// A stream command on a connection whose epoch (`TXEPOCH`) is older than the node's:
    /// its agent was taken over from, and must never move the node again.
    #[error("FENCED this connection's epoch {connection} is older than this node's {node}: another agent took over")]
    Fenced {
        /// The connection's epoch (0 when it never sent `TXEPOCH`).
        connection: u64,
        /// The node's epoch.
        node: u64,
    },
    /// A versioned or stream command on a connection that declared (`TXDATABASE`) another
    /// database than the one the node follows.
    #[error("WRONGDB this node follows database {node}, not {declared}: each database needs cache nodes of its own (restart a node to give it to another database)")]
    WrongDatabase {
        /// The database the node follows.
        node: String,
        /// The database the connection declared.
        declared: String,
    },
    /// `TXEPOCH` with an epoch older than the node's: sent by an agent that lost its lease.
    #[error("FENCED epoch {given} is older than this node's {node}: another agent took over")]
    OlderEpoch {
        /// The epoch the connection announced.
        given: u64,
        /// The node's epoch.
        node: u64,
    },
    /// AUTH with the wrong password.
    #[error("WRONGPASS invalid username-password pair or user is disabled.")]
    WrongPassword,
}

impl CommandError {
    /// Appends this error as a RESP error reply.
    pub fn encode(&self, out: &mut bytes::BytesMut) {
        encode::error(out, &self.to_string());
    }
}

impl CommandError {
    /// The reply for a store refusal of `command`.
    pub fn from_store(command: &'static str, error: StoreError) -> Self {
        match error {
            StoreError::WrongType => CommandError::WrongType,
            StoreError::TooLarge { size, limit } => CommandError::TooLarge { size, limit },
            other => CommandError::InvalidArgument {
                command,
                message: other.to_string(),
            },
        }
    }
}

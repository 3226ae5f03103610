//! Errors a command reports to its library; each renders as one RESP error reply, worded
//! byte for byte as the agent always has (`python/txcache/_protocol.py` and the tests match
//! on the codes: `NOAUTH`, `WRONGPASS`, `NOTDECODED`, `TIMEOUT`, `STANDBY`).

use bytes::BytesMut;
use txcache_resp::encode;

/// Why a command was refused. The connection stays open after any of these.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command name is not one the agent knows (upper-cased as the client sent it).
    #[error("ERR unknown command or wrong arguments '{0}'")]
    Unknown(String),
    /// A known command with too few or too many arguments; worded as an unknown one, as the
    /// agent always has.
    #[error("ERR unknown command or wrong arguments '{0}'")]
    WrongArity(&'static str),
    /// An argument of the wrong form.
    #[error("ERR {command}: {argument} must be {expected}")]
    InvalidArgument {
        /// The command refused.
        command: &'static str,
        /// The argument's name, as docs/protocol.md writes it.
        argument: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A password is configured and this connection has not authenticated.
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    /// `AUTH` with the wrong password.
    #[error("WRONGPASS invalid username-password pair")]
    WrongPassword,
    /// `AUTH` when the agent has no `--password`.
    #[error("ERR AUTH: no password is configured (txcache-agent --password)")]
    NoPasswordConfigured,
    /// `PIN` could not certify a clean snapshot (the stream is down, PostgreSQL unreachable).
    #[error("ERR PIN: {0:#}")]
    PinFailed(anyhow::Error),
    /// `COMMITLSN … upto`: the stream passed `upto` without the commit.
    #[error("NOTDECODED the stream passed the position given without the commit: the transaction changed nothing it decodes")]
    NotDecoded,
    /// `COMMITLSN`: the commit was not decoded within the timeout.
    #[error("TIMEOUT the commit was not decoded in time (did the transaction write to a tracked table?)")]
    TimedOut,
    /// Another agent holds the lease, or this one's ran out: the library asks another.
    #[error("STANDBY this agent is a standby ({0})")]
    Standby(String),
}

impl CommandError {
    /// Appends this error as a RESP error reply.
    pub fn encode(&self, out: &mut BytesMut) {
        encode::error(out, &self.to_string());
    }
}

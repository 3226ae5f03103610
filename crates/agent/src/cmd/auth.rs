//! `AUTH [user] password`: the agent has one password (`--password`), and no users.

use super::{Args, CommandError, Endpoint, Session};
use crate::auth_failures;
use bytes::BytesMut;
use txcache_resp::auth::{password_matches, WRONG_PASSWORDS_PER_CONNECTION};
use txcache_resp::encode;

/// `AUTH`'s arguments: the last one is the password; a user name before it, as Redis
/// clients send, is ignored.
#[derive(Debug, PartialEq, Eq)]
pub struct Auth {
    /// The password given.
    pub password: Vec<u8>,
}

impl Auth {
    /// Reads `[user …] password`.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        let password = args.take_last().ok_or_else(|| args.wrong_arity())?;
        Ok(Self {
            password: password.to_vec(),
        })
    }

    /// `+OK`, and the connection is authenticated; or refused (a wrong password counted
    /// and logged: [`auth_failures`]).
    pub fn apply(
        self,
        endpoint: &Endpoint,
        session: &mut Session,
        out: &mut BytesMut,
    ) -> Result<(), CommandError> {
        match &endpoint.password {
            Some(expected) if password_matches(expected.as_bytes(), &self.password) => {
                session.authenticated = true;
                encode::simple(out, "OK");
                Ok(())
            }
            Some(_) => {
                auth_failures::record(session.peer);
                session.wrong_passwords += 1;
                // Guessing costs a connection every few tries.
                session.closing |= session.wrong_passwords >= WRONG_PASSWORDS_PER_CONNECTION;
                Err(CommandError::WrongPassword)
            }
            None => Err(CommandError::NoPasswordConfigured),
        }
    }
}

//! A cursor over a request's arguments, so commands never index into the request.

use super::CommandError;
use bytes::Bytes;

/// A decimal integer argument, as Rust's `u64` parser reads one from UTF-8 text.
pub fn decimal(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// The arguments after the command name, consumed front to back.
pub struct Args<'a> {
    command: &'static str,
    items: std::slice::Iter<'a, Bytes>,
}

impl<'a> Args<'a> {
    /// Wraps the arguments of `command`.
    pub fn new(command: &'static str, items: &'a [Bytes]) -> Self {
        Self {
            command,
            items: items.iter(),
        }
    }

    /// The next argument; a missing one is a wrong-arity error.
    pub fn next_bytes(&mut self) -> Result<&'a [u8], CommandError> {
        self.optional().ok_or_else(|| self.wrong_arity())
    }

    /// The next argument, if there is one.
    pub fn optional(&mut self) -> Option<&'a [u8]> {
        self.items.next().map(|item| item.as_ref())
    }

    /// Consumes every argument left: the last of them, if any.
    pub fn take_last(&mut self) -> Option<&'a [u8]> {
        self.items.by_ref().last().map(|item| item.as_ref())
    }

    /// Fails with a wrong-arity error when arguments are left over.
    pub fn finish(&self) -> Result<(), CommandError> {
        match self.items.len() {
            0 => Ok(()),
            _ => Err(self.wrong_arity()),
        }
    }

    /// A wrong-arity error naming this command.
    pub fn wrong_arity(&self) -> CommandError {
        CommandError::WrongArity(self.command)
    }

    /// An invalid-argument error naming this command and `argument`.
    pub fn invalid(&self, argument: &'static str, expected: &'static str) -> CommandError {
        CommandError::InvalidArgument {
            command: self.command,
            argument,
            expected,
        }
    }
}

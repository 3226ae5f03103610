//! A cursor over a request's arguments, so commands never index into raw frames.

use super::CommandError;
use std::iter::Peekable;
use txcache_model::Timestamp;
use txcache_resp::decimal::parse_u64;
use txcache_resp::RequestArgs;

/// The arguments after the command name, consumed front to back: slices of the request
/// still in the read buffer (a command that keeps one copies it).
pub struct Args<'a> {
    command: &'static str,
    items: Peekable<RequestArgs<'a>>,
}

impl<'a> Args<'a> {
    /// Wraps the arguments of `command`: what is left of the request once its name was
    /// read.
    pub fn new(command: &'static str, items: RequestArgs<'a>) -> Self {
        Self {
            command,
            items: items.peekable(),
        }
    }

    /// The command these arguments belong to, for error messages.
    pub fn command(&self) -> &'static str {
        self.command
    }

    /// Arguments not consumed yet.
    pub fn remaining(&self) -> usize {
        self.items.len()
    }

    /// The next argument; a missing one is a wrong-arity error.
    pub fn next_bytes(&mut self) -> Result<&'a [u8], CommandError> {
        self.items
            .next()
            .ok_or(CommandError::WrongArity(self.command))
    }

    /// The next argument as UTF-8 text.
    pub fn next_text(&mut self, what: &str) -> Result<String, CommandError> {
        let bytes = self.next_bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.invalid(what, bytes, "UTF-8 text"))
    }

    /// The next argument as a non-negative integer.
    pub fn next_u64(&mut self, what: &str) -> Result<u64, CommandError> {
        let bytes = self.next_bytes()?;
        parse_u64(bytes).ok_or_else(|| self.invalid(what, bytes, "a non-negative integer"))
    }

    /// The next argument as a timestamp (a commit LSN within the RESP integer range).
    pub fn next_timestamp(&mut self, what: &str) -> Result<Timestamp, CommandError> {
        let bytes = self.next_bytes()?;
        parse_u64(bytes)
            .map(Timestamp)
            .filter(|ts| *ts <= Timestamp::MAX)
            .ok_or_else(|| self.invalid(what, bytes, "a timestamp (0..=9223372036854775807)"))
    }

    /// The next argument as Redis reads an integer ([`parse_integer`]); anything else is
    /// Redis's `value is not an integer or out of range`.
    pub fn next_integer(&mut self) -> Result<i64, CommandError> {
        parse_integer(self.next_bytes()?).ok_or(CommandError::NotAnInteger)
    }

    /// Consumes the next argument if it equals `keyword` (case-insensitive).
    pub fn eat_keyword(&mut self, keyword: &str) -> bool {
        let found = self
            .items
            .peek()
            .is_some_and(|arg| arg.eq_ignore_ascii_case(keyword.as_bytes()));
        if found {
            self.items.next();
        }
        found
    }

    /// All arguments not consumed yet.
    pub fn rest(&mut self) -> Vec<&'a [u8]> {
        self.items.by_ref().collect()
    }

    /// Fails with a wrong-arity error when arguments are left over.
    pub fn finish(&mut self) -> Result<(), CommandError> {
        match self.items.peek() {
            None => Ok(()),
            Some(_) => Err(CommandError::WrongArity(self.command)),
        }
    }

    /// An invalid-argument error naming this command, the argument and what was expected.
    pub fn invalid(&self, what: &str, got: &[u8], expected: &str) -> CommandError {
        CommandError::InvalidArgument {
            command: self.command,
            message: format!("{what} must be {expected}, got '{}'", printable(got)),
        }
    }
}

/// A 64-bit signed integer as Redis reads one (its `string2ll`): an optional `-`, then digits
/// without a leading zero (or `0` alone), at most 20 bytes, within `i64`. No `+`, no spaces,
/// no `-0`: `INCR` on such a value fails in Redis too.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', digits)) => (true, digits),
        _ => (false, bytes),
    };
    let canonical = match digits {
        [b'0'] => !negative,
        [b'1'..=b'9', ..] => bytes.len() <= 20,
        _ => false,
    };
    if !canonical {
        return None;
    }
    let magnitude = parse_u64(digits)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// The unit of an expire time argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// `EX`, `EXAT`, `EXPIRE`.
    Seconds,
    /// `PX`, `PXAT`, `PEXPIRE`.
    Milliseconds,
}

/// The deadline, in milliseconds since the Unix epoch, of an expire time `value` in `unit`
/// counted from `base` (the time now for a relative time, 0 for a Unix time); `None` when it
/// overflows a 64-bit integer, which Redis calls an invalid expire time. May be negative: a
/// time in the past.
pub fn deadline_ms(value: i64, unit: TimeUnit, base: u64) -> Option<i64> {
    let ms = match unit {
        TimeUnit::Seconds => value.checked_mul(1000)?,
        TimeUnit::Milliseconds => value,
    };
    ms.checked_add(i64::try_from(base).ok()?)
}

/// A bounded, printable rendering of client bytes for error messages and logs.
pub fn printable(bytes: &[u8]) -> String {
    const LIMIT: usize = 64;
    let shown = &bytes[..bytes.len().min(LIMIT)];
    let mut text: String = String::from_utf8_lossy(shown)
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if bytes.len() > LIMIT {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_stay_within_resp_integers() {
        let wire = b"*2\r\n$5\r\nTXGET\r\n$19\r\n9223372036854775808\r\n";
        let mut decoder = txcache_resp::RequestDecoder::new();
        let limits = txcache_resp::Limits::default();
        let request = decoder.peek(wire, &limits).unwrap().unwrap();
        let mut items = request.args();
        items.next();
        let mut args = Args::new("TXGET", items);
        assert!(args.next_timestamp("lo").is_err());
        assert!(
            Args::new("TXGET", request.args())
                .next_timestamp("lo")
                .is_err(),
            "not a number"
        );
    }

    #[test]
    fn integers_are_read_as_redis_reads_them() {
        let good: [(&[u8], i64); 7] = [
            (b"0", 0),
            (b"1", 1),
            (b"-1", -1),
            (b"42", 42),
            (b"9223372036854775807", i64::MAX),
            (b"-9223372036854775808", i64::MIN),
            (b"-10", -10),
        ];
        for (text, value) in good {
            assert_eq!(parse_integer(text), Some(value), "{}", printable(text));
        }
        let bad: [&[u8]; 13] = [
            b"",
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"-01",
            b"1.0",
            b"1e3",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"100000000000000000000",
        ];
        for text in bad {
            assert_eq!(parse_integer(text), None, "{}", printable(text));
        }
    }

    #[test]
    fn deadlines_count_from_their_base_and_refuse_overflow() {
        assert_eq!(deadline_ms(10, TimeUnit::Seconds, 1_000), Some(11_000));
        assert_eq!(deadline_ms(10, TimeUnit::Milliseconds, 1_000), Some(1_010));
        assert_eq!(deadline_ms(-5, TimeUnit::Seconds, 1_000), Some(-4_000));
        assert_eq!(deadline_ms(i64::MAX / 1000 + 1, TimeUnit::Seconds, 0), None);
        assert_eq!(deadline_ms(i64::MAX - 10, TimeUnit::Milliseconds, 11), None);
        assert_eq!(deadline_ms(i64::MIN / 1000 - 1, TimeUnit::Seconds, 0), None);
        assert_eq!(deadline_ms(1, TimeUnit::Milliseconds, u64::MAX), None);
    }

    #[test]
    fn printable_bounds_and_cleans() {
        assert_eq!(printable(b"a\r\nb"), "a??b");
        assert_eq!(printable(&[b'x'; 100]).chars().count(), 65);
    }
}

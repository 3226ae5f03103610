//! A cursor over a request's arguments, so commands never index into raw frames.

use super::CommandError;
use std::iter::Peekable;
use txcache_model::Timestamp;
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

/// Parses plain ASCII decimal digits (no sign, no spaces) without allocating.
///
/// Whole groups of eight digits are read at once ([`eight_digits`]); at most two of them come
/// first (`10^16` cannot overflow a `u64`), then the rest one by one, with checks.
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let mut groups = bytes.chunks_exact(8);
    let mut value = 0u64;
    for group in groups.by_ref() {
        value = value * 100_000_000 + eight_digits(group.try_into().ok()?)?;
    }
    groups.remainder().iter().try_fold(value, |value, &b| {
        let digit = u64::from(b.wrapping_sub(b'0'));
        (digit < 10).then_some(())?;
        value.checked_mul(10)?.checked_add(digit)
    })
}

/// Eight ASCII digits as their value, or `None` if any byte is not a digit (SWAR: all
/// eight bytes in one register, combined pairwise in three multiplications).
fn eight_digits(group: [u8; 8]) -> Option<u64> {
    const HIGH_NIBBLES: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    let v = u64::from_le_bytes(group);
    // Every byte in 0x30..=0x3f, and still so after adding 6: every byte in '0'..='9'.
    let digits = v & HIGH_NIBBLES == ZEROS && (v + 0x0606_0606_0606_0606) & HIGH_NIBBLES == ZEROS;
    if !digits {
        return None;
    }
    // Little-endian: the first digit is the lowest byte. Merge bytes into 2-digit 16-bit
    // lanes, those into 4-digit 32-bit lanes, then the two halves.
    let v = v - ZEROS;
    let v = (v * 10 + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v * 100 + (v >> 16)) & 0x0000_ffff_0000_ffff;
    Some((v * 10_000 + (v >> 32)) & 0xffff_ffff)
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
    fn parse_u64_refuses_signs_spaces_and_overflow() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(
            parse_u64(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(parse_u64(b"00042"), Some(42));
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b" 1",
            b"1a",
            b"18446744073709551616",
            b"99999999999999999999",
            b"1844674407370955161a",
            b"123456789012345678901",
        ] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parse_u64_agrees_with_std_on_digit_strings() {
        for len in 1..=20 {
            for fill in ["9", "1", "0", "5"] {
                for head in ["", "1", "18446744073709551615"] {
                    let text: String = format!("{head}{}", fill.repeat(len))[..len].to_owned();
                    let expected = text.parse::<u64>().ok();
                    assert_eq!(parse_u64(text.as_bytes()), expected, "{text}");
                }
            }
        }
    }

    #[test]
    fn parse_u64_refuses_a_non_digit_anywhere() {
        for len in 1..=20 {
            for at in 0..len {
                for bad in [b'/', b':', b'?', b' ', b'-', 0x80, 0xff] {
                    let mut text = vec![b'7'; len];
                    text[at] = bad;
                    assert_eq!(parse_u64(&text), None, "{text:?}");
                }
            }
        }
    }

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
    fn printable_bounds_and_cleans() {
        assert_eq!(printable(b"a\r\nb"), "a??b");
        assert_eq!(printable(&[b'x'; 100]).chars().count(), 65);
    }
}

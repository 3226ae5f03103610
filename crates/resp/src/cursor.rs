//! Scanning primitives shared by requests and frames: CRLF, canonical integers,
//! claimed lengths checked against [`Limits`], bulk strings.
//!
//! Every function takes the whole buffer and a position, never allocates, never
//! panics on short or hostile input, and answers `Ok(None)` when the bytes present
//! are a valid prefix but not yet complete. Errors are reported as early as the
//! bytes allow, so a peer cannot make us wait for data we would reject anyway.

use std::ops::Range;

use crate::{decimal, Limits, ProtocolError};

/// A syntax error in a line; callers turn it into the error of their context.
#[derive(Debug)]
pub(crate) struct Malformed;

/// Expects `\r\n` at `pos`; returns the position after it.
pub(crate) fn expect_crlf(buf: &[u8], pos: usize) -> Result<Option<usize>, Malformed> {
    match (buf.get(pos), buf.get(pos + 1)) {
        (None, _) => Ok(None),
        (Some(b'\r'), None) => Ok(None),
        (Some(b'\r'), Some(b'\n')) => Ok(Some(pos + 2)),
        _ => Err(Malformed),
    }
}

/// The most digits an `i64` has.
const MAX_DIGITS: usize = 19;

// They are summed without overflow checks.
const _: () = assert!(MAX_DIGITS <= decimal::MAX_SAFE_DIGITS);

/// Reads a canonical decimal `i64` followed by `\r\n`, starting at `pos`.
///
/// Canonical as in Redis's `string2ll`: an optional `-`, then `0` or a digit
/// sequence without leading zeros (`-0`, `01` and `+1` are rejected). Overflow is an
/// error, so an integer line is at most 22 bytes. Returns the value and the
/// position after the CRLF.
///
/// The digits are found and summed eight at a time ([`decimal`]), then the rules are
/// checked in the order a byte-by-byte reader meets them, so the answer (`Ok(None)` for a
/// valid prefix, `Err` as soon as the bytes present are wrong) is the same.
// Always inlined: the short case then costs a few compares at each call site.
#[inline(always)]
pub(crate) fn read_int(buf: &[u8], pos: usize) -> Result<Option<(i64, usize)>, Malformed> {
    match short_int(buf.get(pos..).unwrap_or_default()) {
        Some((value, len)) => Ok(Some((value, pos + len))),
        None => read_long_int(buf, pos),
    }
}

/// [`read_int`] for any line.
fn read_long_int(buf: &[u8], pos: usize) -> Result<Option<(i64, usize)>, Malformed> {
    let rest = buf.get(pos..).unwrap_or_default();
    let negative = rest.first() == Some(&b'-');
    let digits = &rest[usize::from(negative)..];
    let (count, magnitude) = decimal::leading_digits(digits, MAX_DIGITS);
    let leading_zero = digits.first() == Some(&b'0') && (negative || count > 1);
    let value = match negative {
        true => 0i64.checked_sub_unsigned(magnitude),
        false => i64::try_from(magnitude).ok(),
    };
    let (Some(value), false) = (value, leading_zero) else {
        return Err(Malformed);
    };
    let end = pos + usize::from(negative) + count;
    match digits.get(count) {
        None => Ok(None),
        Some(b'\r') if count > 0 => Ok(expect_crlf(buf, end)?.map(|next| (value, next))),
        Some(_) => Err(Malformed),
    }
}

/// The common line, one to three digits without a leading zero then `\r\n` (every
/// argument count and most bulk lengths), read without the general loop: its value and
/// length. `None` for anything else, which [`read_int`] reads in full.
#[inline(always)]
fn short_int(rest: &[u8]) -> Option<(i64, usize)> {
    let digit = |b: u8| i64::from(b - b'0');
    match *rest {
        [a @ b'0'..=b'9', b'\r', b'\n', ..] => Some((digit(a), 3)),
        [a @ b'1'..=b'9', b @ b'0'..=b'9', b'\r', b'\n', ..] => Some((digit(a) * 10 + digit(b), 4)),
        [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9', b'\r', b'\n', ..] => {
            Some((digit(a) * 100 + digit(b) * 10 + digit(c), 5))
        }
        _ => None,
    }
}

/// Finds the `\r\n` ending a line that starts at `from` and whose content may be
/// at most `max` bytes; returns the index of the `\r`. A lone `\r` is content.
pub(crate) fn find_crlf(buf: &[u8], from: usize, max: usize) -> Result<Option<usize>, Malformed> {
    let window_len = max.saturating_add(2);
    let window_end = buf.len().min(from.saturating_add(window_len));
    let window = buf.get(from..window_end).unwrap_or_default();
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some(from + i)),
        None if window.len() >= window_len => Err(Malformed),
        None => Ok(None),
    }
}

/// `n` as a `usize` if it is at most `limit`.
fn within(n: i64, limit: usize) -> Option<usize> {
    usize::try_from(n).ok().filter(|&n| n <= limit)
}

/// Checks a claimed bulk length: `Ok(None)` for the null bulk `-1`.
pub(crate) fn bulk_len(n: i64, limits: &Limits) -> Result<Option<usize>, ProtocolError> {
    let limit = limits.max_bulk_len;
    match n {
        -1 => Ok(None),
        n if n < 0 => Err(ProtocolError::InvalidBulkLength),
        n => within(n, limit)
            .map(Some)
            .ok_or(ProtocolError::BulkTooLong { len: n, limit }),
    }
}

/// Checks a claimed array count: `Ok(None)` for the null array `-1`.
pub(crate) fn array_len(n: i64, limits: &Limits) -> Result<Option<usize>, ProtocolError> {
    let limit = limits.max_array_len;
    match n {
        -1 => Ok(None),
        n if n < 0 => Err(ProtocolError::InvalidMultibulkLength),
        n => within(n, limit)
            .map(Some)
            .ok_or(ProtocolError::MultibulkTooLong { len: n, limit }),
    }
}

/// A bulk string located in a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bulk {
    /// `$-1\r\n`.
    Null {
        /// Position after the frame.
        next: usize,
    },
    /// `$<len>\r\n<data>\r\n`.
    Data {
        /// Where the payload lies.
        data: Range<usize>,
        /// Position after the frame.
        next: usize,
    },
}

/// Reads a bulk string whose `$` is at `pos - 1`: its length line, then (without
/// buffering anything) whether the payload and its CRLF are present.
// Inlined: it runs once per argument of every request, and its result is matched at once.
#[inline(always)]
pub(crate) fn read_bulk(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<Bulk>, ProtocolError> {
    let read = read_int(buf, pos).map_err(|_| ProtocolError::InvalidBulkLength)?;
    let Some((claimed, start)) = read else {
        return Ok(None);
    };
    let Some(len) = bulk_len(claimed, limits)? else {
        return Ok(Some(Bulk::Null { next: start }));
    };
    let end = start.checked_add(len).ok_or(ProtocolError::BulkTooLong {
        len: claimed,
        limit: limits.max_bulk_len,
    })?;
    let next = expect_crlf(buf, end).map_err(|_| ProtocolError::MissingCrlf)?;
    Ok(next.map(|next| Bulk::Data {
        data: start..end,
        next,
    }))
}

/// How many items a `Vec` may reserve for `claimed` items of at least `min_size`
/// bytes each, given `available` bytes: never more than the bytes could hold.
pub(crate) fn capacity(claimed: usize, available: usize, min_size: usize) -> usize {
    claimed.min(available / min_size.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(s: &str) -> Result<Option<(i64, usize)>, Malformed> {
        read_int(s.as_bytes(), 0)
    }

    #[test]
    fn integers() {
        assert_eq!(int("0\r\n").ok().flatten(), Some((0, 3)));
        assert_eq!(int("42\r\nx").ok().flatten(), Some((42, 4)));
        assert_eq!(int("-1\r\n").ok().flatten(), Some((-1, 4)));
        let max = format!("{}\r\n", i64::MAX);
        assert_eq!(int(&max).ok().flatten(), Some((i64::MAX, max.len())));
        let min = format!("{}\r\n", i64::MIN);
        assert_eq!(int(&min).ok().flatten(), Some((i64::MIN, min.len())));
    }

    #[test]
    fn short_integers_read_like_long_ones() {
        for n in 0..1000 {
            let line = format!("{n}\r\nx");
            assert_eq!(
                int(&line).ok().flatten(),
                Some((n, line.len() - 1)),
                "{line:?}"
            );
            assert_eq!(
                read_int(format!("?{line}").as_bytes(), 1).ok().flatten(),
                Some((n, line.len()))
            );
        }
        for bad in ["00\r\n", "01\r\n", "001\r\n", "012\r\n", "1\r\r\n"] {
            assert!(int(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn integer_prefixes_are_incomplete() {
        for s in ["", "-", "1", "12", "-3", "12\r"] {
            assert!(matches!(int(s), Ok(None)), "{s:?}");
        }
    }

    #[test]
    fn bad_integers_fail_early() {
        let bad = [
            "\r\n",
            "-\r\n",
            "+1\r\n",
            "01",
            "00",
            "-0",
            "1a",
            "1 ",
            "1\rx",
            "1\n",
            "--1",
            "9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999",
        ];
        for s in bad {
            assert!(int(s).is_err(), "{s:?}");
        }
    }

    /// The byte-by-byte reader `read_int` replaced: checked arithmetic per digit. The
    /// model the fast one must agree with.
    fn reference_read_int(buf: &[u8], pos: usize) -> Result<Option<(i64, usize)>, Malformed> {
        let negative = buf.get(pos) == Some(&b'-');
        let start = pos + usize::from(negative);
        let mut value: i64 = 0;
        let mut at = start;
        loop {
            let Some(&byte) = buf.get(at) else {
                return Ok(None);
            };
            if byte == b'\r' && at > start {
                return Ok(expect_crlf(buf, at)?.map(|next| (value, next)));
            }
            let digit = match byte {
                b'0'..=b'9' => i64::from(byte - b'0'),
                _ => return Err(Malformed),
            };
            let leading_zero = at > start && value == 0;
            if leading_zero || (negative && at == start && digit == 0) {
                return Err(Malformed);
            }
            let shifted = value.checked_mul(10);
            let next = match negative {
                true => shifted.and_then(|v| v.checked_sub(digit)),
                false => shifted.and_then(|v| v.checked_add(digit)),
            };
            value = next.ok_or(Malformed)?;
            at += 1;
        }
    }

    /// `Ok(None)`, `Err` or the value and end: what the two readers must agree on.
    fn answer(read: Result<Option<(i64, usize)>, Malformed>) -> Result<Option<(i64, usize)>, ()> {
        read.map_err(|_| ())
    }

    fn agree(buf: &[u8], pos: usize) -> Result<(), proptest::test_runner::TestCaseError> {
        let (fast, model) = (read_int(buf, pos), reference_read_int(buf, pos));
        proptest::prop_assert_eq!(answer(fast), answer(model), "{:?} at {}", buf, pos);
        Ok(())
    }

    /// Bytes that make up integer lines, and their near misses.
    fn int_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let alphabet = b"0123456789-+\r\n x".to_vec();
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..30),
            proptest::collection::vec(prop::sample::select(alphabet), 0..30),
        ]
    }

    proptest::proptest! {
        #[test]
        fn fast_read_int_agrees_on_any_bytes(buf in int_bytes(), pos in 0usize..4) {
            agree(&buf, pos)?;
        }

        #[test]
        fn fast_read_int_agrees_on_prefixes_of_valid_lines(
            n in proptest::prelude::any::<i64>(),
            digits in 0u32..20,
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3),
        ) {
            // Values of every length, not only the 19-digit ones uniform sampling favours.
            let n = 10i64.checked_pow(digits).map_or(n, |p| n % p);
            let mut line = format!("{n}\r\n").into_bytes();
            line.extend_from_slice(&tail);
            for len in 0..=line.len() {
                agree(&line[..len], 0)?;
                agree(&line[..len], len.min(1))?;
            }
        }
    }

    #[test]
    fn fast_read_int_agrees_at_the_edges() {
        let edges = [
            "9223372036854775807\r\n",
            "9223372036854775808\r\n",
            "-9223372036854775808\r\n",
            "-9223372036854775809\r\n",
            "999999999999999999\r\n",
            "1000000000000000000\r\n",
            "9999999999999999999\r\n",
            "10000000000000000000\r\n",
            "18446744073709551615\r\n",
            "-0\r\n",
            "0\r\n",
            "00\r\n",
            "-\r\n",
        ];
        for edge in edges {
            for len in 0..=edge.len() {
                let buf = &edge.as_bytes()[..len];
                assert_eq!(
                    answer(read_int(buf, 0)),
                    answer(reference_read_int(buf, 0)),
                    "{buf:?}"
                );
            }
        }
    }

    #[test]
    fn crlf_search_is_bounded() {
        assert_eq!(find_crlf(b"+OK\r\n", 1, 8).ok().flatten(), Some(3));
        assert_eq!(find_crlf(b"+a\rb\r\n", 1, 8).ok().flatten(), Some(4));
        assert!(matches!(find_crlf(b"+OK", 1, 8), Ok(None)));
        assert!(matches!(find_crlf(b"+1234567\r", 1, 8), Ok(None)));
        assert_eq!(find_crlf(b"+12345678\r\n", 1, 8).ok().flatten(), Some(9));
        assert!(find_crlf(b"+123456789\r\n", 1, 8).is_err());
        assert!(matches!(find_crlf(b"", 5, 8), Ok(None)));
    }

    #[test]
    fn claimed_lengths() {
        let limits = Limits::default();
        assert_eq!(bulk_len(-1, &limits), Ok(None));
        assert_eq!(bulk_len(0, &limits), Ok(Some(0)));
        assert_eq!(bulk_len(-2, &limits), Err(ProtocolError::InvalidBulkLength));
        assert!(matches!(
            bulk_len(1 << 40, &limits),
            Err(ProtocolError::BulkTooLong { .. })
        ));
        assert_eq!(
            array_len(-7, &limits),
            Err(ProtocolError::InvalidMultibulkLength)
        );
        assert!(matches!(
            array_len(1 << 21, &limits),
            Err(ProtocolError::MultibulkTooLong { .. })
        ));
    }

    #[test]
    fn bulk_strings() {
        let limits = Limits::default();
        let bulk = |s: &str| read_bulk(s.as_bytes(), 1, &limits);
        assert_eq!(
            bulk("$3\r\nabc\r\n"),
            Ok(Some(Bulk::Data {
                data: 4..7,
                next: 9
            }))
        );
        assert_eq!(bulk("$-1\r\n"), Ok(Some(Bulk::Null { next: 5 })));
        assert_eq!(bulk("$3\r\nab"), Ok(None));
        assert_eq!(bulk("$3\r\nabc\r"), Ok(None));
        assert_eq!(bulk("$3\r\nabcd\r\n"), Err(ProtocolError::MissingCrlf));
        assert_eq!(bulk("$3\r\nabc\n"), Err(ProtocolError::MissingCrlf));
    }

    #[test]
    fn capacity_is_capped_by_bytes() {
        assert_eq!(capacity(1_000_000, 60, 6), 10);
        assert_eq!(capacity(3, 60, 6), 3);
        assert_eq!(capacity(3, 60, 0), 3);
    }
}

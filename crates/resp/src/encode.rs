//! Encoders for replies (server side) and requests (client side).
//!
//! Every function appends one complete RESP2 item to `out` (or a RESP3 one: [`null3`],
//! [`map_header`], [`verbatim`], for a connection that switched with `HELLO 3`), reserving
//! the space it needs once and formatting integers eight digits at a time in one register:
//! no intermediate allocation, no `fmt` machinery.

use bytes::{BufMut, BytesMut};

const CRLF: &[u8] = b"\r\n";

/// Appends a simple string, `+<text>\r\n`. CR and LF in `text` (which the format
/// cannot carry) are replaced by spaces.
pub fn simple(out: &mut BytesMut, text: &str) {
    line(out, b'+', text.as_bytes());
}

/// Appends an error, `-<message>\r\n`. By convention `message` starts with an
/// error code such as `ERR` or `WRONGTYPE`. CR and LF in `message` are replaced by
/// spaces.
pub fn error(out: &mut BytesMut, message: &str) {
    line(out, b'-', message.as_bytes());
}

/// Appends an integer, `:<n>\r\n`.
pub fn integer(out: &mut BytesMut, n: i64) {
    decimal_line(out, b':', n < 0, n.unsigned_abs());
}

/// Appends a bulk string, `$<len>\r\n<data>\r\n`.
pub fn bulk(out: &mut BytesMut, data: &[u8]) {
    out.reserve(data.len() + 2);
    length_line(out, b'$', data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(CRLF);
}

/// Appends `n`'s decimal digits as a bulk string, `$<digits>\r\n<n>\r\n`: how a client
/// sends an integer argument (a timestamp).
pub fn bulk_integer(out: &mut BytesMut, n: u64) {
    // 1 to 20 digits.
    let digits = n.checked_ilog10().map_or(1, |log| log as u8 + 1);
    // The header up to its CR, then the digits as a line whose prefix is the header's LF.
    if digits < 10 {
        out.extend_from_slice(&[b'$', b'0' + digits, b'\r']);
    } else {
        out.extend_from_slice(&[b'$', b'0' + digits / 10, b'0' + digits % 10, b'\r']);
    }
    decimal_line(out, b'\n', false, n);
}

/// Appends the null bulk string, `$-1\r\n` (a missing value).
pub fn null(out: &mut BytesMut) {
    out.extend_from_slice(b"$-1\r\n");
}

/// Appends the null array, `*-1\r\n`.
pub fn null_array(out: &mut BytesMut) {
    out.extend_from_slice(b"*-1\r\n");
}

/// Appends the RESP3 null, `_\r\n`: what a RESP3 connection gets wherever RESP2 has a null
/// bulk string or a null array.
pub fn null3(out: &mut BytesMut) {
    out.extend_from_slice(b"_\r\n");
}

/// Appends a RESP3 map header, `%<pairs>\r\n`; the caller then appends `pairs` keys, each
/// followed by its value.
pub fn map_header(out: &mut BytesMut, pairs: usize) {
    length_line(out, b'%', pairs);
}

/// Appends a RESP3 verbatim string, `=<len>\r\n<format>:<text>\r\n`, `format` being three
/// letters such as `txt` (plain text, as `INFO` replies) or `mkd` (markdown).
pub fn verbatim(out: &mut BytesMut, format: &[u8; 3], text: &[u8]) {
    out.reserve(text.len() + 16);
    length_line(out, b'=', text.len() + 4);
    out.extend_from_slice(format);
    out.put_u8(b':');
    out.extend_from_slice(text);
    out.extend_from_slice(CRLF);
}

/// Appends an array header, `*<len>\r\n`; the caller then appends `len` items.
pub fn array_header(out: &mut BytesMut, len: usize) {
    length_line(out, b'*', len);
}

/// Appends a command as a multibulk request: an array of bulk strings, which is
/// how clients send commands (`request(out, &[b"GET", b"key"])`).
pub fn request(out: &mut BytesMut, args: &[&[u8]]) {
    let payload: usize = args.iter().map(|arg| arg.len() + 16).sum();
    out.reserve(payload + 16);
    array_header(out, args.len());
    for arg in args {
        bulk(out, arg);
    }
}

/// `<prefix><text>\r\n` with CR and LF in `text` replaced by spaces.
fn line(out: &mut BytesMut, prefix: u8, text: &[u8]) {
    let is_break = |b: &u8| *b == b'\r' || *b == b'\n';
    out.reserve(text.len() + 3);
    out.put_u8(prefix);
    if text.iter().any(is_break) {
        out.extend(text.iter().map(|b| if is_break(b) { b' ' } else { *b }));
    } else {
        out.extend_from_slice(text);
    }
    out.extend_from_slice(CRLF);
}

fn length_line(out: &mut BytesMut, prefix: u8, len: usize) {
    // usize is at most 64 bits on every supported target.
    decimal_line(out, prefix, false, len as u64);
}

/// `<prefix>[-]<magnitude>\r\n`.
///
/// Beyond three digits the line is built in a stack buffer and appended at once. The digits are
/// made eight at a time in one register ([`eight_digits`]): a 19-digit timestamp takes three
/// groups instead of ten divisions. Every write into the buffer, and the append itself, has
/// a fixed size (the append is then cut back to the line), so none calls `memcpy`.
// Always inlined: the one-digit case is a single four-byte store at the caller.
#[inline(always)]
fn decimal_line(out: &mut BytesMut, prefix: u8, negative: bool, magnitude: u64) {
    match (negative, u16::try_from(magnitude)) {
        // One digit (array headers, flags) is most lines: four bytes, no buffer.
        (false, Ok(n @ 0..=9)) => out.extend_from_slice(&[prefix, digit(n), b'\r', b'\n']),
        // Two or three (most bulk lengths: keys, small values): five or six bytes.
        (false, Ok(n @ 10..=99)) => {
            out.extend_from_slice(&[prefix, digit(n / 10), digit(n), b'\r', b'\n']);
        }
        (false, Ok(n @ 100..=999)) => {
            let (hundreds, tens, ones) = (digit(n / 100), digit(n / 10), digit(n));
            out.extend_from_slice(&[prefix, hundreds, tens, ones, b'\r', b'\n']);
        }
        _ => long_decimal_line(out, prefix, negative, magnitude),
    }
}

/// The ASCII digit of `n`'s last decimal place.
#[inline(always)]
fn digit(n: u16) -> u8 {
    b'0' + (n % 10) as u8
}

/// [`decimal_line`] for any number.
fn long_decimal_line(out: &mut BytesMut, prefix: u8, negative: bool, magnitude: u64) {
    const GROUPS: u64 = EIGHT * EIGHT;
    let mut line = [0u8; LINE];
    line[0] = prefix;
    line[1] = b'-';
    let start = 1 + usize::from(negative);
    let end = if magnitude < EIGHT {
        leading_group(&mut line, start, magnitude)
    } else if magnitude < GROUPS {
        let at = leading_group(&mut line, start, magnitude / EIGHT);
        group(&mut line, at, magnitude % EIGHT)
    } else {
        let at = leading_group(&mut line, start, magnitude / GROUPS);
        let at = group(&mut line, at, magnitude / EIGHT % EIGHT);
        group(&mut line, at, magnitude % EIGHT)
    };
    line[end..end + 2].copy_from_slice(CRLF);
    let len = out.len() + end + 2;
    out.extend_from_slice(&line);
    out.truncate(len);
}

/// The line buffer: prefix, sign, the 20 digits of `u64::MAX`, CRLF, and room for a whole
/// group written at the last group's position.
const LINE: usize = 32;

/// Writes the eight digits of `n` (below 10^8) at `at`; returns the position after them.
fn group(line: &mut [u8; LINE], at: usize, n: u64) -> usize {
    line[at..at + 8].copy_from_slice(&eight_digits(n));
    at + 8
}

/// Writes `n` (below 10^8) at `at` without leading zeros; returns the position after it.
fn leading_group(line: &mut [u8; LINE], at: usize, n: u64) -> usize {
    let lanes = digit_lanes(n);
    // Little-endian: the leading zeros are the low bytes, zero before the ASCII offset is
    // added; count them (all but the last digit of 0) and shift them out.
    let zeros = (lanes.trailing_zeros() / 8).min(7) as usize;
    let word = (lanes | ASCII_ZEROS) >> (8 * zeros);
    line[at..at + 8].copy_from_slice(&word.to_le_bytes());
    at + 8 - zeros
}

/// 10^8: the numbers [`eight_digits`] writes are below it.
const EIGHT: u64 = 100_000_000;

/// `n` (below 10^8) as eight ASCII digits, leading zeros included.
///
/// SWAR: the halves (four digits each) go in two 32-bit lanes, each lane is split into two
/// 16-bit lanes of two digits, then those into bytes of one digit, dividing all lanes at
/// once by a multiply and shift that is exact for these ranges.
fn eight_digits(n: u64) -> [u8; 8] {
    (digit_lanes(n) | ASCII_ZEROS).to_le_bytes()
}

/// `'0'` in every byte.
const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// The eight decimal digits of `n` (below 10^8), one per byte, as values 0–9: the most
/// significant in the lowest byte.
fn digit_lanes(n: u64) -> u64 {
    debug_assert!(n < EIGHT);
    // Lane order is little-endian: the most significant digits go in the lowest lane.
    let halves = (n / 10_000) | ((n % 10_000) << 32);
    // x / 100 for x < 10_000 is (x * 10_486) >> 20.
    let hundreds = ((halves * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let pairs = ((halves - 100 * hundreds) << 16) | hundreds;
    // x / 10 for x < 100 is (x * 103) >> 10.
    let tens = ((pairs * 103) >> 10) & 0x000f_000f_000f_000f;
    ((pairs - 10 * tens) << 8) | tens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut out = BytesMut::new();
        f(&mut out);
        out.to_vec()
    }

    #[test]
    fn simple_strings() {
        assert_eq!(encoded(|o| simple(o, "OK")), b"+OK\r\n");
        assert_eq!(encoded(|o| simple(o, "")), b"+\r\n");
        assert_eq!(encoded(|o| simple(o, "a\r\nb\nc")), b"+a  b c\r\n");
    }

    #[test]
    fn errors() {
        assert_eq!(encoded(|o| error(o, "ERR unknown")), b"-ERR unknown\r\n");
        assert_eq!(encoded(|o| error(o, "ERR x\r\ny")), b"-ERR x  y\r\n");
    }

    #[test]
    fn integers() {
        assert_eq!(encoded(|o| integer(o, 0)), b":0\r\n");
        assert_eq!(encoded(|o| integer(o, 7)), b":7\r\n");
        assert_eq!(encoded(|o| integer(o, -42)), b":-42\r\n");
        assert_eq!(encoded(|o| integer(o, 1000)), b":1000\r\n");
        assert_eq!(
            encoded(|o| integer(o, i64::MAX)),
            b":9223372036854775807\r\n"
        );
        assert_eq!(
            encoded(|o| integer(o, i64::MIN)),
            b":-9223372036854775808\r\n"
        );
    }

    #[test]
    fn integers_match_format_at_the_edges() {
        let mut edges = vec![0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, i64::MAX, i64::MIN];
        for power in 1..19 {
            let p = 10i64.pow(power);
            edges.extend([p - 1, p, p + 1, -(p - 1), -p, -(p + 1)]);
        }
        for n in edges {
            assert_eq!(encoded(|o| integer(o, n)), format!(":{n}\r\n").as_bytes());
        }
        let line = encoded(|o| decimal_line(o, b'$', false, u64::MAX));
        assert_eq!(line, format!("${}\r\n", u64::MAX).as_bytes());
    }

    proptest::proptest! {
        #[test]
        fn integers_match_format(n in proptest::prelude::any::<i64>(), digits in 0u32..20) {
            // Every length, not only the long values uniform sampling favours.
            let n = 10i64.checked_pow(digits).map_or(n, |p| n % p);
            proptest::prop_assert_eq!(encoded(|o| integer(o, n)), format!(":{n}\r\n").into_bytes());
        }

        #[test]
        fn bulk_integers_match_format(n in proptest::prelude::any::<u64>(), shift in 0u32..64) {
            let n = n >> shift;
            let expected = format!("${}\r\n{n}\r\n", n.to_string().len());
            proptest::prop_assert_eq!(encoded(|o| bulk_integer(o, n)), expected.into_bytes());
        }

        #[test]
        fn lengths_match_format(n in proptest::prelude::any::<usize>(), shift in 0u32..64) {
            let n = n >> shift;
            proptest::prop_assert_eq!(encoded(|o| array_header(o, n)), format!("*{n}\r\n").into_bytes());
        }
    }

    #[test]
    fn bulk_integers_match_format_at_every_digit_count() {
        let mut edges = vec![0, 1, 9, u64::MAX, u64::MAX - 1];
        for power in 1..20 {
            let p = 10u64.pow(power);
            edges.extend([p - 1, p, p + 1]);
        }
        for n in edges {
            let expected = format!("${}\r\n{n}\r\n", n.to_string().len());
            assert_eq!(encoded(|o| bulk_integer(o, n)), expected.as_bytes());
        }
    }

    #[test]
    fn integers_at_every_digit_count_boundary_match_format() {
        for k in 0..19 {
            let power = 10i64.pow(k);
            for n in [power - 1, power, power + 1, -power, -(power - 1)] {
                assert_eq!(encoded(|o| integer(o, n)), format!(":{n}\r\n").into_bytes());
            }
        }
        for n in [i64::MAX, i64::MIN, i64::MIN + 1] {
            assert_eq!(encoded(|o| integer(o, n)), format!(":{n}\r\n").into_bytes());
        }
    }

    #[test]
    fn eight_digits_match_format() {
        let mut n = 0;
        while n < EIGHT {
            assert_eq!(eight_digits(n), format!("{n:08}").as_bytes(), "{n}");
            n += 997;
        }
        for n in [1, 9, 10, 99, 100, 9_999, 10_000, 10_001, 99_999_999] {
            assert_eq!(eight_digits(n), format!("{n:08}").as_bytes(), "{n}");
        }
    }

    #[test]
    fn bulks_and_nulls() {
        assert_eq!(encoded(|o| bulk(o, b"hello")), b"$5\r\nhello\r\n");
        assert_eq!(encoded(|o| bulk(o, b"")), b"$0\r\n\r\n");
        assert_eq!(encoded(|o| bulk(o, b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(encoded(null), b"$-1\r\n");
        assert_eq!(encoded(null_array), b"*-1\r\n");
    }

    #[test]
    fn resp3_types() {
        assert_eq!(encoded(null3), b"_\r\n");
        assert_eq!(encoded(|o| map_header(o, 7)), b"%7\r\n");
        assert_eq!(encoded(|o| map_header(o, 0)), b"%0\r\n");
        assert_eq!(
            encoded(|o| verbatim(o, b"txt", b"a\r\nb")),
            b"=8\r\ntxt:a\r\nb\r\n"
        );
        assert_eq!(encoded(|o| verbatim(o, b"txt", b"")), b"=4\r\ntxt:\r\n");
    }

    #[test]
    fn arrays_and_requests() {
        assert_eq!(encoded(|o| array_header(o, 0)), b"*0\r\n");
        assert_eq!(encoded(|o| array_header(o, 12)), b"*12\r\n");
        assert_eq!(
            encoded(|o| request(o, &[b"SET", b"k", b""])),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
        assert_eq!(encoded(|o| request(o, &[])), b"*0\r\n");
    }

    #[test]
    fn appends_to_existing_content() {
        let mut out = BytesMut::from(&b"+A\r\n"[..]);
        integer(&mut out, 5);
        assert_eq!(&out[..], b"+A\r\n:5\r\n");
    }
}

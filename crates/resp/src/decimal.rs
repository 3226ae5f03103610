//! Decimal digits read eight at a time: all eight bytes in one 64-bit register (SWAR), as
//! the encoder writes them ([`crate::encode`]).
//!
//! Timestamps are 13 to 19 digits on the wire, two or three of them in every versioned
//! request and reply, so a digit at a time (six or seven instructions each, with checks)
//! was a visible part of the server's and the load tool's work per request.

/// `'0'` in every byte.
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// The high nibble of every byte.
const HIGH_NIBBLES: u64 = 0xf0f0_f0f0_f0f0_f0f0;

/// The most digits a `u64` has.
const MAX_U64_DIGITS: usize = 20;

/// The value of `digits`: 1 to 20 ASCII digits, leading zeros allowed, nothing else (no
/// sign, no space); `None` for anything else or a value above `u64::MAX`. Never allocates.
///
/// The first `len % 8` digits are read one at a time (fewer than eight cannot overflow),
/// then the rest eight at a time.
pub fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > MAX_U64_DIGITS {
        return None;
    }
    let (head, groups) = digits.split_at(digits.len() % 8);
    let mut value = 0;
    for &byte in head {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    // `groups` is a whole number of groups: its remainder is empty.
    for group in groups.as_chunks::<8>().0 {
        value = value
            .checked_mul(100_000_000)?
            .checked_add(eight_digits(*group)?)?;
    }
    Some(value)
}

/// How many bytes at the start of `bytes`, at most `max`, are ASCII digits.
pub(crate) fn digit_run(bytes: &[u8], max: usize) -> usize {
    let (words, tail) = bytes[..bytes.len().min(max)].as_chunks::<8>();
    let mut run = 0;
    for word in words {
        let flags = non_digits(u64::from_le_bytes(*word));
        if flags != 0 {
            // Little-endian: the first byte is the lowest.
            return run + (flags.trailing_zeros() / 8) as usize;
        }
        run += 8;
    }
    run + tail.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// Nonzero in every byte of `word` that is not an ASCII digit (and perhaps in later ones).
///
/// A digit is `0x30..=0x39`: its high nibble is 3, and still is after adding 6. Adding 6 to
/// the whole word carries into the next byte only from a byte of `0xfa` or more, which is
/// flagged itself, so the first flagged byte is always the first non-digit.
fn non_digits(word: u64) -> u64 {
    ((word ^ ZEROS) | (word.wrapping_add(0x0606_0606_0606_0606) ^ ZEROS)) & HIGH_NIBBLES
}

/// Eight ASCII digits as their value, or `None` if any byte is not a digit: bytes merged
/// pairwise into 2-digit 16-bit lanes, those into 4-digit 32-bit lanes, then the halves.
fn eight_digits(group: [u8; 8]) -> Option<u64> {
    let word = u64::from_le_bytes(group);
    if non_digits(word) != 0 {
        return None;
    }
    // Little-endian: the first digit is the lowest byte.
    let v = word - ZEROS;
    let v = (v * 10 + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v * 100 + (v >> 16)) & 0x0000_ffff_0000_ffff;
    Some((v * 10_000 + (v >> 32)) & 0xffff_ffff)
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
    fn a_digit_run_stops_at_the_first_non_digit_or_at_max() {
        for len in 0..=24 {
            for bad in [b'\r', b'/', b':', b'-', 0x00, 0x80, 0xfa, 0xff] {
                let mut text = vec![b'4'; len];
                text.push(bad);
                // A carry out of 0xfa..=0xff must not hide the non-digit itself.
                text.extend_from_slice(b"123456789");
                assert_eq!(digit_run(&text, 64), len, "{text:?}");
                assert_eq!(digit_run(&text, 19), len.min(19), "{text:?}");
            }
            assert_eq!(digit_run(&vec![b'0'; len], 64), len);
        }
    }

    proptest::proptest! {
        #[test]
        fn a_digit_run_counts_like_a_byte_loop(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            max in 0usize..40,
        ) {
            let expected = bytes.iter().take(max).take_while(|b| b.is_ascii_digit()).count();
            proptest::prop_assert_eq!(digit_run(&bytes, max), expected);
        }

        #[test]
        fn parse_u64_agrees_with_std(text in "[0-9]{1,21}|[0-9 +-]{0,4}") {
            proptest::prop_assert_eq!(parse_u64(text.as_bytes()), text.parse::<u64>().ok().filter(|_| {
                text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit())
            }));
        }
    }
}

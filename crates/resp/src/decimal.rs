//! Decimal digits read eight at a time: all eight bytes in one 64-bit register (SWAR), as
//! the encoder writes them ([`crate::encode`]).
//!
//! Timestamps are 13 to 19 digits on the wire, two or three of them in every versioned
//! request and reply, so a digit at a time (six or seven instructions each, with checks)
//! was a visible part of the server's and the load tool's work per request. Two readers share
//! the word primitives ([`non_digits`], [`group_value`]): [`leading_digits`] for integer lines
//! (which end at the first non-digit), [`parse_u64`] for arguments (whose length is known and
//! which must be digits throughout).

/// `'0'` in every byte.
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// The high nibble of every byte.
const HIGH_NIBBLES: u64 = 0xf0f0_f0f0_f0f0_f0f0;

/// The most digits a `u64` has.
const MAX_U64_DIGITS: usize = 20;

/// The most digits that always fit in a `u64` (`10^19 - 1 < 2^64`), summed without checks.
pub(crate) const MAX_SAFE_DIGITS: usize = 19;

/// Powers of ten below 10^8, for a partial group.
const POWERS_OF_TEN: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// The value of `digits`: 1 to 20 ASCII digits, leading zeros allowed, nothing else (no
/// sign, no space); `None` for anything else or a value above `u64::MAX`. Never allocates.
///
/// An argument's length is known, so the digits split exactly: the first `len % 8` one at a
/// time, then whole words, each all digits or refused ([`non_digits`]). A 19-digit timestamp
/// is three digits and two words. Only a 20-digit number can overflow, which the checked
/// steps catch.
// Inlined: its caller (an argument parser in another crate) knows the length to expect.
#[inline]
pub fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > MAX_U64_DIGITS {
        return None;
    }
    let (head, words) = digits.split_at(digits.len() % 8);
    let mut value = 0;
    for &byte in head {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    for word in words.as_chunks::<8>().0 {
        let word = u64::from_le_bytes(*word);
        if non_digits(word) != 0 {
            return None;
        }
        value = value
            .checked_mul(100_000_000)?
            .checked_add(group_value(word))?;
    }
    Some(value)
}

/// The ASCII digits at the start of `bytes`, at most `max` of them (`max` at most
/// [`MAX_SAFE_DIGITS`], so the sum cannot overflow): how many there are and their value
/// (0 for none).
///
/// Eight bytes at a time: a word's non-digits are found at once ([`non_digits`]); a whole
/// word of digits adds eight, and a word that ends the run adds its leading digits, shifted
/// to the top of the word and padded with `'0'` below them, as one more group. The last
/// bytes before `max` or the end of `bytes`, fewer than eight, go one at a time (a line's last
/// digits, a whole line when less than a word is buffered).
pub(crate) fn leading_digits(bytes: &[u8], max: usize) -> (usize, u64) {
    debug_assert!(max <= MAX_SAFE_DIGITS, "{max} digits may overflow");
    let (words, tail) = bytes[..bytes.len().min(max)].as_chunks::<8>();
    let (mut count, mut value) = (0, 0);
    for word in words {
        let word = u64::from_le_bytes(*word);
        let flags = non_digits(word);
        if flags == 0 {
            value = value * 100_000_000 + group_value(word);
            count += 8;
            continue;
        }
        // Little-endian: the first byte is the lowest, so the run ends at the lowest flag.
        let run = (flags.trailing_zeros() / 8) as usize;
        if run > 0 {
            let padded = (word << (8 * (8 - run))) | (ZEROS >> (8 * run));
            value = value * POWERS_OF_TEN[run] + group_value(padded);
        }
        return (count + run, value);
    }
    for &byte in tail {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        value = value * 10 + u64::from(digit);
        count += 1;
    }
    (count, value)
}

/// Nonzero in every byte of `word` that is not an ASCII digit (and perhaps in later ones).
///
/// A digit is `0x30..=0x39`: its high nibble is 3, and still is after adding 6. Adding 6 to
/// the whole word carries out of a byte only when that byte is a non-digit (a digit plus 6
/// and any carry stays below `0x40`), which is flagged itself, so bytes before the first
/// non-digit never see a carry and the first flagged byte is always the first non-digit.
fn non_digits(word: u64) -> u64 {
    ((word ^ ZEROS) | (word.wrapping_add(0x0606_0606_0606_0606) ^ ZEROS)) & HIGH_NIBBLES
}

/// The value of eight ASCII digits in one word (the first digit its lowest byte): bytes
/// merged pairwise into 2-digit 16-bit lanes, those into 4-digit 32-bit lanes, then the
/// halves.
fn group_value(word: u64) -> u64 {
    let v = word - ZEROS;
    let v = (v * 10 + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v * 100 + (v >> 16)) & 0x0000_ffff_0000_ffff;
    (v * 10_000 + (v >> 32)) & 0xffff_ffff
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
            // More than 20 digits, even when they are worth less.
            b"000000000000000000000",
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

    /// What [`leading_digits`] computes, a byte at a time.
    fn leading_digits_model(bytes: &[u8], max: usize) -> (usize, u64) {
        let run = bytes.iter().take(max).take_while(|b| b.is_ascii_digit());
        run.fold((0, 0), |(count, value), &b| {
            (count + 1, value * 10 + u64::from(b - b'0'))
        })
    }

    #[test]
    fn leading_digits_stop_at_the_first_non_digit_or_at_max() {
        for len in 0..=24 {
            for bad in [b'\r', b'/', b':', b'-', 0x00, 0x80, 0xfa, 0xff] {
                let mut text: Vec<u8> = (0..len).map(|i| b"9876543210"[i % 10]).collect();
                text.push(bad);
                // A carry out of 0xfa..=0xff must not hide the non-digit itself.
                text.extend_from_slice(b"123456789");
                for max in [0, 1, 7, 8, 9, 16, 19] {
                    let expected = leading_digits_model(&text, max);
                    assert_eq!(leading_digits(&text, max), expected, "{text:?} max {max}");
                }
                assert_eq!(leading_digits(&text, 19).0, len.min(19));
            }
        }
        assert_eq!(
            leading_digits(b"9999999999999999999", 19),
            (19, 9_999_999_999_999_999_999)
        );
    }

    proptest::proptest! {
        #[test]
        fn leading_digits_agree_with_a_byte_loop(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<u8>(),
                    proptest::sample::select(b"0123456789".to_vec()),
                ],
                0..40,
            ),
            max in 0usize..=MAX_SAFE_DIGITS,
        ) {
            let expected = leading_digits_model(&bytes, max);
            proptest::prop_assert_eq!(leading_digits(&bytes, max), expected);
        }

        #[test]
        fn parse_u64_agrees_with_std(text in "[0-9]{1,21}|[0-9 +-]{0,4}") {
            // `str::parse` also takes a leading `+`, which an argument may not carry, and any
            // number of leading zeros, where an argument has at most 20 digits.
            let digits_only = text.bytes().all(|b| b.is_ascii_digit());
            let within = text.len() <= MAX_U64_DIGITS;
            let expected = text.parse::<u64>().ok().filter(|_| digits_only && within);
            proptest::prop_assert_eq!(parse_u64(text.as_bytes()), expected);
        }
    }
}

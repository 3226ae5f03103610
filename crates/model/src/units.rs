//! The one grammar of durations and byte sizes, for every command-line option and
//! environment variable of txcached, txcache-agent and txcache-loadgen (and the node's
//! `CONFIG SET maxmemory`). `txcache up` hands one value to several of them, so they must
//! read it alike.
//!
//! ```text
//! duration = number [unit]    unit: ns, us (µs), ms, s, m, h; no unit: seconds
//! size     = number [unit]    unit: b, k kb kib, m mb mib, g gb gib (all powers of 1024);
//!                             no unit: bytes
//! number   = digits ["." digits]
//! ```
//!
//! Units are case-insensitive, blanks around the value and between number and unit are
//! ignored. A decimal part is exact down to a nanosecond or a byte; anything finer is
//! dropped (`1.5ns` is 1 ns, `1.3kb` is 1331 bytes). No sign, exponent, digit separator or
//! compound value (`1m30s`) is accepted. A value that does not fit (a [`Duration`], a
//! `usize` of bytes) is an error, never saturated.

use std::fmt;
use std::time::Duration;

/// The accepted forms of a duration, as `--help` texts and error messages state them.
pub const DURATION_FORMS: &str =
    "units ns, us, ms, s, m, h; decimals allowed; a bare number is seconds";

/// The accepted forms of a byte size, as `--help` texts and error messages state them.
pub const SIZE_FORMS: &str =
    "units b, k, m, g (or kb/kib, mb/mib, gb/gib: all powers of 1024); a bare number is bytes";

/// Nanoseconds per duration unit; the empty unit is seconds.
const DURATION_UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000), // U+00B5 MICRO SIGN
    ("μs", 1_000), // U+03BC GREEK SMALL LETTER MU
    ("ms", 1_000_000),
    ("", 1_000_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Bytes per size unit; the empty unit is bytes.
const SIZE_UNITS: &[(&str, u128)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1 << 10),
    ("kb", 1 << 10),
    ("kib", 1 << 10),
    ("m", 1 << 20),
    ("mb", 1 << 20),
    ("mib", 1 << 20),
    ("g", 1 << 30),
    ("gb", 1 << 30),
    ("gib", 1 << 30),
];

/// Decimal digits of a fraction that are read: 20 keep `fraction × unit` within a `u128`
/// and lose less than a thousandth of a nanosecond (or byte).
const FRACTION_DIGITS: usize = 20;

/// What a value was meant to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// A duration ([`parse_duration`]).
    Duration,
    /// A byte size ([`parse_size`]).
    Size,
}

/// What is wrong with a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitProblem {
    /// It does not start with a number (`digits` or `digits.digits`).
    NotANumber,
    /// The number is followed by something that is not a unit of the quantity.
    UnknownUnit(String),
    /// It is larger than the quantity can hold.
    TooLarge,
}

/// Why a text is not a duration or a size; its message names the accepted forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    /// The text as given.
    pub input: String,
    /// What it was meant to be.
    pub quantity: Quantity,
    /// What is wrong with it.
    pub problem: UnitProblem,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, example, forms, limit) = match self.quantity {
            Quantity::Duration => (
                "duration",
                "200ms, 1.5s or 2m",
                DURATION_FORMS,
                format!("{} s", u64::MAX),
            ),
            Quantity::Size => (
                "size",
                "4096, 64mb or 1.5gb",
                SIZE_FORMS,
                format!("{} bytes", usize::MAX),
            ),
        };
        let input = &self.input;
        match &self.problem {
            UnitProblem::NotANumber => write!(
                f,
                "{input:?} is not a {what}: expected a number and a unit, e.g. {example}; {forms}"
            ),
            UnitProblem::UnknownUnit(unit) => write!(
                f,
                "unknown {what} unit {unit:?} in {input:?}: expected e.g. {example}; {forms}"
            ),
            UnitProblem::TooLarge => write!(f, "{what} {input:?} is too large (at most {limit})"),
        }
    }
}

impl std::error::Error for UnitError {}

/// Parses a duration: `200ms`, `1.5s`, `2m`, `30` (seconds), … (see the [module](self)).
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let nanos = parse(text, Quantity::Duration, DURATION_UNITS)?;
    let too_large = || error(text, Quantity::Duration, UnitProblem::TooLarge);
    let seconds = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_large())?;
    let subsec = u32::try_from(nanos % 1_000_000_000).map_err(|_| too_large())?;
    Ok(Duration::new(seconds, subsec))
}

/// Parses a byte size: `4096`, `64mb`, `1.5gb`, … (see the [module](self)).
pub fn parse_size(text: &str) -> Result<usize, UnitError> {
    let bytes = parse(text, Quantity::Size, SIZE_UNITS)?;
    usize::try_from(bytes).map_err(|_| error(text, Quantity::Size, UnitProblem::TooLarge))
}

fn error(text: &str, quantity: Quantity, problem: UnitProblem) -> UnitError {
    UnitError {
        input: text.to_owned(),
        quantity,
        problem,
    }
}

/// `number [unit]` → the number times the unit's factor, rounded down.
fn parse(text: &str, quantity: Quantity, units: &[(&str, u128)]) -> Result<u128, UnitError> {
    let fail = |problem| error(text, quantity, problem);
    let trimmed = text.trim();
    let integer_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (integer, rest) = trimmed.split_at(integer_end);
    if integer.is_empty() {
        return Err(fail(UnitProblem::NotANumber));
    }
    let (fraction, rest) = match rest.strip_prefix('.') {
        Some(after) => {
            let end = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            if end == 0 {
                return Err(fail(UnitProblem::NotANumber));
            }
            after.split_at(end)
        }
        None => ("", rest),
    };
    let unit = rest.trim_start().to_lowercase();
    let factor = units
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, factor)| *factor)
        .ok_or_else(|| {
            if unit.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
                fail(UnitProblem::NotANumber)
            } else {
                fail(UnitProblem::UnknownUnit(rest.trim_start().to_owned()))
            }
        })?;
    let too_large = || fail(UnitProblem::TooLarge);
    let whole = integer
        .bytes()
        .try_fold(0u128, |value, digit| {
            value.checked_mul(10)?.checked_add(u128::from(digit - b'0'))
        })
        .and_then(|value| value.checked_mul(factor))
        .ok_or_else(too_large)?;
    let fraction = &fraction[..fraction.len().min(FRACTION_DIGITS)];
    let (numerator, denominator) = fraction.bytes().fold((0u128, 1u128), |(n, d), digit| {
        (n * 10 + u128::from(digit - b'0'), d * 10)
    });
    // numerator < 10^20 and factor < 2^42, so the product fits in a u128 (< 2^109).
    whole
        .checked_add(numerator * factor / denominator)
        .ok_or_else(too_large)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem_of_duration(text: &str) -> Option<UnitProblem> {
        parse_duration(text).err().map(|e| e.problem)
    }

    fn problem_of_size(text: &str) -> Option<UnitProblem> {
        parse_size(text).err().map(|e| e.problem)
    }

    #[test]
    fn durations_every_copy_accepted_still_parse() {
        let cases = [
            // the node's and the agent's: whole numbers, ms/s/m(/h), bare seconds, any case
            ("200ms", Duration::from_millis(200)),
            ("1ms", Duration::from_millis(1)),
            ("0ms", Duration::ZERO),
            ("50ms", Duration::from_millis(50)),
            ("30s", Duration::from_secs(30)),
            ("120s", Duration::from_secs(120)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("30", Duration::from_secs(30)),
            ("0", Duration::ZERO),
            ("1MS", Duration::from_millis(1)),
            ("5S", Duration::from_secs(5)),
            (" 30 s ", Duration::from_secs(30)),
            // loadgen's: decimals
            ("0.5s", Duration::from_millis(500)),
            ("2.5", Duration::from_millis(2500)),
            ("1.0s", Duration::from_secs(1)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn durations_in_every_unit() {
        let cases = [
            ("7ns", Duration::from_nanos(7)),
            ("7us", Duration::from_micros(7)),
            ("7µs", Duration::from_micros(7)),
            ("7μs", Duration::from_micros(7)),
            ("1.5ms", Duration::from_micros(1500)),
            ("0.25m", Duration::from_secs(15)),
            ("1.5h", Duration::from_secs(5400)),
            ("0.000000001s", Duration::from_nanos(1)),
            // finer than a nanosecond is dropped, as floating point noise would be
            ("1.5ns", Duration::from_nanos(1)),
            ("0.30000000000000004s", Duration::from_millis(300)),
            (
                "0.1234567891234567891234567s",
                Duration::from_nanos(123_456_789),
            ),
            ("007s", Duration::from_secs(7)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn malformed_durations_are_refused() {
        for text in [
            "", " ", "s", "ms", "-1s", "+1s", ".5s", "5.s", "5..5s", "1.2.3s", "inf", "NaN",
            "1 000ms", "1.5 5s",
        ] {
            assert_eq!(
                problem_of_duration(text),
                Some(UnitProblem::NotANumber),
                "{text:?}"
            );
        }
        for (text, unit) in [
            ("1y", "y"),
            ("5d", "d"),
            ("1sec", "sec"),
            ("1m30s", "m30s"),
            ("3 mins", "mins"),
            ("10mb", "mb"),
            ("1e3s", "e3s"),
            ("1_000ms", "_000ms"),
            ("0x10s", "x10s"),
        ] {
            assert_eq!(
                problem_of_duration(text),
                Some(UnitProblem::UnknownUnit(unit.to_owned())),
                "{text:?}"
            );
        }
    }

    #[test]
    fn durations_that_do_not_fit_are_refused_not_saturated() {
        let max_seconds = u64::MAX.to_string();
        assert_eq!(
            parse_duration(&max_seconds),
            Ok(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            parse_duration(&format!("{max_seconds}.999999999")),
            Ok(Duration::MAX)
        );
        for text in [
            "18446744073709551616",
            "18446744073709551616s",
            "5124095576030432h",
            "307445734561825861m",
            "99999999999999999999999999999999999999999ns",
            "999999999999999999999999999999999999999999999999h",
        ] {
            assert_eq!(
                problem_of_duration(text),
                Some(UnitProblem::TooLarge),
                "{text:?}"
            );
        }
    }

    #[test]
    fn sizes_every_copy_accepted_still_parse() {
        let cases = [
            ("64mb", 64 << 20),
            ("16mb", 16 << 20),
            ("256mb", 256 << 20),
            ("1gb", 1 << 30),
            ("4gb", 4 << 30),
            ("1GB", 1 << 30),
            ("512MB", 512 << 20),
            ("33554432", 32 << 20),
            ("100", 100),
            ("0", 0),
            ("10b", 10),
            ("8k", 8 << 10),
            ("8kb", 8 << 10),
            ("2m", 2 << 20),
            ("3g", 3 << 30),
            (" 64 mb ", 64 << 20),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_size(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn sizes_in_binary_units_and_decimals() {
        let cases = [
            ("1kib", 1 << 10),
            ("1KiB", 1 << 10),
            ("64MiB", 64 << 20),
            ("2gib", 2 << 30),
            ("1.5gb", 3 << 29),
            ("0.5k", 512),
            ("1.3kb", 1331),
            ("1.9", 1),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_size(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn malformed_sizes_are_refused() {
        for text in [
            "", "mb", "etc", "-1mb", "+64mb", ".5gb", "1.gb", "1 000", "1.5.5gb",
        ] {
            assert_eq!(
                problem_of_size(text),
                Some(UnitProblem::NotANumber),
                "{text:?}"
            );
        }
        for (text, unit) in [
            ("5tb", "tb"),
            ("64 megabytes", "megabytes"),
            ("1kbit", "kbit"),
            ("10ms", "ms"),
            ("5TB", "TB"),
            ("1e6", "e6"),
            ("64_000", "_000"),
        ] {
            assert_eq!(
                problem_of_size(text),
                Some(UnitProblem::UnknownUnit(unit.to_owned())),
                "{text:?}"
            );
        }
    }

    #[test]
    fn sizes_that_do_not_fit_are_refused() {
        assert_eq!(parse_size(&usize::MAX.to_string()), Ok(usize::MAX));
        let past = u128::try_from(usize::MAX).unwrap_or(u128::MAX) + 1;
        for text in [
            past.to_string(),
            "99999999999999999999gb".to_owned(),
            "9".repeat(60),
        ] {
            assert_eq!(
                problem_of_size(&text),
                Some(UnitProblem::TooLarge),
                "{text:?}"
            );
        }
    }

    #[test]
    fn messages_name_the_accepted_forms() {
        let message = |result: Result<Duration, UnitError>| result.err().map(|e| e.to_string());
        let not_a_number = message(parse_duration("soon")).unwrap_or_default();
        assert!(not_a_number.contains("\"soon\" is not a duration"));
        assert!(not_a_number.contains(DURATION_FORMS));
        let unit = message(parse_duration("1y")).unwrap_or_default();
        assert!(unit.contains("unknown duration unit \"y\""));
        assert!(unit.contains(DURATION_FORMS));
        let size = parse_size("5tb").err().map(|e| e.to_string());
        let size = size.unwrap_or_default();
        assert!(size.contains("unknown size unit \"tb\"") && size.contains(SIZE_FORMS));
        let large = parse_size("99999999999999999999gb")
            .err()
            .map(|e| e.to_string());
        assert!(large.unwrap_or_default().contains("too large"));
        // One line: the node sends CONFIG SET's error to clients as a RESP error.
        let hostile = parse_size("1\r\nzz").err().map(|e| e.to_string());
        assert!(!hostile.unwrap_or_default().contains(['\r', '\n']));
    }
}

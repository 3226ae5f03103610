//! Parsers of the command-line values, and the limits that keep a run bounded.

use crate::dist::Size;
use crate::workload::KeyDist;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;
use txcache_model::units;

/// The longest measured run accepted.
pub const MAX_DURATION: Duration = Duration::from_secs(600);

/// `G:S` → the fraction of lookups, `G / (G + S)` (`90:10` → 0.9, `30:1` → 0.968).
pub fn parse_mix(text: &str) -> Result<f64, String> {
    let (gets, sets) = text
        .split_once(':')
        .ok_or_else(|| format!("mix {text:?}: expected GETS:SETS, e.g. 90:10"))?;
    let number = |s: &str| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("mix {text:?}: {s:?} is not a non-negative number"))
    };
    let (gets, sets) = (number(gets)?, number(sets)?);
    if gets + sets <= 0.0 {
        return Err(format!("mix {text:?}: both parts are zero"));
    }
    Ok(gets / (gets + sets))
}

/// `etc`, or a byte size in the shared grammar ([`units::parse_size`]) up to
/// [`MAX_VALUE_LEN`](crate::dist::MAX_VALUE_LEN).
pub fn parse_value_size(text: &str) -> Result<Size, String> {
    if text.trim().eq_ignore_ascii_case("etc") {
        return Ok(Size::Etc);
    }
    match units::parse_size(text) {
        Ok(n) if n <= crate::dist::MAX_VALUE_LEN => Ok(Size::Fixed(n)),
        Ok(_) => Err(format!(
            "size {text:?}: at most {} bytes",
            crate::dist::MAX_VALUE_LEN
        )),
        Err(error) => Err(format!("{error}; or etc")),
    }
}

/// `uniform`, `zipf` (exponent 0.99) or `zipf:<exponent>`.
pub fn parse_key_dist(text: &str) -> Result<KeyDist, String> {
    match text.split_once(':') {
        None if text == "uniform" => Ok(KeyDist::Uniform),
        None if text == "zipf" => Ok(KeyDist::Zipf(0.99)),
        Some(("zipf", e)) => match e.parse::<f64>() {
            Ok(e) if e > 0.0 && e <= 10.0 => Ok(KeyDist::Zipf(e)),
            _ => Err(format!("{text:?}: the Zipf exponent must be in (0, 10]")),
        },
        _ => Err(format!(
            "{text:?}: expected uniform, zipf or zipf:<exponent>"
        )),
    }
}

/// A duration in the shared grammar ([`units::parse_duration`]), at most [`MAX_DURATION`].
pub fn parse_run_duration(text: &str) -> Result<Duration, String> {
    let duration = units::parse_duration(text).map_err(|error| error.to_string())?;
    if duration > MAX_DURATION {
        return Err(format!(
            "duration {text:?}: at most {} s",
            MAX_DURATION.as_secs()
        ));
    }
    Ok(duration)
}

/// The target's address, which must be a loopback address: this tool loads only servers on
/// this machine.
pub fn loopback_target(text: &str) -> Result<SocketAddr, String> {
    let address = text
        .to_socket_addrs()
        .map_err(|e| format!("target {text:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("target {text:?}: no address"))?;
    if !address.ip().is_loopback() {
        return Err(format!(
            "target {text:?}: only loopback addresses are allowed"
        ));
    }
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes() {
        assert_eq!(parse_mix("90:10"), Ok(0.9));
        assert!((parse_mix("30:1").unwrap_or(0.0) - 30.0 / 31.0).abs() < 1e-12);
        assert_eq!(parse_mix("1:0"), Ok(1.0));
        assert!(parse_mix("0:0").is_err() && parse_mix("90").is_err() && parse_mix("a:1").is_err());
        assert!(parse_mix("-1:2").is_err());
    }

    #[test]
    fn sizes_and_key_distributions() {
        assert_eq!(parse_value_size("etc"), Ok(Size::Etc));
        assert_eq!(parse_value_size("ETC"), Ok(Size::Etc));
        assert_eq!(parse_value_size("100"), Ok(Size::Fixed(100)));
        assert_eq!(parse_value_size("4kb"), Ok(Size::Fixed(4096)));
        assert_eq!(parse_value_size("1000000"), Ok(Size::Fixed(1_000_000)));
        assert!(parse_value_size("2000000").is_err() && parse_value_size("1mb").is_err());
        assert!(parse_value_size("big").is_err() && parse_value_size("-1").is_err());
        assert_eq!(parse_key_dist("uniform"), Ok(KeyDist::Uniform));
        assert_eq!(parse_key_dist("zipf"), Ok(KeyDist::Zipf(0.99)));
        assert_eq!(parse_key_dist("zipf:1.2"), Ok(KeyDist::Zipf(1.2)));
        assert!(parse_key_dist("zipf:0").is_err() && parse_key_dist("gauss").is_err());
    }

    #[test]
    fn durations_are_bounded() {
        assert_eq!(parse_run_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_run_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_run_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_run_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_run_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_run_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_run_duration("1.0s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_run_duration("10m"), Ok(MAX_DURATION));
        assert!(parse_run_duration("11m").is_err() && parse_run_duration("-1s").is_err());
        assert!(parse_run_duration("5h").is_err() && parse_run_duration("1y").is_err());
    }

    #[test]
    fn only_loopback_targets() {
        assert!(loopback_target("127.0.0.1:6379").is_ok());
        assert!(loopback_target("[::1]:6379").is_ok());
        assert!(loopback_target("10.0.0.1:6379").is_err());
        assert!(loopback_target("8.8.8.8:53").is_err());
    }
}

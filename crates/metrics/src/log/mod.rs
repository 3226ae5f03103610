//! The log setup both servers share: a checked `--log` filter, the stderr subscriber, and
//! [`Repeats`]/[`Throttle`] for lines that repeat.
//!
//! `tracing_subscriber`'s `EnvFilter` reads any word it does not know as a target, so a typo
//! such as `warnn` would enable nothing and silence every line. Here each directive must be
//! a level, `target=level`, or a target the binary names; anything else stops the start.

use tracing_subscriber::EnvFilter;

mod repeats;

pub use repeats::{rounded, Repeats, Report, Throttle};

/// The filter used when the setting is empty (an empty environment variable included).
pub const DEFAULT_FILTER: &str = "info";

/// The level names a directive may use (any case).
pub const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Checks `value` (a `--log` setting) and builds its filter. `setting` names it in the error
/// (`--log (TXCACHED_LOG)`); `targets` are the targets the binary logs under (crate names,
/// each also covering its `::` modules). An empty value means [`DEFAULT_FILTER`].
pub fn filter(value: &str, setting: &str, targets: &[&str]) -> Result<EnvFilter, String> {
    let value = if value.trim().is_empty() {
        DEFAULT_FILTER
    } else {
        value.trim()
    };
    for directive in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        check_directive(directive, targets).map_err(|problem| {
            format!(
                "{setting}: {problem}; levels are {}, and this binary's targets are {}",
                LEVELS.join(", "),
                targets.join(", ")
            )
        })?;
    }
    EnvFilter::builder()
        .parse(value)
        .map_err(|error| format!("{setting}: {value:?} is not a log filter: {error}"))
}

/// Installs the process's subscriber: lines on stderr filtered by `filter`, without targets,
/// coloured only on a terminal.
pub fn init(filter: EnvFilter) {
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Whether one directive is a level, `target=level` (span filters included), or one of
/// `targets`; the problem otherwise.
fn check_directive(directive: &str, targets: &[&str]) -> Result<(), String> {
    let is_level = |word: &str| LEVELS.iter().any(|level| level.eq_ignore_ascii_case(word));
    if let Some((target, level)) = directive.rsplit_once('=') {
        if target.is_empty() || !is_level(level) {
            return Err(format!(
                "{directive:?} is not target=level (the level must be one of the levels)"
            ));
        }
        return Ok(());
    }
    if is_level(directive) {
        return Ok(());
    }
    // A bare target (all its levels): only a known one, since a typo of a level looks alike.
    let target = directive.split('[').next().unwrap_or(directive);
    let known = targets.iter().any(|known| {
        target == *known
            || target
                .strip_prefix(known)
                .is_some_and(|rest| rest.starts_with("::"))
    });
    if known {
        Ok(())
    } else {
        Err(format!(
            "{directive:?} is neither a level, nor target=level, nor a target of this binary"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGETS: [&str; 2] = ["txcached", "txcache_store"];

    fn check(value: &str) -> Result<String, String> {
        filter(value, "--log", &TARGETS).map(|filter| filter.to_string())
    }

    #[test]
    fn levels_targets_and_target_levels_are_accepted() {
        for value in [
            "warn",
            "DEBUG",
            "info,txcached=debug",
            "txcache_store",
            "txcached::server",
            "tokio=trace",
            "txcached[conn]=debug",
            "info,",
        ] {
            assert!(check(value).is_ok(), "{value}: {:?}", check(value));
        }
    }

    #[test]
    fn an_empty_setting_means_the_default() {
        assert_eq!(check("").unwrap_or_default(), DEFAULT_FILTER);
        assert_eq!(check("  ").unwrap_or_default(), DEFAULT_FILTER);
    }

    #[test]
    fn a_typo_is_refused_naming_levels_and_targets() {
        for value in ["warnn", "info,debgu", "txcached=loud", "=info", "txcachd"] {
            let message = check(value).expect_err(value);
            assert!(message.starts_with("--log: "), "{message}");
            assert!(message.contains("error, warn, info"), "{message}");
            assert!(message.contains("txcached, txcache_store"), "{message}");
        }
    }
}

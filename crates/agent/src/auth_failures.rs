//! Libraries refused at `AUTH` for a wrong password: counted for the metrics
//! (`auth_failures`) and logged with the client's address — the first, then at most one
//! summary per [`LOG_INTERVAL`] — so that a library given the wrong password, or someone
//! guessing, shows in the log without flooding it. Counted for the process's life, across
//! terms: the server of every term (active or standing by) reports here.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use txcache_metrics::log::{self, Report, Throttle};

/// How often failed logins that go on are logged again, as one summary line.
pub const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Failed logins since the agent started.
static COUNT: AtomicU64 = AtomicU64::new(0);

/// What has been logged of them.
static LOGGED: Throttle = Throttle::new(LOG_INTERVAL);

/// A library at `client` (unknown for a connection without an address) sent `AUTH` with a
/// wrong password: counted, and logged as [`LOG_INTERVAL`] allows.
pub fn record(client: Option<SocketAddr>) {
    COUNT.fetch_add(1, Ordering::Relaxed);
    let client = client.map_or_else(|| "unknown".to_owned(), |address| address.to_string());
    match LOGGED.occurred() {
        Report::First => tracing::warn!(
            client,
            "a library failed AUTH (wrong password): give it the agent's --password \
             (TXCACHE_AGENT_PASSWORD); failed logins are counted in auth_failures and logged \
             again at most once every {LOG_INTERVAL:?}"
        ),
        Report::Summary {
            count, failing_for, ..
        } => {
            let since_first = log::rounded(failing_for);
            tracing::warn!(
                last_client = client,
                failures = count,
                ?since_first,
                "libraries failed AUTH (wrong password) {count} times since the last such line"
            );
        }
        Report::Quiet => {}
    }
}

/// Failed logins since the agent started.
pub fn count() -> u64 {
    COUNT.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failed_login_is_counted() {
        let before = count();
        let client = "10.0.0.7:51234".parse().ok();
        for _ in 0..3 {
            record(client);
        }
        record(None);
        // Other tests may fail logins at the same time: at least these four.
        assert!(count() >= before + 4, "{before} then {}", count());
    }
}

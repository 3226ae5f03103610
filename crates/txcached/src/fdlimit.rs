//! The open-file limit. Each client holds one descriptor, and the usual soft limit (1024) is
//! far below the default `--max-clients` (10,000): past it `accept` fails with `EMFILE` and
//! the client waits unanswered. So the node raises its soft limit toward the hard one at
//! start, as Redis does, and says so when even the hard limit is too low.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors kept for the node beside its clients: the listeners, the metrics endpoint's
/// connections (up to 64), the runtime's own (epoll, wakers), stdio. Redis reserves 32 for
/// itself; the metrics endpoint alone may take 64.
pub const RESERVED: u64 = 128;

/// What to do with the soft limit, decided from the limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The soft limit to set (`None`: keep it).
    pub raise_to: Option<u64>,
    /// The clients the resulting limit allows when fewer than `--max-clients` (`None`: all).
    pub short_of: Option<u64>,
}

/// The plan for `max_clients` clients under a soft and a hard limit (`None`: unlimited).
pub fn plan(soft: Option<u64>, hard: Option<u64>, max_clients: usize) -> Plan {
    let wanted = u64::try_from(max_clients)
        .unwrap_or(u64::MAX)
        .saturating_add(RESERVED);
    let Some(soft) = soft else {
        return Plan {
            raise_to: None,
            short_of: None,
        };
    };
    let reachable = wanted.min(hard.unwrap_or(u64::MAX)).max(soft);
    Plan {
        raise_to: (reachable > soft).then_some(reachable),
        short_of: (reachable < wanted).then(|| reachable.saturating_sub(RESERVED)),
    }
}

/// Raises the soft open-file limit for `max_clients` clients and logs what it did: at info
/// when it raised the limit, a warning with what to do when `max_clients` stays out of reach.
pub fn raise_for(max_clients: usize) {
    let limits = getrlimit(Resource::Nofile);
    let plan = plan(limits.current, limits.maximum, max_clients);
    let mut in_force = limits.current;
    if let Some(raise_to) = plan.raise_to {
        let raised = Rlimit {
            current: Some(raise_to),
            maximum: limits.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                in_force = Some(raise_to);
                tracing::info!(
                    from = limits.current,
                    to = raise_to,
                    max_clients,
                    "raised the open-file limit (soft RLIMIT_NOFILE) for --max-clients"
                );
            }
            Err(error) => tracing::warn!(%error, limit = limits.current,
                "could not raise the open-file limit (soft RLIMIT_NOFILE); raise it before starting the node (ulimit -n, or LimitNOFILE= under systemd)"),
        }
    }
    let clients = in_force.map(|limit| limit.saturating_sub(RESERVED));
    if let Some(clients) = clients.filter(|clients| *clients < max_clients as u64) {
        tracing::warn!(
            limit = in_force,
            hard_limit = limits.maximum,
            reachable_clients = clients,
            max_clients,
            "the open-file limit allows only about {clients} clients, fewer than --max-clients: \
             raise the hard limit (ulimit -Hn as root, LimitNOFILE= in the systemd unit, nofile in \
             /etc/security/limits.conf) or lower --max-clients"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_toward_the_hard_one_and_no_further_than_needed() {
        let enough = plan(Some(1024), Some(1 << 20), 10_000);
        assert_eq!(enough.raise_to, Some(10_000 + RESERVED));
        assert_eq!(enough.short_of, None);
        let capped = plan(Some(1024), Some(4096), 10_000);
        assert_eq!(capped.raise_to, Some(4096));
        assert_eq!(capped.short_of, Some(4096 - RESERVED));
        let unlimited_hard = plan(Some(1024), None, 100);
        assert_eq!(unlimited_hard.raise_to, None, "1024 is already enough");
        let unlimited = plan(None, None, 10_000);
        assert_eq!((unlimited.raise_to, unlimited.short_of), (None, None));
        let stuck = plan(Some(1024), Some(1024), 10_000);
        assert_eq!(
            (stuck.raise_to, stuck.short_of),
            (None, Some(1024 - RESERVED))
        );
    }
}

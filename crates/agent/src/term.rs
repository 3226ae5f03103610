//! Which agent may act: this process's term as the active agent ([`Term`]) or, on a
//! standby, who holds the lease ([`Holder`]). Pure state; `lease.rs` keeps it current.
//!
//! Several agents may run against one database; the one holding the lease in PostgreSQL
//! (`txcache.agent_lease`) streams, pins and delivers, and the others wait. A term ends
//! when the lease is lost, and before that, by this process's own clock, when it has not
//! been renewed in time: an agent stopped, hung or cut off from the database stops acting
//! *before* a standby can take the lease (docs/agent.md, "High availability").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One term as the active agent: the lease's epoch, and until when this process may act.
#[derive(Debug)]
pub struct Term {
    epoch: u64,
    holder: String,
    valid_until: Mutex<Instant>,
    ended: AtomicBool,
}

impl Term {
    /// A term of `epoch`, held as `holder`, valid until `valid_until` unless extended.
    pub fn new(epoch: u64, holder: impl Into<String>, valid_until: Instant) -> Self {
        Self {
            epoch,
            holder: holder.into(),
            valid_until: Mutex::new(valid_until),
            ended: AtomicBool::new(false),
        }
    }

    /// A term that never runs out: for tests of parts that check one.
    #[cfg(test)]
    pub fn unbounded() -> Self {
        Self::new(
            0,
            "test",
            Instant::now() + std::time::Duration::from_secs(100 * 365 * 86_400),
        )
    }

    /// The lease's epoch: nodes refuse stream commands from an older one (`TXEPOCH`).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How this agent names itself in the lease (and standbys name it to libraries).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Whether this process may act now: the term has not ended and its last renewal is
    /// recent enough that no standby can have taken the lease.
    pub fn valid(&self) -> bool {
        !self.ended.load(Ordering::Acquire) && Instant::now() < *self.lock()
    }

    /// `Ok` while [`valid`](Self::valid); else [`LeaseLapsed`], saying why nothing is done.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.valid() {
            return Ok(());
        }
        Err(LeaseLapsed(self.epoch).into())
    }

    /// A renewal succeeded: the term is valid until `until` (never shortened).
    pub fn extend(&self, until: Instant) {
        let mut valid_until = self.lock();
        *valid_until = (*valid_until).max(until);
    }

    /// The lease was lost (or released): the term is over for good.
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.valid_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// On a standby: the lease's holder as last read, for the libraries' `STANDBY` replies.
#[derive(Debug, Default)]
pub struct Holder {
    current: Mutex<Option<(String, u64)>>,
}

impl Holder {
    /// Records the holder and epoch just read (`None`: nobody holds it).
    pub fn set(&self, holder: Option<(String, u64)>) {
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = holder;
    }

    /// Who holds the lease, in words.
    pub fn describe(&self) -> String {
        match &*self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some((holder, epoch)) => format!("{holder}, epoch {epoch}"),
            None => "none yet".to_owned(),
        }
    }
}

/// What a process whose term is over answers each thing it was to do: it acts no more,
/// whatever it was doing (a node's feed, a pin) — no failure of that thing itself.
#[derive(Debug, thiserror::Error)]
#[error("this agent's lease (epoch {0}) was not renewed in time or was taken over: it acts no more until it holds the lease again")]
pub struct LeaseLapsed(pub u64);

#[cfg(test)]
mod tests {
    use super::{Holder, LeaseLapsed, Term};
    use std::time::{Duration, Instant};

    #[test]
    fn a_term_is_valid_until_its_deadline_or_its_end() {
        let term = Term::new(3, "a", Instant::now() + Duration::from_secs(60));
        assert!(term.valid() && term.check().is_ok());
        term.end();
        assert!(!term.valid());
        let error = term.check().unwrap_err().context("feeding a node");
        assert!(error.downcast_ref::<LeaseLapsed>().is_some(), "{error:#}");
    }

    #[test]
    fn a_term_runs_out_unless_renewed_and_is_never_shortened() {
        let term = Term::new(1, "a", Instant::now());
        assert!(!term.valid());
        term.extend(Instant::now() + Duration::from_secs(60));
        assert!(term.valid());
        term.extend(Instant::now());
        assert!(term.valid());
        assert_eq!(term.epoch(), 1);
    }

    #[test]
    fn a_holder_is_described() {
        let holder = Holder::default();
        assert_eq!(holder.describe(), "none yet");
        holder.set(Some(("127.0.0.1:6390 (pid 7)".into(), 4)));
        assert_eq!(holder.describe(), "127.0.0.1:6390 (pid 7), epoch 4");
    }
}

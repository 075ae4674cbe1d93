//! The leadership gate (docs/design.md §4.2): whether this replica may call the backend
//! now, asked by every backend call and right before every create is sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// An extra leadership check evaluated at call time (e.g. a lease deadline).
pub type LeaderCheck = Arc<dyn Fn() -> bool + Send + Sync>;

/// Whether this replica may call the backend. Cheap to clone; clones share `close`.
#[derive(Clone)]
pub struct LeaderGate {
    leader: watch::Receiver<bool>,
    check: Option<LeaderCheck>,
    closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for LeaderGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderGate")
            .field("open", &self.is_open())
            .finish()
    }
}

impl LeaderGate {
    /// A gate that is always open (single replica, tests) until closed.
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        // The receiver keeps the last value after the sender is dropped.
        drop(tx);
        Self::new(rx)
    }

    /// A gate driven by a leadership signal.
    pub fn new(leader: watch::Receiver<bool>) -> Self {
        Self {
            leader,
            check: None,
            closed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Also requires `check()` at every call (closes the window between a lease expiring on
    /// this process's clock and the signal flipping).
    pub fn with_check(mut self, check: LeaderCheck) -> Self {
        self.check = Some(check);
        self
    }

    /// Closes the gate for good (shutdown): no new backend call starts.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// True while this replica holds the lease and the gate is not closed.
    pub fn is_open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
            && *self.leader.borrow()
            && self.check.as_ref().is_none_or(|check| check())
    }
}

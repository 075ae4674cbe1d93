//! Bounded pressure on vCenter (DESIGN.md §4.7) and the leadership gate (§4.2): every
//! backend call passes through [`CallGate::enter`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// Whether this replica may call the backend. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LeaderGate {
    leader: watch::Receiver<bool>,
}

impl LeaderGate {
    /// A gate that is always open (single replica, tests).
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        // The receiver keeps the last value after the sender is dropped.
        drop(tx);
        Self { leader: rx }
    }

    /// A gate driven by a leadership signal.
    pub fn new(leader: watch::Receiver<bool>) -> Self {
        Self { leader }
    }

    /// True while this replica holds the lease.
    pub fn is_open(&self) -> bool {
        *self.leader.borrow()
    }
}

/// Concurrency limit, request rate limit and leadership check for backend calls.
pub struct CallGate {
    slots: Arc<Semaphore>,
    min_interval: Option<Duration>,
    next_start: Mutex<Instant>,
    leader: LeaderGate,
}

/// The backend call was not started because this replica is not the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this replica does not hold the leader lease; backend calls are not allowed")]
pub struct NotLeader;

impl CallGate {
    /// At most `max_concurrent` calls in flight and at most `requests_per_second` started
    /// per second (`None` = unlimited).
    pub fn new(max_concurrent: usize, requests_per_second: Option<f64>, leader: LeaderGate) -> Self {
        let min_interval = requests_per_second
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| Duration::from_secs_f64(1.0 / r));
        Self {
            slots: Arc::new(Semaphore::new(max_concurrent.max(1))),
            min_interval,
            next_start: Mutex::new(Instant::now()),
            leader,
        }
    }

    /// Waits for a slot and the rate limit, then checks leadership. Hold the permit for
    /// the duration of the call.
    pub async fn enter(&self) -> Result<OwnedSemaphorePermit, NotLeader> {
        if !self.leader.is_open() {
            return Err(NotLeader);
        }
        let permit = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| NotLeader)?;
        if let Some(interval) = self.min_interval {
            let start = {
                let mut next = self.next_start.lock().await;
                let start = (*next).max(Instant::now());
                *next = start + interval;
                start
            };
            tokio::time::sleep_until(start).await;
        }
        // Leadership may have been lost while waiting: check again right before the call.
        if !self.leader.is_open() {
            return Err(NotLeader);
        }
        Ok(permit)
    }

    /// Calls in flight now.
    pub fn in_flight(&self, max_concurrent: usize) -> usize {
        max_concurrent.saturating_sub(self.slots.available_permits())
    }
}

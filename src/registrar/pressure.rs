//! Bounded pressure on vCenter (docs/design.md §4.7): every backend call passes through
//! [`CallGate::enter`], which also asks the [`LeaderGate`] (§4.2).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::leader_gate::LeaderGate;
use super::slots::{Lane, Slot, Slots};

/// Concurrency limit, request rate limit and leadership check for backend calls.
pub struct CallGate {
    slots: Arc<Slots>,
    rate: Option<RateLimit>,
    leader: LeaderGate,
}

/// At most one call start per `interval` on average, with up to `burst` starts at once
/// (a generic cell rate algorithm: `due` is when the next start would be on time if the
/// calls had been evenly spaced).
struct RateLimit {
    interval: Duration,
    /// How far ahead of its even spacing a start may be: `(burst - 1) × interval`.
    tolerance: Duration,
    due: Mutex<Instant>,
}

impl RateLimit {
    /// Reserves the next start and returns when it may happen (`now` or later).
    async fn reserve(&self) -> Instant {
        let mut due = self.due.lock().await;
        let now = Instant::now();
        let earliest = due.checked_sub(self.tolerance).unwrap_or(*due);
        let start = earliest.max(now);
        *due = (*due).max(start) + self.interval;
        start
    }
}

/// The backend call was not started because this replica is not the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this replica does not hold the leader lease; backend calls are not allowed")]
pub struct NotLeader;

impl CallGate {
    /// At most `max_concurrent` calls in flight and at most `requests_per_second` started
    /// per second on average (`None` = unlimited). As many calls as there are slots may
    /// start at once (what the concurrency limit allows anyway); any further start waits
    /// for its share of the rate.
    pub fn new(
        max_concurrent: usize,
        requests_per_second: Option<f64>,
        leader: LeaderGate,
    ) -> Self {
        let slots = max_concurrent.max(1);
        let rate = requests_per_second
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| {
                let interval = Duration::from_secs_f64(1.0 / r);
                let burst = u32::try_from(slots).unwrap_or(u32::MAX);
                RateLimit {
                    interval,
                    tolerance: interval.saturating_mul(burst - 1),
                    due: Mutex::new(Instant::now()),
                }
            });
        Self {
            slots: Slots::new(slots),
            rate,
            leader,
        }
    }

    /// Waits for a slot in `lane` and for the rate limit, then checks leadership. Hold the
    /// slot for the duration of the call.
    pub async fn enter(&self, lane: Lane) -> Result<Slot, NotLeader> {
        if !self.leader.is_open() {
            return Err(NotLeader);
        }
        let permit = self.slots.acquire(lane).await;
        self.admit().await?;
        Ok(permit)
    }

    /// Admits one more call under a slot the caller already holds (an operation going on
    /// to its next call): waits for the rate limit, then checks leadership. On
    /// [`NotLeader`] the caller should drop the slot.
    pub async fn reenter(&self, _held: &Slot) -> Result<(), NotLeader> {
        self.admit().await
    }

    async fn admit(&self) -> Result<(), NotLeader> {
        if let Some(rate) = &self.rate {
            let start = rate.reserve().await;
            // Only when the rate binds: a timer rounds up to the next millisecond tick of
            // tokio's clock, which, held with a slot, would idle it on every call.
            if start > Instant::now() {
                tokio::time::sleep_until(start).await;
            }
        }
        // Leadership may have been lost while waiting: check again right before the call.
        if !self.leader.is_open() {
            return Err(NotLeader);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "pressure_tests.rs"]
mod tests;

//! Every delay before volmig tries something again, in one place (docs/design.md §4.6):
//! the one backoff ([`RetryPolicy`], capped exponential delays with optional jitter, used by
//! the registrar's in-call retries, the controller's requeues and leader election's watch
//! and renewal retries through kube-runtime's [`Backoff`] trait), the fixed requeue delays
//! of the controller and the registrar, and [`Requeue`], what a failure leads to
//! (`k8s::error_class::after_kube_error` for a failed Kubernetes call). It imports nothing
//! from the crate.

use std::time::Duration;

use kube::runtime::utils::Backoff;
use rand::Rng;

/// How soon a reconciliation that failed for a transient reason runs again.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(5);

/// How soon to run a name again after its work panicked.
pub const PANIC_REQUEUE: Duration = Duration::from_secs(5);

/// How soon to look again at an object whose deletion waits for a create in flight.
pub const DELETION_WAIT: Duration = Duration::from_secs(5);

/// How soon to look again before the PV index holds every PV.
pub const INDEX_WAIT: Duration = Duration::from_millis(500);

/// How soon the registrar looks again for a volume another registration of the same disk
/// (a create in flight) may still produce (`RegistrarConfig::adoption_poll`).
pub const DEFAULT_ADOPTION_POLL: Duration = Duration::from_secs(5);

/// How soon the registrar looks again for the volume the CSI driver's syncer registers
/// while volmig follows it (`RegistrarConfig::follow_poll`).
pub const DEFAULT_FOLLOW_POLL: Duration = Duration::from_secs(15);

/// What to do after a failed action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Nothing changes by retrying: wait for a change of the object (or the next full sync).
    AwaitChange,
    /// Run again after this delay.
    After(Duration),
}

/// How often and how patiently to retry transient failures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Upper bound of any delay.
    pub max: Duration,
    /// Attempts made inside one `register`/`unregister` call before giving up to the caller.
    pub attempts_per_call: u32,
    /// Randomize delays (on in production; off for reproducible tests).
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(300),
            attempts_per_call: 4,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// The un-jittered delay after `attempt` failures (1-based): initial × 2^(attempt-1),
    /// capped at `max`.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        self.initial
            .checked_mul(1u32 << exponent)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// The delay after `attempt` failures with "equal jitter": between half and all of
    /// [`Self::base_delay`], so concurrent retries spread out but never hammer.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.base_delay(attempt);
        if !self.jitter {
            return base;
        }
        let half = base / 2;
        let jitter_ms = half.as_millis().min(u128::from(u64::MAX)) as u64;
        half + Duration::from_millis(rand::rng().random_range(0..=jitter_ms))
    }
}

impl RetryPolicy {
    /// A stateful sequence of delays (attempt 1, 2, ...), restartable with
    /// [`Backoff::reset`].
    pub fn delays(self) -> Delays {
        Delays {
            policy: self,
            attempt: 0,
        }
    }
}

/// The delays of a [`RetryPolicy`], one per failure; endless.
#[derive(Debug, Clone)]
pub struct Delays {
    policy: RetryPolicy,
    attempt: u32,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.attempt = self.attempt.saturating_add(1);
        Some(self.policy.delay(self.attempt))
    }
}

impl Backoff for Delays {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_and_is_capped() {
        let p = RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            attempts_per_call: 3,
            jitter: true,
        };
        assert_eq!(p.base_delay(1), Duration::from_millis(100));
        assert_eq!(p.base_delay(2), Duration::from_millis(200));
        assert_eq!(p.base_delay(4), Duration::from_millis(800));
        assert_eq!(p.base_delay(5), Duration::from_secs(1));
        assert_eq!(p.base_delay(1000), Duration::from_secs(1));
    }

    #[test]
    fn delays_double_and_reset() {
        let mut delays = RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(300),
            attempts_per_call: 1,
            jitter: false,
        }
        .delays();
        let first: Vec<u128> = delays.by_ref().take(4).map(|d| d.as_millis()).collect();
        assert_eq!(first, [100, 200, 300, 300]);
        delays.reset();
        assert_eq!(delays.next(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn jitter_stays_within_half_and_full_base() {
        let p = RetryPolicy::default();
        for attempt in 1..20 {
            for _ in 0..50 {
                let d = p.delay(attempt);
                let base = p.base_delay(attempt);
                assert!(
                    d >= base / 2 && d <= base,
                    "{d:?} outside [{:?}, {base:?}]",
                    base / 2
                );
            }
        }
    }
}

//! Capped exponential backoff with jitter, shared by the registrar (in-call retries) and
//! the controller (requeue times).

use std::time::Duration;

use rand::Rng;

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

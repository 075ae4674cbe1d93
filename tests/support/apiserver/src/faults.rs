//! Fault injection: added latency, a seeded fraction of failed reads and writes (500, 429 with
//! `Retry-After`, or 500 after the write was committed), dropping watches, and compaction.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::server::Shared;

/// Fractions (0.0–1.0) of requests to fail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailureRates {
    /// Fail with 500 InternalError before doing anything.
    pub fail_500: f64,
    /// Fail with 429 TooManyRequests (and `Retry-After`) before doing anything.
    pub fail_429: f64,
    /// Writes only: perform the write, then answer 500 anyway.
    pub fail_500_after_commit: f64,
}

/// The fault configuration (also the JSON body of `POST /_testserver/faults`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultConfig {
    /// Latency added to every API request, in milliseconds.
    pub latency_ms: u64,
    /// Failures of get/list/watch.
    pub reads: FailureRates,
    /// Failures of create/update/patch/delete.
    pub writes: FailureRates,
    /// `Retry-After` of 429 answers, in seconds.
    pub retry_after_seconds: u64,
    /// Re-seeds the random generator when set.
    pub seed: Option<u64>,
    /// Plural resource names the failures apply to; empty = all.
    pub resources: Vec<String>,
    /// Writes whose request body contains this text are committed at once but answered
    /// only after `hold_reply_ms` (a reply lost in a slow network; the writer learns of
    /// its own write late). Applies to the next `hold_reply_count` such writes.
    pub hold_reply_matching: Option<String>,
    /// How long a matching write's reply is held, in milliseconds.
    pub hold_reply_ms: u64,
    /// How many matching writes are still held.
    pub hold_reply_count: u32,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            latency_ms: 0,
            reads: FailureRates::default(),
            writes: FailureRates::default(),
            retry_after_seconds: 1,
            seed: None,
            resources: Vec::new(),
            hold_reply_matching: None,
            hold_reply_ms: 0,
            hold_reply_count: 0,
        }
    }
}

/// What to do to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// Nothing.
    None,
    /// Answer 500 without doing anything.
    Fail500,
    /// Answer 429 with this Retry-After.
    Fail429(u64),
    /// Do the write, then answer 500.
    Fail500AfterCommit,
}

#[derive(Debug)]
pub(crate) struct FaultState {
    config: FaultConfig,
    rng: StdRng,
}

impl FaultState {
    pub(crate) fn new(seed: u64) -> Self {
        FaultState {
            config: FaultConfig::default(),
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// How long to hold the reply of a committed write with request body `body`.
    pub(crate) fn hold_reply(&mut self, body: &[u8]) -> Option<Duration> {
        let c = &mut self.config;
        let needle = c.hold_reply_matching.as_deref()?;
        if c.hold_reply_count == 0 || !contains(body, needle.as_bytes()) {
            return None;
        }
        c.hold_reply_count -= 1;
        Some(Duration::from_millis(c.hold_reply_ms))
    }

    /// Decides the fate of one request.
    pub(crate) fn decide(&mut self, write: bool, resource: &str) -> (Duration, Injected) {
        let latency = Duration::from_millis(self.config.latency_ms);
        let c = &self.config;
        if !c.resources.is_empty() && !c.resources.iter().any(|r| r == resource) {
            return (latency, Injected::None);
        }
        let rates = if write { &c.writes } else { &c.reads };
        let after = if write {
            rates.fail_500_after_commit
        } else {
            0.0
        };
        if rates.fail_500 <= 0.0 && rates.fail_429 <= 0.0 && after <= 0.0 {
            return (latency, Injected::None);
        }
        let (f500, f429, retry) = (rates.fail_500, rates.fail_429, c.retry_after_seconds);
        let r: f64 = self.rng.random();
        let fate = if r < f500 {
            Injected::Fail500
        } else if r < f500 + f429 {
            Injected::Fail429(retry)
        } else if r < f500 + f429 + after {
            Injected::Fail500AfterCommit
        } else {
            Injected::None
        };
        (latency, fate)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// A cloneable handle to the server's faults.
#[derive(Clone)]
pub struct Faults {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("config", &self.config())
            .finish()
    }
}

fn lock(m: &Mutex<FaultState>) -> std::sync::MutexGuard<'_, FaultState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Faults {
    /// Replaces the whole configuration (re-seeding when `seed` is set).
    pub fn set(&self, config: FaultConfig) {
        let mut st = lock(&self.shared.faults);
        if let Some(seed) = config.seed {
            st.rng = StdRng::seed_from_u64(seed);
        }
        st.config = config;
    }

    /// The current configuration.
    pub fn config(&self) -> FaultConfig {
        lock(&self.shared.faults).config.clone()
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.set(FaultConfig::default());
    }

    /// Adds `latency` to every API request.
    pub fn set_latency(&self, latency: Duration) {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        lock(&self.shared.faults).config.latency_ms = ms;
    }

    /// Fails the given fractions of reads (get/list/watch).
    pub fn set_read_failures(&self, fail_500: f64, fail_429: f64) {
        let mut st = lock(&self.shared.faults);
        st.config.reads = FailureRates {
            fail_500,
            fail_429,
            fail_500_after_commit: 0.0,
        };
    }

    /// Fails the given fractions of writes (create/update/patch/delete).
    pub fn set_write_failures(&self, fail_500: f64, fail_429: f64) {
        let mut st = lock(&self.shared.faults);
        st.config.writes.fail_500 = fail_500;
        st.config.writes.fail_429 = fail_429;
    }

    /// Commits the given fraction of writes but answers them with 500.
    pub fn set_write_failures_after_commit(&self, fraction: f64) {
        lock(&self.shared.faults)
            .config
            .writes
            .fail_500_after_commit = fraction;
    }

    /// Commits the next `count` writes whose body contains `matching` at once, but holds
    /// their replies for `hold`.
    pub fn hold_replies(&self, matching: &str, hold: Duration, count: u32) {
        let mut st = lock(&self.shared.faults);
        st.config.hold_reply_matching = Some(matching.to_owned());
        st.config.hold_reply_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
        st.config.hold_reply_count = count;
    }

    /// Re-seeds the random generator.
    pub fn set_seed(&self, seed: u64) {
        lock(&self.shared.faults).rng = StdRng::seed_from_u64(seed);
    }

    /// Ends every open watch now (clients see the stream close); returns how many were open.
    pub fn drop_watches(&self) -> usize {
        self.shared.drop_watches()
    }

    /// Compacts the watch history: a new watch from any resourceVersion handed out so far gets
    /// 410 Gone (as an ERROR event), as does continuing a list started before; open watches
    /// go on. Returns the new (floor) resourceVersion.
    pub fn compact(&self) -> u64 {
        self.shared.compact()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_decisions_are_reproducible_and_proportional() {
        let run = || {
            let mut st = FaultState::new(7);
            st.config.writes = FailureRates {
                fail_500: 0.1,
                fail_429: 0.05,
                fail_500_after_commit: 0.0,
            };
            (0..2000)
                .map(|_| st.decide(true, "pods").1)
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let n500 = a.iter().filter(|x| **x == Injected::Fail500).count();
        let n429 = a
            .iter()
            .filter(|x| matches!(x, Injected::Fail429(1)))
            .count();
        assert!((150..250).contains(&n500), "{n500}");
        assert!((60..140).contains(&n429), "{n429}");
        let mut st = FaultState::new(7);
        st.config.writes.fail_500 = 1.0;
        st.config.resources = vec!["leases".into()];
        assert_eq!(st.decide(true, "pods").1, Injected::None);
        assert_eq!(st.decide(true, "leases").1, Injected::Fail500);
        assert_eq!(st.decide(false, "leases").1, Injected::None);
    }
}

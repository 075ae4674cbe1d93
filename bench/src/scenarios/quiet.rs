//! A quiet machine for the timed windows of the throughput runs. The benchmark shares its
//! cores with whatever else runs on the machine, and that load does not hit volmig and the
//! bare client alike: volmig's run keeps more processes busy (the daemon, the API server,
//! the simulator) than the bare client's, whose limit is the simulator's serial CNS lock.
//! So each clock starts only once the whole machine, the run's own idle components
//! included, is quiet ([`Gate::wait`]), and a pair of runs during which other processes
//! kept the cores busy anyway ([`disturbed`]) is measured again ([`Gate::again`]), within
//! a time budget.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::procfs::MachineCpu;
use crate::results::Load;

/// Most cores the whole machine may keep busy over one [`SAMPLE`] to count as quiet.
pub const QUIET_CORES: f64 = 0.15;
/// Most cores other processes (or the hypervisor, `steal`) may take during a timed window
/// for the run to count; above it the pair is disturbed.
pub const DISTURBED_CORES: f64 = 0.25;
/// How long one quiet check looks at the machine.
pub const SAMPLE: Duration = Duration::from_secs(1);

/// Longest wait for a quiet machine before one clock starts.
pub const WAIT: Duration = Duration::from_secs(60);
/// Attempts at a pair of runs before a disturbed one is kept.
pub const ATTEMPTS: usize = 3;

/// What a [`Gate::wait`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Waited {
    /// Seconds spent waiting.
    pub seconds: f64,
    /// Whether the machine was quiet at the end (else the wait gave up or was skipped).
    pub quiet: bool,
}

/// The throughput scenario's budget for a quiet machine: time spent waiting for one and
/// measuring disturbed pairs again. On a machine that stays busy the benchmark spends it
/// and then goes on without waiting, so that it still ends.
#[derive(Debug)]
pub struct Gate {
    left: Mutex<Duration>,
}

impl Gate {
    /// A gate with `budget` in all (zero: never wait, never measure again).
    pub fn new(budget: Duration) -> Gate {
        Gate {
            left: Mutex::new(budget),
        }
    }

    /// What is left of the budget.
    pub fn left(&self) -> Duration {
        *self.left.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `spent` from the budget.
    pub fn spend(&self, spent: Duration) {
        let mut left = self.left.lock().unwrap_or_else(PoisonError::into_inner);
        *left = left.saturating_sub(spent);
    }

    /// Whether a pair disturbed at attempt `attempt` (from 1) is measured again.
    pub fn again(&self, attempt: usize) -> bool {
        attempt < ATTEMPTS && !self.left().is_zero()
    }

    /// Waits until the machine's cores were busy less than [`QUIET_CORES`] over one
    /// [`SAMPLE`], for at most [`WAIT`] and what is left of the budget.
    pub async fn wait(&self) -> Waited {
        let limit = WAIT.min(self.left());
        let started = Instant::now();
        let mut quiet = false;
        while !limit.is_zero() {
            let before = MachineCpu::read();
            let sampled = Instant::now();
            tokio::time::sleep(SAMPLE).await;
            quiet = match (before, MachineCpu::read()) {
                (Some(before), Some(now)) => {
                    busy_cores(before, now, sampled.elapsed()) < QUIET_CORES
                }
                // Nothing to read: waiting would not help.
                _ => true,
            };
            if quiet || started.elapsed() >= limit {
                break;
            }
        }
        let spent = started.elapsed();
        self.spend(spent);
        Waited {
            seconds: spent.as_secs_f64(),
            quiet,
        }
    }
}

/// Mean cores busy (or stolen) between two readings `wall` apart.
fn busy_cores(before: MachineCpu, now: MachineCpu, wall: Duration) -> f64 {
    let ns =
        now.busy_ns.saturating_sub(before.busy_ns) + now.steal_ns.saturating_sub(before.steal_ns);
    ns as f64 / wall.as_nanos().max(1) as f64
}

/// Whether other processes or the hypervisor took more than [`DISTURBED_CORES`] during a
/// timed window.
pub fn disturbed(load: &Load) -> bool {
    load.other_cores + load.steal_cores > DISTURBED_CORES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disturbed_above_a_quarter_core() {
        let load = |other_cores, steal_cores| Load {
            other_cores,
            steal_cores,
        };
        assert!(!disturbed(&load(0.0, 0.0)));
        assert!(!disturbed(&load(0.2, 0.05)));
        assert!(disturbed(&load(0.2, 0.1)));
        assert!(disturbed(&load(1.0, 0.0)));
    }

    #[test]
    fn busy_counts_steal_and_wall() {
        let at = |busy_ns, steal_ns| MachineCpu { busy_ns, steal_ns };
        let b = busy_cores(
            at(0, 0),
            at(1_500_000_000, 500_000_000),
            Duration::from_secs(2),
        );
        assert!((b - 1.0).abs() < 1e-9, "{b}");
    }

    #[tokio::test]
    async fn no_wait_and_no_second_attempt_without_budget() {
        let gate = Gate::new(Duration::ZERO);
        let w = gate.wait().await;
        assert!(w.seconds < 0.1, "{w:?}");
        assert!(!w.quiet);
        assert!(!gate.again(1));
    }

    #[test]
    fn budget_bounds_the_attempts() {
        let gate = Gate::new(Duration::from_secs(10));
        assert!(gate.again(1) && gate.again(ATTEMPTS - 1));
        assert!(!gate.again(ATTEMPTS));
        gate.spend(Duration::from_secs(4));
        assert_eq!(gate.left(), Duration::from_secs(6));
        gate.spend(Duration::from_secs(60));
        assert!(gate.left().is_zero() && !gate.again(1));
    }
}

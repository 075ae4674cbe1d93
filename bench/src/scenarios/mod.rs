//! The measured scenarios. Each one starts its own components and stops them again.

use std::path::PathBuf;
use std::time::Duration;

use crate::scale::Scale;

pub mod backend_metrics;
pub mod bare;
pub mod in_process;
pub mod quiet;
pub mod steady;
pub mod throughput;
pub mod tracked;

/// What every scenario needs.
pub struct Env {
    /// The `volmig` binary under test.
    pub volmig: PathBuf,
    /// The vCenter simulator harness.
    pub vcsim: PathBuf,
    /// Where daemon logs go.
    pub logs: PathBuf,
    /// Sizes.
    pub scale: Scale,
    /// How long memory/start-up daemons are kept running once idle (profiling).
    pub hold: Duration,
    /// The throughput runs' budget for a quiet machine.
    pub quiet: quiet::Gate,
}

/// How often the benchmark polls `/metrics` and `/readyz`.
pub const POLL: Duration = Duration::from_millis(20);

/// Prints a progress line on stderr (the results go to files).
pub fn progress(text: impl AsRef<str>) {
    eprintln!("[volmig-bench] {}", text.as_ref());
}

/// CPU time of the processes of one measurement: (name, PID) → snapshot, and of the whole
/// machine, from the start of a timed window.
pub struct CpuClock {
    processes: Vec<(&'static str, u32, crate::procfs::CpuSnapshot)>,
    machine: Option<crate::procfs::MachineCpu>,
    started: std::time::Instant,
}

/// What a [`CpuClock`] measured over its window.
pub struct CpuWindow {
    /// CPU ms each measured process used, divided by the `per` given to
    /// [`CpuClock::finish`].
    pub ms_per: std::collections::BTreeMap<String, f64>,
    /// The rest of the machine over the same window.
    pub load: crate::results::Load,
}

impl CpuClock {
    /// Snapshots every named process (those that cannot be read are left out) and the
    /// machine.
    pub fn start(processes: &[(&'static str, Option<u32>)]) -> CpuClock {
        CpuClock {
            processes: processes
                .iter()
                .filter_map(|(name, pid)| {
                    let pid = (*pid)?;
                    Some((*name, pid, crate::procfs::CpuSnapshot::read(pid).ok()?))
                })
                .collect(),
            machine: crate::procfs::MachineCpu::read(),
            started: std::time::Instant::now(),
        }
    }

    /// CPU ms each process used since [`CpuClock::start`], divided by `per`, and the mean
    /// number of cores busy with anything else (or stolen by the hypervisor) meanwhile.
    pub fn finish(&self, per: f64) -> CpuWindow {
        let wall_ns = self.started.elapsed().as_nanos() as f64;
        let used: Vec<(&str, u64)> = self
            .processes
            .iter()
            .filter_map(|(name, pid, before)| {
                let now = crate::procfs::CpuSnapshot::read(*pid).ok()?;
                Some((*name, before.total_until(&now)))
            })
            .collect();
        let load = match (self.machine, crate::procfs::MachineCpu::read()) {
            (Some(before), Some(now)) if wall_ns > 0.0 => {
                let ours: u64 = used.iter().map(|(_, ns)| ns).sum();
                let busy = now.busy_ns.saturating_sub(before.busy_ns);
                crate::results::Load {
                    other_cores: busy.saturating_sub(ours) as f64 / wall_ns,
                    steal_cores: now.steal_ns.saturating_sub(before.steal_ns) as f64 / wall_ns,
                }
            }
            _ => crate::results::Load::default(),
        };
        CpuWindow {
            ms_per: used
                .into_iter()
                .map(|(name, ns)| (name.to_owned(), ns as f64 / 1e6 / per))
                .collect(),
            load,
        }
    }
}

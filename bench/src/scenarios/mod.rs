//! The measured scenarios. Each one starts its own components and stops them again.

use std::path::PathBuf;
use std::time::Duration;

use crate::scale::Scale;

pub mod bare;
pub mod in_process;
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
}

/// How often the benchmark polls `/metrics` and `/readyz`.
pub const POLL: Duration = Duration::from_millis(20);

/// Prints a progress line on stderr (the results go to files).
pub fn progress(text: impl AsRef<str>) {
    eprintln!("[volmig-bench] {}", text.as_ref());
}

/// CPU time of the processes of one measurement: (name, PID) → snapshot.
pub struct CpuClock(Vec<(&'static str, u32, crate::procfs::CpuSnapshot)>);

impl CpuClock {
    /// Snapshots every named process (those that cannot be read are left out).
    pub fn start(processes: &[(&'static str, Option<u32>)]) -> CpuClock {
        CpuClock(
            processes
                .iter()
                .filter_map(|(name, pid)| {
                    let pid = (*pid)?;
                    Some((*name, pid, crate::procfs::CpuSnapshot::read(pid).ok()?))
                })
                .collect(),
        )
    }

    /// CPU ms each process used since [`CpuClock::start`], divided by `per`.
    pub fn ms_per(&self, per: f64) -> std::collections::BTreeMap<String, f64> {
        self.0
            .iter()
            .filter_map(|(name, pid, before)| {
                let now = crate::procfs::CpuSnapshot::read(*pid).ok()?;
                Some((
                    (*name).to_owned(),
                    before.total_until(&now) as f64 / 1e6 / per,
                ))
            })
            .collect()
    }
}

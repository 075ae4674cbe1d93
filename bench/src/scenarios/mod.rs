//! The measured scenarios. Each one starts its own components and stops them again.

use std::path::PathBuf;
use std::time::Duration;

use crate::scale::Scale;

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

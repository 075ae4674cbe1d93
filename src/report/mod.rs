//! `volmig report`: the read-only readiness report for a migration (docs/design.md §3.2, §8.6).
//!
//! Every in-tree vSphere PV (and every inline vSphere volume of a pod, named
//! `pod/<namespace>/<pod>/<volume>`) gets a row with its raw and canonical path, the phase and
//! volume ID of its VolumeMigration, whether the vSphere CSI driver's cache object
//! (`CnsVSphereVolumeMigration`) maps its raw path to that ID, and a reason when it is not
//! ready. Ready means Registered, and published when the driver cache is required
//! (`--require-driver-cache`: `auto` = when its CRD is served).
//!
//! It also names the registrar (docs/design.md §8.7): volmig ("own") or the vSphere CSI
//! driver's syncer ("follow"), from one read of the syncer's Lease; that line never changes
//! the verdict or the exit code.
//!
//! - [`fetch`]: four paged lists (PVs, pods, VolumeMigrations, driver objects) and one
//!   GET, concurrently; no per-PV request, no write.
//! - [`model`]: the join (hash maps, O(n)) and the verdict; pure.
//! - [`registrar`]: who registers, from the Lease as read and the wall clock; pure.
//! - [`render`]: table, JSON, CSV; pure.

mod advice;
pub mod fetch;
pub mod model;
pub mod reason;
pub mod registrar;
pub mod render;

pub use fetch::FetchError;
pub use model::{DriverCacheRequirement, Report, Row, build};
pub use registrar::{Registrar, SyncerLeaseRead};
pub use render::{Format, RowFilter, render, verdict};

use crate::syncer_lease::SyncerLeaseConfig;

/// Exit code: every in-tree PV is ready.
pub const EXIT_READY: u8 = 0;
/// Exit code: at least one in-tree PV is not ready.
pub const EXIT_NOT_READY: u8 = 1;
/// Exit code: wrong arguments, or the API server could not be read.
pub const EXIT_ERROR: u8 = 2;

/// What `volmig report` prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The report in the requested format (stdout).
    pub stdout: String,
    /// The one-line verdict for stderr with JSON and CSV (the table ends with it).
    pub stderr: Option<String>,
    /// Whether every in-tree PV is ready.
    pub ready: bool,
}

impl Rendered {
    /// [`EXIT_READY`] or [`EXIT_NOT_READY`].
    pub fn exit_code(&self) -> u8 {
        if self.ready {
            EXIT_READY
        } else {
            EXIT_NOT_READY
        }
    }
}

/// What `volmig report` reads and prints (from its flags, `cli::ReportArgs::options`).
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Output format.
    pub output: Format,
    /// Whether PVs must also be published to the vSphere CSI driver's cache.
    pub require_driver_cache: DriverCacheRequirement,
    /// Print only the PVs that are not ready (totals still count all).
    pub not_ready: bool,
    /// Where the vSphere CSI driver's syncer Lease and Deployment are.
    pub syncer: SyncerLeaseConfig,
}

/// `volmig report`: reads the cluster and renders the report as `args` asks.
pub async fn run(client: kube::Client, args: &ReportOptions) -> Result<Rendered, FetchError> {
    let syncer = &args.syncer;
    let lease = async {
        let read = fetch::read_syncer_lease(client.clone(), syncer).await;
        let presence = fetch::read_driver_presence(client.clone(), syncer).await;
        (read, presence, jiff::Timestamp::now())
    };
    let (inputs, (lease, presence, read_at)) = tokio::join!(
        fetch::read_inputs(client.clone(), args.require_driver_cache),
        lease
    );
    let mut report = build(&inputs?, args.require_driver_cache);
    report.registrar = Some(registrar::with_deployment(
        registrar::decide(syncer, &lease, read_at),
        presence,
    ));
    let filter = if args.not_ready {
        RowFilter::NotReady
    } else {
        RowFilter::All
    };
    Ok(Rendered {
        stdout: render(&report, args.output, filter),
        stderr: (args.output != Format::Table).then(|| verdict(&report)),
        ready: report.ready,
    })
}

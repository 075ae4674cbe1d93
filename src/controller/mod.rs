//! The controller: everything that turns what the cluster says into registrar calls.
//!
//! - [`pv_index`] and [`pv_watcher`] keep a name → path index of in-tree PVs on every
//!   replica and, on the leader, create the VolumeMigration of each path;
//!   [`pod_watcher`] adds the pods that name a vmdk inline ([`crate::k8s::inline_volumes`]);
//! - [`reconcile`] drives one VolumeMigration: read → [`decide`] (pure) → act → record;
//! - [`full_sync`] repairs every difference between PVs, VolumeMigrations and CNS;
//! - [`outcome`] reports what a registration did (metrics and Events), for both.

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;

use crate::k8s::events::Events;
use crate::k8s::status::StatusWriter;
use crate::metrics::Metrics;
use crate::registrar::{LeaderGate, Registrar};
use crate::volume_migration::VolumeMigration;

pub mod attachment_watcher;
pub mod csi_users;
pub mod decide;
mod error;
pub mod full_sync;
pub mod migration_cache;
pub mod outcome;
pub mod pod_watcher;
pub mod publish;
pub mod pv_index;
pub mod pv_watcher;
pub mod reconcile;
#[cfg(test)]
mod scenario_tests;
mod user_watch;
pub mod work_queue;

pub use decide::{Decision, Observed, Step, decide};
pub use error::{Error, FinalizeError, FinalizerError, PublishError, RecordError, Result};
pub use migration_cache::MigrationCache;
pub use pv_index::PvIndex;
pub use work_queue::WorkQueue;

/// What a reconcile asks for next: to run again after a delay, or only when something
/// changes (a watch event, a PV, leadership).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Run again after `delay` unless something asks sooner.
    pub const fn requeue(delay: Duration) -> Self {
        Self {
            requeue_after: Some(delay),
        }
    }

    /// Run again only when something changes.
    pub const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// The delay before the next run, if one is asked for.
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// What to do when no PV references a registered vmdk any longer (docs/design.md §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PvDeletePolicy {
    /// Unregister the CNS volume (`deleteDisk=false`: the vmdk stays).
    Unregister,
    /// Keep the CNS volume registered.
    Keep,
}

/// What every reconciliation, the PV watcher and full sync share.
pub struct Context {
    /// Where they read and write in the cluster.
    pub cluster: ClusterWrites,
    /// The only component that registers.
    pub registrar: Arc<Registrar>,
    /// In-tree PVs by path.
    pub index: Arc<PvIndex>,
    /// Whether this replica leads.
    pub leader: LeaderGate,
    /// Metrics.
    pub metrics: Metrics,
    /// How they react.
    pub policy: Policy,
}

/// The cluster side of the [`Context`]: every object kind the controller writes.
pub struct ClusterWrites {
    /// VolumeMigrations, cluster-wide.
    pub migrations: Api<VolumeMigration>,
    /// The one status writer.
    pub status: StatusWriter,
    /// Event publisher.
    pub events: Events,
    /// The CSI driver's cache objects, when their CRD is served.
    pub driver: Option<Arc<publish::DriverCache>>,
}

/// The choices of the [`Context`]: flags and delays.
pub struct Policy {
    /// `--on-pv-delete`.
    pub on_pv_delete: PvDeletePolicy,
    /// Requeue delay after a failed reconciliation (transient errors; `requeue::ERROR_REQUEUE`).
    pub error_requeue: Duration,
}

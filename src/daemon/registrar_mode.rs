//! The registrar mode as the daemon uses it (docs/design.md §8.2): a watch of the CSI driver's
//! syncer Lease feeds the gate the registrar checks before each create, the
//! `volmig_registrar_mode` metric, and a re-run of every VolumeMigration when volmig becomes
//! the registrar (paths that waited for the driver are registered at once).

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span};

use crate::controller::{MigrationCache, WorkQueue};
use crate::metrics::Metrics;
use crate::syncer_lease::{
    RegistrarMode, RegistrarModeGate, SyncerLeaseConfig, SyncerObserver, watch_syncer_lease,
};

/// Starts the watch; `lease_name` empty: volmig always registers (no task).
pub(super) fn start(
    client: &kube::Client,
    config: SyncerLeaseConfig,
    metrics: &Metrics,
    cache: Arc<MigrationCache>,
    queue: WorkQueue,
    shutdown: CancellationToken,
) -> (RegistrarModeGate, Option<JoinHandle<()>>) {
    if config.lease_name.is_empty() {
        info!(
            "--driver-syncer-lease is empty: volmig registers without following the CSI driver's syncer"
        );
        metrics.set_registrar_mode(RegistrarMode::Own.label());
        return (RegistrarModeGate::always_own(), None);
    }
    metrics.set_registrar_mode(RegistrarMode::Unknown.label());
    let observer = Arc::new(Mutex::new(SyncerObserver::default()));
    let gate = RegistrarModeGate::observing(observer.clone());
    let metrics = metrics.clone();
    let on_change = move |mode: &RegistrarMode| {
        metrics.set_registrar_mode(mode.label());
        if *mode == RegistrarMode::Own {
            super::reconcile_all(&cache, &queue);
        }
    };
    let task = tokio::spawn(
        watch_syncer_lease(client.clone(), config, observer, on_change, shutdown)
            .instrument(info_span!("syncer_lease")),
    );
    (gate, Some(task))
}

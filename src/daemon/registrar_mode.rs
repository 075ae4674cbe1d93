//! The registrar mode as the daemon uses it (docs/design.md §8.2): watches of the CSI driver's
//! syncer Lease and controller Deployment feed the gate the registrar checks before each
//! create, the `volmig_registrar_mode` metric, an Event on the Lease at every change, and a
//! re-run of every VolumeMigration when volmig becomes the registrar (paths that waited for
//! the driver are registered at once). The leading replica holds that Lease whenever volmig
//! registers: for good without a driver, until the hand-over with `--hold-driver-syncer`.

use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span, warn};

use crate::controller::{MigrationCache, WorkQueue};
use crate::k8s::events::{EventType, Events, reason};
use crate::metrics::Metrics;
use crate::syncer_lease::{
    HandOverCheck, HolderConfig, RegistrarMode, RegistrarModeGate, SyncerLeaseConfig,
    SyncerObserver, TakePolicy, hold_syncer_lease, watch_syncer_lease,
};

/// What holding the syncer's Lease needs.
pub(super) struct Hold {
    /// The Lease as volmig writes it.
    pub config: HolderConfig,
    /// True while this replica leads volmig.
    pub leader: watch::Receiver<bool>,
    /// Whether every path is Registered and published (asked with `--hold-driver-syncer`).
    pub hand_over: HandOverCheck,
    /// When volmig may take the Lease.
    pub policy: TakePolicy,
}

/// Everything the registrar mode reports to.
pub(super) struct Outputs {
    pub metrics: Metrics,
    pub events: Events,
    pub cache: Arc<MigrationCache>,
    pub queue: WorkQueue,
}

/// Starts the watches and the holder; `lease_name` empty: volmig registers without any
/// Lease (no task).
pub(super) fn start(
    client: &kube::Client,
    config: SyncerLeaseConfig,
    hold: Hold,
    out: Outputs,
    shutdown: CancellationToken,
) -> (RegistrarModeGate, Vec<JoinHandle<()>>) {
    if config.lease_name.is_empty() {
        warn!(
            "--driver-syncer-lease is empty: volmig registers without holding the CSI driver's syncer Lease; never run it so beside the CSI driver"
        );
        out.metrics
            .set_registrar_mode(RegistrarMode::Unguarded.label());
        return (RegistrarModeGate::always_own(), Vec::new());
    }
    out.metrics
        .set_registrar_mode(RegistrarMode::Unknown.label());
    // Until the holder has taken the Lease nothing is created: a replica that just became
    // the leader must not create before it holds it.
    let observer = SyncerObserver::new(hold.policy, !config.deployment.is_empty());
    let observer = Arc::new(Mutex::new(observer));
    let gate = RegistrarModeGate::observing(observer.clone());
    let hold_changed = Arc::new(Notify::new());
    let mut tasks = vec![tokio::spawn(
        hold_syncer_lease(
            client.clone(),
            hold.config,
            observer.clone(),
            hold_changed.clone(),
            hold.leader,
            hold.hand_over,
            shutdown.clone(),
        )
        .instrument(info_span!("syncer_lease_hold")),
    )];
    let (namespace, lease) = (config.namespace.clone(), config.lease_name.clone());
    let on_change = move |mode: &RegistrarMode| {
        out.metrics.set_registrar_mode(mode.label());
        if mode.registers() {
            super::reconcile_all(&out.cache, &out.queue);
        }
        let (events, namespace, lease) = (out.events.clone(), namespace.clone(), lease.clone());
        let type_ = match mode {
            RegistrarMode::Unknown => EventType::Warning,
            _ => EventType::Normal,
        };
        let note = format!("registrar mode: {mode}");
        tokio::spawn(async move {
            events
                .on_lease(
                    &namespace,
                    &lease,
                    type_,
                    reason::REGISTRAR_MODE_CHANGED,
                    note,
                )
                .await;
        });
    };
    tasks.push(tokio::spawn(
        watch_syncer_lease(
            client.clone(),
            config,
            observer,
            hold_changed,
            on_change,
            shutdown,
        )
        .instrument(info_span!("syncer_lease")),
    ));
    (gate, tasks)
}

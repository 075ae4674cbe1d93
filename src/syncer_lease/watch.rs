//! Feeds a [`SyncerObserver`] from watches of the driver's syncer Lease and of its controller
//! Deployment, and reports every change of [`RegistrarMode`] (on an event, when a live Lease
//! runs out unrenewed, or when the hold's send window ends).

use std::sync::{Arc, Mutex, PoisonError};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::deployment::{DriverPresence, presence};
use super::{RegistrarMode, SyncerLeaseConfig, SyncerObserver};

/// One thing the watches saw.
enum Seen {
    /// The Lease's spec (`None`: no Lease).
    Lease(Result<Option<LeaseSpec>, kube::runtime::watcher::Error>),
    /// What the Deployment says ([`presence`]).
    Deployment(Result<DriverPresence, kube::runtime::watcher::Error>),
}

/// Watches the syncer Lease (and the Deployment, when `config` names one) of `config` into
/// `observer` until `shutdown`; calls `on_change` with each new mode (and once with the first
/// known one). `hold_changed` wakes it when the hold of the Lease changes.
pub async fn watch_syncer_lease(
    client: kube::Client,
    config: SyncerLeaseConfig,
    observer: Arc<Mutex<SyncerObserver>>,
    hold_changed: Arc<Notify>,
    on_change: impl Fn(&RegistrarMode) + Send + Sync,
    shutdown: CancellationToken,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let lease_events = watch_object(leases, &config.lease_name)
        .default_backoff()
        .map(|found| Seen::Lease(found.map(|lease| lease.and_then(|l| l.spec))))
        .boxed();
    let deployment_events = if config.deployment.is_empty() {
        stream::pending().boxed()
    } else {
        let deployments: Api<Deployment> = Api::namespaced(client, &config.namespace);
        watch_object(deployments, &config.deployment)
            .default_backoff()
            .map(|found| Seen::Deployment(found.map(|d| presence(d.as_ref()))))
            .boxed()
    };
    let mut events = stream::select(lease_events, deployment_events);
    let lease = format!("{}/{}", config.namespace, config.lease_name);
    let deployment = format!("{}/{}", config.namespace, config.deployment);
    let lock = || observer.lock().unwrap_or_else(PoisonError::into_inner);
    let mut reported = RegistrarMode::Unknown;
    loop {
        let expiry = lock().expires_at(Instant::now());
        let next = tokio::select! {
            () = shutdown.cancelled() => return,
            () = sleep_until(expiry) => None,
            () = hold_changed.notified() => None,
            next = events.next() => match next {
                None => return,
                Some(next) => Some(next),
            },
        };
        match next {
            None => {}
            Some(Seen::Lease(Err(e))) => warn!(%lease, error = %e,
                "cannot read the CSI driver's syncer Lease; until it is read volmig creates no CNS volume (RBAC: get/list/watch on this Lease)"),
            // The Lease as it is now; `None`: it does not exist (or was deleted).
            Some(Seen::Lease(Ok(spec))) => lock().on_lease(spec.as_ref(), Instant::now()),
            Some(Seen::Deployment(Err(e))) => warn!(%deployment, error = %e,
                "cannot read the CSI driver's controller Deployment; until it is read volmig creates no CNS volume (RBAC: get/list/watch on this Deployment)"),
            Some(Seen::Deployment(Ok(presence))) => lock().on_deployment(presence, Instant::now()),
        }
        let mode = lock().mode(Instant::now());
        if mode != reported {
            info!(%lease, from = reported.label(), to = mode.label(), "registrar mode: {mode}");
            on_change(&mode);
            reported = mode;
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

//! Feeds a [`SyncerObserver`] from a watch of the driver's syncer Lease, and reports every
//! change of [`RegistrarMode`] (on a Lease event, or when a live Lease runs out unrenewed).

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{RegistrarMode, SyncerLeaseConfig, SyncerObserver};

/// Watches the syncer Lease of `config` into `observer` until `shutdown`; calls `on_change`
/// with each new mode (and once with the first known one).
pub async fn watch_syncer_lease(
    client: kube::Client,
    config: SyncerLeaseConfig,
    observer: Arc<Mutex<SyncerObserver>>,
    on_change: impl Fn(&RegistrarMode) + Send + Sync,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut stream = watch_object(api, &config.lease_name)
        .default_backoff()
        .boxed();
    let lease = format!("{}/{}", config.namespace, config.lease_name);
    let lock = || observer.lock().unwrap_or_else(PoisonError::into_inner);
    let mut reported = RegistrarMode::Unknown;
    loop {
        let expiry = lock().expires_at().filter(|at| *at > Instant::now());
        let next = tokio::select! {
            () = shutdown.cancelled() => return,
            () = sleep_until(expiry) => None,
            next = stream.next() => match next {
                None => return,
                Some(next) => Some(next),
            },
        };
        match next {
            None => {}
            Some(Err(e)) => warn!(%lease, error = %e,
                "cannot read the CSI driver's syncer Lease; until it is read volmig creates no CNS volume (RBAC: get/list/watch on this Lease)"),
            // The Lease as it is now; `None`: it does not exist (or was deleted).
            Some(Ok(found)) => {
                lock().on_lease(found.as_ref().and_then(|l| l.spec.as_ref()), Instant::now())
            }
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

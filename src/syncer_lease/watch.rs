//! Feeds a [`SyncerObserver`] from a watch of the driver's syncer Lease, and reports every
//! change of [`RegistrarMode`] (on a Lease event, or when a live Lease runs out unrenewed).

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
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
    let selector = format!("metadata.name={}", config.lease_name);
    let mut stream = watcher::watcher(api, watcher::Config::default().fields(&selector))
        .default_backoff()
        .boxed();
    let lease = format!("{}/{}", config.namespace, config.lease_name);
    let lock = || observer.lock().unwrap_or_else(PoisonError::into_inner);
    let mut reported = RegistrarMode::Unknown;
    let mut in_list: Option<Option<Lease>> = None;
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
        let now = Instant::now();
        match next {
            None => {}
            Some(Err(e)) => warn!(%lease, error = %e,
                "cannot read the CSI driver's syncer Lease; until it is read volmig creates no CNS volume (RBAC: get/list/watch on this Lease)"),
            Some(Ok(Event::Init)) => in_list = Some(None),
            Some(Ok(Event::InitApply(found))) => in_list = Some(Some(found)),
            Some(Ok(Event::InitDone)) => {
                let found = in_list.take().flatten();
                lock().on_lease(found.as_ref().and_then(|l| l.spec.as_ref()), now);
            }
            Some(Ok(Event::Apply(found))) => lock().on_lease(found.spec.as_ref(), now),
            Some(Ok(Event::Delete(_))) => lock().on_lease(None, now),
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

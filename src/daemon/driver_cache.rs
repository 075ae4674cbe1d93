//! The CSI driver's cache as the daemon uses it (docs/design.md §8): whether its CRD is served,
//! whether volmig publishes (`--publish-driver-cache`), and a watch that keeps the index.

use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::cli::PublishDriverCache;
use crate::compact_text::{CompactText, NameSet};
use crate::controller::publish::DriverCache;
use crate::k8s::driver_cache::{CnsVSphereVolumeMigration, DriverIndex};
use crate::volume_path::VolumePath;

/// True when the API server serves `cnsvspherevolumemigrations.cns.vmware.com`.
pub async fn crd_served(client: &kube::Client) -> anyhow::Result<bool> {
    crate::k8s::driver_cache::crd_served(client)
        .await
        .context("checking whether the CSI driver's CnsVSphereVolumeMigration CRD is served")
}

/// Called when the CRD becomes served.
pub type OnServed = Box<dyn Fn() + Send + Sync>;

/// Called with the path of a deleted object.
pub type OnDeleted = Box<dyn Fn(&VolumePath) + Send + Sync>;

/// What the driver cache's watch reports to the rest of the daemon.
#[derive(Default)]
pub struct DriverEvents {
    /// The CRD became served (installed after volmig started): publish everything.
    pub on_served: Option<OnServed>,
    /// An object of this path was deleted: if volmig still needs one, it is created again
    /// at once (docs/design.md §8.3).
    pub on_deleted: Option<OnDeleted>,
}

/// Sets up the driver cache without event callbacks (see [`start_with`]).
pub async fn start(
    client: &kube::Client,
    mode: PublishDriverCache,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<Arc<DriverCache>>> {
    start_with(client, mode, shutdown, DriverEvents::default()).await
}

/// Sets up the driver cache and starts the watch that keeps its index. The CRD is
/// watched, not checked once: a CRD installed after volmig started is published to from
/// then on, one that disappears stops publishing (docs/design.md §8.3). Fails only with
/// `--publish-driver-cache=on` and no CRD at start.
pub async fn start_with(
    client: &kube::Client,
    mode: PublishDriverCache,
    shutdown: CancellationToken,
    events: DriverEvents,
) -> anyhow::Result<Option<Arc<DriverCache>>> {
    let served = crd_served(client).await?;
    if mode == PublishDriverCache::On && !served {
        anyhow::bail!(
            "--publish-driver-cache=on, but the CSI driver's CRD \
             cnsvspherevolumemigrations.cns.vmware.com is not served; install it (the chart's \
             driverCache.installCrd) or use --publish-driver-cache=auto"
        );
    }
    let publish = mode != PublishDriverCache::Off;
    if served {
        info!(
            publish,
            "the CSI driver's cache is served; adopting from it"
        );
    } else {
        info!(
            publish,
            "the CSI driver's CnsVSphereVolumeMigration CRD is not served yet; watching for it"
        );
    }
    let api: Api<CnsVSphereVolumeMigration> = Api::all(client.clone());
    let index = Arc::new(DriverIndex::default());
    // Served at start: readiness waits for its first list.
    index.set_served(served);
    tokio::spawn(
        keep_index(api.clone(), index.clone(), events, shutdown)
            .instrument(info_span!("driver_cache")),
    );
    Ok(Some(Arc::new(DriverCache {
        api,
        index,
        publish,
    })))
}

async fn keep_index(
    api: Api<CnsVSphereVolumeMigration>,
    index: Arc<DriverIndex>,
    events: DriverEvents,
    shutdown: CancellationToken,
) {
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut relist: Option<NameSet> = None;
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = stream.next() => next,
        };
        match next {
            None => return,
            Some(Err(e)) if crd_gone(&e) => {
                if index.set_served(false) {
                    info!(
                        "the CSI driver's CnsVSphereVolumeMigration CRD is not served; not publishing until it is"
                    );
                }
                index.retain(&NameSet::default());
            }
            Some(Err(e)) => warn!(error = %e, "watch of the CSI driver's cache failed; retrying"),
            Some(Ok(Event::Init)) => relist = Some(NameSet::default()),
            Some(Ok(Event::InitApply(object) | Event::Apply(object))) => {
                if let Some(name) = object.metadata.name.as_deref() {
                    if let Some(seen) = relist.as_mut() {
                        seen.insert(CompactText::new(name));
                    }
                    index.upsert(
                        name,
                        &object.spec,
                        crate::k8s::driver_cache::is_ours(&object),
                    );
                }
            }
            Some(Ok(Event::InitDone)) => {
                if let Some(seen) = relist.take() {
                    index.retain(&seen);
                }
                let newly = !index.is_served();
                index.set_synced();
                if newly {
                    info!(
                        "the CSI driver's CnsVSphereVolumeMigration CRD is served now; publishing"
                    );
                    if let Some(on_served) = &events.on_served {
                        on_served();
                    }
                }
            }
            Some(Ok(Event::Delete(object))) => {
                if let Some(name) = object.metadata.name.as_deref() {
                    index.remove(name);
                }
                if let (Some(on_deleted), Ok(path)) = (
                    &events.on_deleted,
                    VolumePath::parse(&object.spec.volumepath),
                ) {
                    on_deleted(&path);
                }
            }
        }
    }
}

/// True when the watch failed because the CRD is not served (404 on the list or watch).
fn crd_gone(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        _ => false,
    }
}

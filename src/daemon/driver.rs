//! The CSI driver's cache as the daemon uses it (docs/design.md §8): whether its CRD is served,
//! whether volmig publishes (`--publish-driver-cache`), and a watch that keeps the index.

use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::cli::PublishDriverCache;
use crate::compact_text::{CompactText, NameSet};
use crate::controller::publish::DriverCache;
use crate::k8s::driver_cache::{CnsVSphereVolumeMigration, DriverIndex};

/// True when the API server serves `cnsvspherevolumemigrations.cns.vmware.com`.
pub async fn crd_served(client: &kube::Client) -> anyhow::Result<bool> {
    let api: Api<CnsVSphereVolumeMigration> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e)
            .context("checking whether the CSI driver's CnsVSphereVolumeMigration CRD is served"),
    }
}

/// Sets up the driver cache: `None` when its CRD is not served (and publishing is not
/// required). Starts the watch that keeps the index.
pub async fn start(
    client: &kube::Client,
    mode: PublishDriverCache,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<Arc<DriverCache>>> {
    let served = crd_served(client).await?;
    let publish = match (mode, served) {
        (PublishDriverCache::On, false) => anyhow::bail!(
            "--publish-driver-cache=on, but the CSI driver's CRD \
             cnsvspherevolumemigrations.cns.vmware.com is not served; install it (the chart's \
             driverCache.installCrd) or use --publish-driver-cache=auto"
        ),
        (_, false) => {
            info!("the CSI driver's CnsVSphereVolumeMigration CRD is not served; not publishing");
            return Ok(None);
        }
        (PublishDriverCache::Off, true) => false,
        (_, true) => true,
    };
    info!(
        publish,
        "the CSI driver's cache is served; adopting from it"
    );
    let api: Api<CnsVSphereVolumeMigration> = Api::all(client.clone());
    let index = Arc::new(DriverIndex::default());
    tokio::spawn(
        keep_index(api.clone(), index.clone(), shutdown).instrument(info_span!("driver_cache")),
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
                index.set_synced();
            }
            Some(Ok(Event::Delete(object))) => {
                if let Some(name) = object.metadata.name.as_deref() {
                    index.remove(name);
                }
            }
        }
    }
}

//! Keeps a [`MigrationCache`] in step with the API server and asks for a reconcile of
//! every object that is listed, created or changed.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher::watcher};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::MigrationCache;
use crate::controller::work_queue::WorkQueue;
use crate::volume_migration::VolumeMigration;

/// Applies one watch event to `cache`; returns the name to reconcile, if any. A deleted
/// object is not reconciled: its finalizer kept it until volmig was done with it.
pub fn apply_event(cache: &MigrationCache, event: &Event<VolumeMigration>) -> Option<String> {
    match event {
        Event::Init => {
            cache.begin_list();
            None
        }
        Event::InitApply(vm) | Event::Apply(vm) => {
            cache.apply(vm);
            vm.metadata.name.clone()
        }
        Event::InitDone => {
            cache.end_list();
            None
        }
        Event::Delete(vm) => {
            if let Some(name) = vm.metadata.name.as_deref() {
                cache.remove(name);
            }
            None
        }
    }
}

/// Watches every VolumeMigration until `shutdown`, re-listing with backoff after errors.
pub async fn run(
    api: Api<VolumeMigration>,
    cache: Arc<MigrationCache>,
    queue: WorkQueue,
    shutdown: CancellationToken,
) {
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => {
                if let Some(name) = apply_event(&cache, &event) {
                    queue.schedule_now(&name);
                }
            }
            Some(Err(e)) => {
                // A failing watch (e.g. a 403 on VolumeMigrations) would otherwise only
                // show as "not ready".
                warn!(error = %crate::error_chain(&e), "VolumeMigration watch failed; retrying with backoff");
            }
            None => return,
        }
    }
}

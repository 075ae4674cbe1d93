//! The loops of `volmig run` once its parts are assembled: the work queue's reconciles,
//! the VolumeMigration, PV and pod watches, "reconcile all" on leadership gained, and full
//! sync once the caches are synced; and their orderly stop (docs/design.md §3.3).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::Api;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::assemble::Assembled;
use super::{SHUTDOWN_GRACE, Started, leadership, readiness};
use crate::cli::RunArgs;
use crate::controller::attachment_watcher::AttachmentWatcher;
use crate::controller::full_sync::FullSync;
use crate::controller::migration_cache::watch as migration_watch;
use crate::controller::pod_watcher::PodWatcher;
use crate::controller::pv_watcher::PvWatcher;
use crate::controller::{Context, MigrationCache, WorkQueue, reconcile, work_queue};
use crate::leader::Leadership;
use crate::registrar::LeaderGate;

/// The running loops, and what stopping them needs.
pub(super) struct Loops {
    tasks: [JoinHandle<()>; 7],
    mode_tasks: Vec<JoinHandle<()>>,
    gate: LeaderGate,
    leadership: Leadership,
}

/// Starts every loop; the daemon turns ready (and full sync starts) once the caches hold
/// their initial lists.
pub(super) fn spawn(args: &RunArgs, started: &Started, parts: Assembled) -> Loops {
    let Assembled {
        ctx,
        cache,
        queue,
        requests,
        leader,
        mode_tasks,
    } = parts;
    let shutdown = &started.shutdown;
    let client = &started.client;
    let controller_task = tokio::spawn(
        work_queue::run(
            requests,
            reconcile_concurrency(args.max_concurrent_registrations),
            shutdown.clone(),
            readiness::caches_synced(cache.clone(), ctx.index.clone(), None),
            reconcile_from(cache.clone(), ctx.clone()),
        )
        .instrument(info_span!("controller")),
    );
    let watch_task = tokio::spawn(
        migration_watch::run(
            ctx.cluster.migrations.clone(),
            cache.clone(),
            queue.clone(),
            shutdown.clone(),
        )
        .instrument(info_span!("migration_watch")),
    );
    let gained_task = tokio::spawn(reconcile_all_when_leading(
        cache.clone(),
        queue.clone(),
        leader.watch.clone(),
        shutdown.clone(),
    ));
    let pods: Option<Api<Pod>> = args.inline_pod_volumes.then(|| Api::all(client.clone()));
    let pod_task = match &pods {
        Some(pods) => {
            ctx.index.expect_pods();
            tokio::spawn(
                PodWatcher {
                    ctx: ctx.clone(),
                    migrations: cache.clone(),
                    trigger: queue.clone(),
                }
                .run(pods.clone(), shutdown.clone())
                .instrument(info_span!("pod_watcher")),
            )
        }
        None => tokio::spawn(async {}),
    };
    // The CSI driver's attachments keep a volume in use (docs/design.md §5.1).
    ctx.index.csi().expect_attachments();
    let attachment_task = tokio::spawn(
        AttachmentWatcher { ctx: ctx.clone() }
            .run(Api::all(client.clone()), shutdown.clone())
            .instrument(info_span!("attachment_watcher")),
    );
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv_task = tokio::spawn(
        PvWatcher {
            ctx: ctx.clone(),
            migrations: cache.clone(),
            trigger: queue,
        }
        .run(pvs.clone(), shutdown.clone())
        .instrument(info_span!("pv_watcher")),
    );

    // Ready once both caches hold the initial lists; full sync starts then.
    let full_sync = FullSync::new(
        ctx.clone(),
        pvs,
        cache.clone(),
        args.gc_orphans,
        usize::from(args.max_concurrent_registrations),
        shutdown.clone(),
    );
    let full_sync = Arc::new(match pods {
        Some(pods) => full_sync.with_pods(pods),
        None => full_sync,
    });
    let sync_task = {
        let (health, index, shutdown) =
            (started.health.clone(), ctx.index.clone(), shutdown.clone());
        let driver = ctx.cluster.driver.clone();
        let (interval, leader_rx) = (args.full_sync_interval, leader.watch.clone());
        tokio::spawn(
            async move {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = readiness::caches_synced(cache, index, driver) => {}
                }
                health.set_ready(true);
                info!("caches synced; ready");
                full_sync.run(interval, leader_rx).await;
            }
            .instrument(info_span!("full_sync_loop")),
        )
    };
    Loops {
        tasks: [
            controller_task,
            sync_task,
            pv_task,
            pod_task,
            attachment_task,
            watch_task,
            gained_task,
        ],
        mode_tasks,
        gate: leader.gate,
        leadership: leader.leadership,
    }
}

impl Loops {
    /// Stops in order: not ready, no new backend call, the loops drained (in-flight calls
    /// finish and record their status, up to [`SHUTDOWN_GRACE`]), then the Lease released.
    pub(super) async fn stop(self, started: &Started) {
        info!("shutting down: no new work; letting in-flight registrations record their status");
        started.health.set_not_ready("shutting down");
        self.gate.close();
        started.shutdown.cancel();
        drain(self.tasks).await;
        for task in self.mode_tasks {
            task.abort();
        }
        if let Err(e) = self.leadership.release().await {
            warn!(error = %e, "could not release the lease; a follower takes over when it expires");
        }
    }
}

/// Reconciles in flight at most: all objects at once at start-up held every object's
/// task in memory. A reconcile may wait for a backend slot or a create in flight (up to
/// the in-flight grace), so the bound leaves room beyond the backend's own limit.
fn reconcile_concurrency(max_concurrent_registrations: u16) -> usize {
    usize::from(max_concurrent_registrations) * 2 + 64
}

/// The queue's work: reconcile the cached object `name` (gone from the cache: nothing to
/// do) and say when to run it again.
fn reconcile_from(
    cache: Arc<MigrationCache>,
    ctx: Arc<Context>,
) -> impl Fn(Arc<str>) -> futures::future::BoxFuture<'static, Option<Duration>> {
    move |name| {
        let (cache, ctx) = (cache.clone(), ctx.clone());
        Box::pin(async move {
            let vm = Arc::new(cache.get(&name)?);
            // Everything one reconcile does (registrar, backend calls, publishing, status)
            // logs inside this span: one vmdk's story can be followed by its path
            // (docs/operations.md "Logs"). `object`, not `name`: JSON logs already name the
            // span with a `name` key.
            let span = info_span!("vmdk", path = %vm.spec.volume_path, object = %name);
            let action = match reconcile::reconcile(vm.clone(), ctx.clone())
                .instrument(span.clone())
                .await
            {
                Ok(action) => action,
                Err(e) => span.in_scope(|| reconcile::error_policy(vm, &e, ctx)),
            };
            action.requeue_after()
        })
    }
}

/// Reconciles every cached object each time this replica becomes the leader (followers
/// leave them alone).
async fn reconcile_all_when_leading(
    cache: Arc<MigrationCache>,
    queue: WorkQueue,
    leader: tokio::sync::watch::Receiver<bool>,
    shutdown: CancellationToken,
) {
    let mut gained = std::pin::pin!(leadership::gained(leader));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            next = gained.next() => match next {
                Some(()) => super::reconcile_all(&cache, &queue),
                None => return,
            },
        }
    }
}

/// Waits up to [`SHUTDOWN_GRACE`] for the tasks, then abandons them: nothing of this
/// process runs when the Lease is released.
async fn drain<const N: usize>(tasks: [JoinHandle<()>; N]) {
    let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, futures::future::join_all(tasks)).await;
    if drained.is_err() {
        warn!(grace = ?SHUTDOWN_GRACE, "in-flight work did not finish in time; abandoning it");
        for abort in aborts {
            abort.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_concurrency_leaves_room_beyond_the_backend_slots() {
        for (slots, bound) in [(1u16, 66), (8, 80), (1024, 2112), (u16::MAX, 131_134)] {
            assert_eq!(reconcile_concurrency(slots), bound);
        }
    }
}

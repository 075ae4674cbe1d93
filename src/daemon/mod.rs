//! `volmig run`: wires the registrar, the PV watcher, the reconciler, full sync, leader
//! election and the HTTP endpoints together, and shuts them down in order on SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::cli::RunArgs;
use crate::controller::full_sync::FullSync;
use crate::controller::migration_cache::watch as migration_watch;
use crate::controller::pv_watcher::PvWatcher;
use crate::controller::{
    ClusterWrites, Context, MigrationCache, Policy, PvIndex, WorkQueue, reconcile, work_queue,
};
use crate::http::{self, Health};
use crate::k8s::events::Events;
use crate::k8s::status::{KubeStatusStore, StatusExtras, StatusExtrasSource, StatusWriter};
use crate::leader::default_holder_id;
use crate::metrics::Metrics;
use crate::registrar::{Registrar, RegistrarConfig, RetryPolicy};
use crate::volume_migration::VolumeMigration;

pub mod cluster_id;
mod driver_cache;
mod dry_run;
pub mod dry_run_plan;
pub mod hand_over;
mod leadership;
mod readiness;
mod registrar_mode;
mod vcenter;

/// How long in-flight work may take to finish after SIGTERM before it is abandoned (a
/// create abandoned in flight is covered by its `Registering` marker: the next leader
/// waits out its grace).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

pub use crate::k8s::client::{kube_client, kube_client_as, user_agent};
pub use dry_run::run_once as dry_run_once;
use vcenter::{cns_backend, vcenter_settings};
pub(crate) use vcenter::{cns_connection, vcenter_flags};

/// What every run mode starts with: a client, metrics, health (not ready yet) and the HTTP
/// endpoints, which stop when `shutdown` is cancelled.
struct Started {
    client: kube::Client,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
    http_task: JoinHandle<()>,
}

async fn start(args: &RunArgs, holder_id: &str, not_ready: &str) -> anyhow::Result<Started> {
    let client = kube_client_as(&args.kube, &user_agent(holder_id)).await?;
    let metrics = Metrics::new();
    let health = Health::new();
    health.set_not_ready(not_ready);
    let shutdown = CancellationToken::new();
    let (http_addr, metrics_task) = http::serve(
        args.http_addr,
        metrics.clone(),
        health.clone(),
        shutdown.clone().cancelled_owned(),
    )
    .await?;
    // The kubelet's probes have their own listener: no client of the metrics port can
    // delay them (src/http/probes.rs).
    let (probe_addr, probe_task) = http::serve_probes(
        args.probe_addr,
        health.clone(),
        shutdown.clone().cancelled_owned(),
    )
    .await?;
    info!(address = %http_addr, probes = %probe_addr, "HTTP endpoints up");
    let http_task = tokio::spawn(async move {
        let _ = metrics_task.await;
        let _ = probe_task.await;
    });
    Ok(Started {
        client,
        metrics,
        health,
        shutdown,
        http_task,
    })
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.hold_driver_syncer && args.driver.driver_syncer_lease.is_empty() {
        anyhow::bail!(
            "--hold-driver-syncer needs the Lease to hold: --driver-syncer-lease is empty"
        );
    }
    // One identity for the Lease, the User-Agent, Events and write-ahead tokens.
    let holder_id = args
        .lease_holder_id
        .clone()
        .unwrap_or_else(default_holder_id);
    if args.dry_run {
        return dry_run::run(args, holder_id).await;
    }
    let Started {
        client,
        metrics,
        health,
        shutdown,
        http_task,
    } = start(&args, &holder_id, "caches not synced yet").await?;
    // `--csi-config-secret`: read and watched before anything resolves the vCenter settings
    // (docs/design.md §8.5).
    let vcenter = vcenter_settings(&vcenter_flags(&client, &args, Some(shutdown.clone())).await?)?;
    // Before the Lease and before vCenter: a cluster ID other than the driver's is refused.
    let cluster_id = cluster_id::resolve(&client, &args, vcenter.cluster_id.as_ref()).await?;

    let leader = leadership::start(&args, &client, &holder_id, &metrics).await?;
    if args.vc_insecure {
        warn!("TLS verification of vCenter is disabled (--vc-insecure)");
    }
    let (grace, raised) = args.effective_in_flight_grace();
    if raised {
        warn!(
            ?grace,
            "--in-flight-grace raised to the request timeout plus the task timeout"
        );
    }
    let backend = cns_backend(&args, &vcenter, &metrics, &holder_id)?;
    let cache = Arc::new(MigrationCache::default());
    let (queue, requests) = WorkQueue::new();
    let driver = driver_cache::start_with(
        &client,
        args.publish_driver_cache,
        shutdown.clone(),
        driver_events(&cache, &queue),
    )
    .await?;
    let mut registrar_config = RegistrarConfig::new(cluster_id);
    if let Some(driver) = &driver {
        let index = driver.index.clone();
        registrar_config =
            registrar_config.with_driver_ids(Arc::new(move |path| index.ids_for(path)));
    }
    let migrations: Api<VolumeMigration> = Api::all(client.clone());
    let index = Arc::new(PvIndex::default());
    let syncer_lease = args.driver.syncer_lease();
    let hold = args.hold_driver_syncer.then(|| registrar_mode::Hold {
        config: crate::syncer_lease::HolderConfig::new(
            &syncer_lease.namespace,
            &syncer_lease.lease_name,
            &holder_id,
            crate::syncer_lease::hold::hold_lease_seconds(grace),
        ),
        leader: leader.watch.clone(),
        hand_over: hand_over::check(index.clone(), cache.clone(), driver.clone()),
    });
    let events = Events::in_namespace(client.clone(), &holder_id, &args.events_namespace);
    let (mode_gate, mode_tasks) = registrar_mode::start(
        &client,
        syncer_lease,
        hold,
        registrar_mode::Outputs {
            metrics: metrics.clone(),
            events: events.clone(),
            cache: cache.clone(),
            queue: queue.clone(),
        },
        shutdown.clone(),
    );
    let store = KubeStatusStore::new(client.clone()).with_extras(status_extras(&index, &cache));
    let registrar = Arc::new(Registrar::new(
        backend,
        Arc::new(store),
        registrar_config
            .with_max_concurrent(usize::from(args.max_concurrent_registrations))
            .with_rate_limit(Some(args.vc_requests_per_second))
            .with_metrics(metrics.clone())
            .with_retry(RetryPolicy::default())
            .with_leader(leader.gate.clone())
            .with_in_flight_grace(grace)
            .with_mode_gate(mode_gate)
            .with_instance(holder_id.clone()),
    ));

    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let ctx = Arc::new(Context {
        cluster: ClusterWrites {
            migrations,
            status: StatusWriter::new(client.clone()),
            events,
            driver: driver.clone(),
        },
        registrar,
        index,
        leader: leader.gate.clone(),
        metrics: metrics.clone(),
        policy: Policy {
            on_pv_delete: args.on_pv_delete.into(),
            error_requeue: crate::requeue::ERROR_REQUEUE,
        },
    });

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
    let full_sync = Arc::new(FullSync::new(
        ctx.clone(),
        pvs,
        cache.clone(),
        args.gc_orphans,
        usize::from(args.max_concurrent_registrations),
        shutdown.clone(),
    ));
    let sync_task = {
        let (health, index, shutdown) = (health.clone(), ctx.index.clone(), shutdown.clone());
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

    wait_for_signal().await;
    info!("shutting down: no new work; letting in-flight registrations record their status");
    health.set_not_ready("shutting down");
    // Calls already in flight finish and record their status; no new one starts.
    leader.gate.close();
    shutdown.cancel();
    drain([controller_task, sync_task, pv_task, watch_task, gained_task]).await;
    for task in mode_tasks {
        task.abort();
    }
    if let Err(e) = leader.leadership.release().await {
        warn!(error = %e, "could not release the lease; a follower takes over when it expires");
    }
    let _ = http_task.await;
    info!("stopped");
    Ok(())
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

/// Schedules every cached VolumeMigration for a reconcile now.
fn reconcile_all(cache: &MigrationCache, queue: &WorkQueue) {
    cache
        .names()
        .iter()
        .for_each(|name| queue.schedule_now(name));
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
                Some(()) => reconcile_all(&cache, &queue),
                None => return,
            },
        }
    }
}

/// The driver cache's watch schedules reconciles: all of them when its CRD appears, the
/// path's when one of its objects is deleted (its reconcile creates what is still needed).
fn driver_events(cache: &Arc<MigrationCache>, queue: &WorkQueue) -> driver_cache::DriverEvents {
    let (all_cache, all_queue) = (cache.clone(), queue.clone());
    let one_queue = queue.clone();
    driver_cache::DriverEvents {
        on_served: Some(Box::new(move || reconcile_all(&all_cache, &all_queue))),
        on_deleted: Some(Box::new(move |path| {
            one_queue.schedule_now(&path.object_name());
        })),
    }
}

/// What a registration's status writes record besides the transition: the PVs of the path
/// from the PV index and the generation of the cached object, read at write time.
fn status_extras(index: &Arc<PvIndex>, cache: &Arc<MigrationCache>) -> StatusExtrasSource {
    let (index, cache) = (index.clone(), cache.clone());
    Arc::new(move |path| StatusExtras {
        pvs: index.pvs_for(path),
        observed_generation: cache.generation(&path.object_name()),
    })
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

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the daemon");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
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

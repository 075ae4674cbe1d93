//! The parts of `volmig run`, assembled in dependency order: the vCenter settings (with
//! the CSI config Secret) and the cluster ID, leadership, the backend, the caches and the
//! work queue, the driver's cache, the registrar mode, the registrar and the reconcile
//! [`Context`] (docs/design.md §3.4).

use std::sync::Arc;

use kube::api::Api;
use tokio::task::JoinHandle;
use tracing::warn;

use super::leadership::{self, Leader};
use super::vcenter::{cns_backend, vcenter_flags, vcenter_settings};
use super::{Started, cluster_id, driver_cache, hand_over, registrar_mode};
use crate::cli::RunArgs;
use crate::controller::work_queue::Requests;
use crate::controller::{ClusterWrites, Context, MigrationCache, Policy, PvIndex, WorkQueue};
use crate::k8s::events::Events;
use crate::k8s::status::{KubeStatusStore, StatusExtras, StatusExtrasSource, StatusWriter};
use crate::registrar::{Registrar, RegistrarConfig, RetryPolicy};
use crate::volume_migration::VolumeMigration;

/// Everything the daemon's loops run on.
pub(super) struct Assembled {
    pub ctx: Arc<Context>,
    pub cache: Arc<MigrationCache>,
    pub queue: WorkQueue,
    pub requests: Requests,
    pub leader: Leader,
    /// The registrar mode's watch and holder tasks (aborted at shutdown).
    pub mode_tasks: Vec<JoinHandle<()>>,
}

/// Resolves the settings and builds the parts; fails on a refused cluster ID, an
/// unreadable CSI config Secret, a vCenter setting that does not parse, or a Lease that
/// cannot be campaigned for.
pub(super) async fn assemble(
    args: &RunArgs,
    started: &Started,
    holder_id: &str,
) -> anyhow::Result<Assembled> {
    let client = &started.client;
    let metrics = &started.metrics;
    // `--csi-config-secret`: read and watched before anything resolves the vCenter settings
    // (docs/design.md §8.5).
    let flags = vcenter_flags(client, args, Some(started.shutdown.clone())).await?;
    let vcenter = vcenter_settings(&flags)?;
    // Before the Lease and before vCenter: a cluster ID other than the driver's is refused.
    let cluster_id = cluster_id::resolve(client, args, vcenter.cluster_id.as_ref()).await?;

    let leader = leadership::start(args, client, holder_id, metrics).await?;
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
    let backend = cns_backend(args, &vcenter, metrics, holder_id)?;
    let cache = Arc::new(MigrationCache::default());
    let (queue, requests) = WorkQueue::new();
    let driver = driver_cache::start_with(
        client,
        args.publish_driver_cache,
        started.shutdown.clone(),
        driver_events(&cache, &queue),
    )
    .await?;
    let mut registrar_config = RegistrarConfig::new(cluster_id);
    if let Some(driver) = &driver {
        let index = driver.index.clone();
        registrar_config =
            registrar_config.with_driver_ids(Arc::new(move |path| index.ids_for(path)));
    }
    let index = Arc::new(PvIndex::default());
    let users = index.clone();
    registrar_config =
        registrar_config.with_volume_users(Arc::new(move |id| users.csi().users_of(&id.0)));
    let syncer_lease = args.driver.syncer_lease();
    let hold = registrar_mode::Hold {
        config: crate::syncer_lease::HolderConfig::new(
            &syncer_lease.namespace,
            &syncer_lease.lease_name,
            holder_id,
            crate::syncer_lease::hold::hold_lease_seconds(grace),
        ),
        leader: leader.watch.clone(),
        hand_over: hand_over::check(
            index.clone(),
            cache.clone(),
            driver.clone(),
            backend.clone(),
        ),
        policy: crate::syncer_lease::TakePolicy {
            hold: args.hold_driver_syncer,
            grace,
        },
    };
    let events = Events::in_namespace(client.clone(), holder_id, &args.events_namespace);
    let (mode_gate, mode_tasks) = registrar_mode::start(
        client,
        syncer_lease,
        hold,
        registrar_mode::Outputs {
            metrics: metrics.clone(),
            events: events.clone(),
            cache: cache.clone(),
            queue: queue.clone(),
        },
        started.shutdown.clone(),
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
            .with_instance(holder_id.to_owned()),
    ));
    let migrations: Api<VolumeMigration> = Api::all(client.clone());
    let ctx = Arc::new(Context {
        cluster: ClusterWrites {
            migrations,
            status: StatusWriter::new(client.clone()),
            events,
            driver,
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
    Ok(Assembled {
        ctx,
        cache,
        queue,
        requests,
        leader,
        mode_tasks,
    })
}

/// The driver cache's watch schedules reconciles: all of them when its CRD appears, the
/// path's when one of its objects is deleted (its reconcile creates what is still needed).
fn driver_events(cache: &Arc<MigrationCache>, queue: &WorkQueue) -> driver_cache::DriverEvents {
    let (all_cache, all_queue) = (cache.clone(), queue.clone());
    let one_queue = queue.clone();
    driver_cache::DriverEvents {
        on_served: Some(Box::new(move || {
            super::reconcile_all(&all_cache, &all_queue)
        })),
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

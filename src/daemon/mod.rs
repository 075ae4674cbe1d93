//! `volmig run`: wires the registrar, the PV watcher, the reconciler, full sync, leader
//! election and the HTTP endpoints together, and shuts them down in order on SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, controller, watcher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::api::VolumeMigration;
use crate::backend::VolumeBackend;
use crate::backend::cns::{CnsBackend, CnsConfig, CnsOptions};
use crate::backend::metered::MeteredBackend;
use crate::backend::on_demand::OnDemandBackend;
use crate::cli::RunArgs;
use crate::controller::full_sync::FullSync;
use crate::controller::pv_watcher::PvWatcher;
use crate::controller::{Context, PvIndex, reconcile};
use crate::http::{self, Health};
use crate::k8s::events::Events;
use crate::k8s::status::{KubeStatusStore, StatusExtras, StatusExtrasSource, StatusWriter};
use crate::leader::default_holder_id;
use crate::metrics::Metrics;
use crate::registrar::{Registrar, RegistrarConfig, RetryPolicy};

mod driver;
mod dry_run;
mod leadership;
mod readiness;

/// How long in-flight work may take to finish after SIGTERM before it is abandoned (a
/// create abandoned in flight is covered by its `Registering` marker: the next leader
/// waits out its grace).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

pub use crate::k8s::client::{kube_client, kube_client_as, user_agent};

fn cns_backend(
    args: &RunArgs,
    metrics: &Metrics,
    holder_id: &str,
) -> anyhow::Result<Arc<dyn VolumeBackend>> {
    let settings = crate::vcenter_config::resolve(args)?;
    for warning in &settings.warnings {
        warn!("{warning}");
    }
    let source = settings.credentials.clone();
    // Unreadable credentials are a start-up error; later they are read again at each login.
    let first = source.load()?;
    info!(
        vcenter = %settings.url,
        user = %first.username,
        credentials = %source.describe(),
        cluster_id = %settings.cluster_id,
        "vCenter configuration"
    );
    let mut template = CnsConfig::new(settings.url.clone(), first.username, first.password);
    template.user_agent = user_agent(holder_id);
    template.ca_file = settings.ca_file.clone();
    template.insecure = settings.insecure;
    template.datacenters = settings.datacenters.clone();
    template.request_timeout = args.vc_request_timeout;
    template.task_timeout = args.vc_task_timeout;
    let probe = source.clone();
    let options = CnsOptions {
        cluster_distribution: settings.cluster_distribution.clone().unwrap_or_default(),
    };
    let connect = move || {
        let mut config = template.clone();
        let options = options.clone();
        let source = source.clone();
        async move {
            let credentials = source.load().map_err(|e| {
                crate::backend::BackendError::new(
                    crate::backend::ErrorClass::Transient,
                    "Login",
                    "CredentialsUnreadable",
                    e.to_string(),
                )
            })?;
            config.username = credentials.username;
            config.password = credentials.password;
            let backend = CnsBackend::connect_with(config, options).await?;
            Ok(Arc::new(backend) as Arc<dyn VolumeBackend>)
        }
    };
    let on_demand: Arc<dyn VolumeBackend> = Arc::new(OnDemandBackend::new(
        connect,
        move || probe.version(),
        crate::backend::on_demand::LoginBackoff::default(),
    ));
    Ok(Arc::new(MeteredBackend::new(on_demand, metrics.clone())))
}

/// The CNS cluster ID: `--cluster-id`, else `cluster-id` of `--csi-config`.
fn cluster_id(args: &RunArgs) -> anyhow::Result<String> {
    Ok(crate::vcenter_config::resolve(args)?.cluster_id)
}

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
    let client = kube_client_as(args.kube.kubeconfig.as_deref(), &user_agent(holder_id)).await?;
    let metrics = Metrics::new();
    let health = Health::new();
    health.set_not_ready(not_ready);
    let shutdown = CancellationToken::new();
    let (http_addr, http_task) = http::serve(
        args.http_addr,
        metrics.clone(),
        health.clone(),
        shutdown.clone().cancelled_owned(),
    )
    .await?;
    info!(address = %http_addr, "HTTP endpoints up");
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
    let backend = cns_backend(&args, &metrics, &holder_id)?;
    let driver = driver::start(&client, args.publish_driver_cache, shutdown.clone()).await?;
    let mut registrar_config = RegistrarConfig::new(cluster_id(&args)?);
    if let Some(driver) = &driver {
        let index = driver.index.clone();
        registrar_config =
            registrar_config.with_driver_ids(Arc::new(move |path| index.ids_for(path)));
    }
    let migrations: Api<VolumeMigration> = Api::all(client.clone());
    let (cache, cache_writer) = reflector::store();
    let watch = watcher::watcher(migrations.clone(), watcher::Config::default())
        .default_backoff()
        .modify(crate::k8s::migrations::strip_for_cache)
        .reflect(cache_writer)
        .applied_objects();
    let controller = Controller::for_stream(watch, cache.clone())
        .with_config(controller_config(args.max_concurrent_registrations));
    let index = Arc::new(PvIndex::default());
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
            .with_instance(holder_id.clone()),
    ));

    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let ctx = Arc::new(Context {
        migrations,
        status: StatusWriter::new(client.clone()),
        registrar,
        index,
        leader: leader.gate.clone(),
        metrics: metrics.clone(),
        events: Events::new(client.clone(), &holder_id),
        on_pv_delete: args.on_pv_delete.into(),
        error_requeue: Duration::from_secs(5),
        driver: driver.clone(),
    });

    let (trigger_tx, trigger_rx) = futures::channel::mpsc::unbounded();
    let controller_task = tokio::spawn(
        controller
            .reconcile_on(trigger_rx)
            .reconcile_all_on(leadership::gained(leader.watch.clone()))
            .graceful_shutdown_on(shutdown.clone().cancelled_owned())
            .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
            .for_each(|result| async move {
                // Reconcile errors are reported by `error_policy`; a failing watch (e.g. a
                // 403 on VolumeMigrations) would otherwise only show as "not ready".
                if let Err(kube::runtime::controller::Error::QueueError(e)) = result {
                    warn!(error = %crate::error_chain(&e), "VolumeMigration watch failed; retrying with backoff");
                }
            })
            .instrument(info_span!("controller")),
    );
    let pv_task = tokio::spawn(
        PvWatcher {
            ctx: ctx.clone(),
            migrations: cache.clone(),
            trigger: trigger_tx,
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
        let driver = ctx.driver.clone();
        let (interval, leader_rx) = (args.full_sync_interval, leader.watch.clone());
        tokio::spawn(
            async move {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = readiness::caches_synced(&cache, &index, driver.as_deref()) => {}
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
    drain([controller_task, sync_task, pv_task]).await;
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
fn controller_config(max_concurrent_registrations: u16) -> controller::Config {
    let bound = u32::from(max_concurrent_registrations) * 2 + 64;
    controller::Config::default().concurrency(u16::try_from(bound).unwrap_or(u16::MAX))
}

/// What a registration's status writes record besides the transition: the PVs of the path
/// from the PV index and the generation of the cached object, read at write time.
fn status_extras(index: &Arc<PvIndex>, cache: &Store<VolumeMigration>) -> StatusExtrasSource {
    let (index, cache) = (index.clone(), cache.clone());
    Arc::new(move |path| StatusExtras {
        pvs: index.pvs_for(path),
        observed_generation: cache
            .get(&ObjectRef::new(&path.object_name()))
            .and_then(|vm| vm.metadata.generation),
    })
}

/// Waits up to [`SHUTDOWN_GRACE`] for the tasks, then abandons them: nothing of this
/// process runs when the Lease is released.
async fn drain(tasks: [JoinHandle<()>; 3]) {
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
        for slots in [1u16, 8, 1024] {
            let config = controller_config(slots);
            let debug = format!("{config:?}");
            assert!(
                debug.contains(&format!("concurrency: {}", u32::from(slots) * 2 + 64)),
                "{debug}"
            );
        }
    }
}

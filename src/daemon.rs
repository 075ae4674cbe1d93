//! `volmig run`: wires the registrar, the PV watcher, the reconciler, full sync, leader
//! election and the HTTP endpoints together, and shuts them down in order on SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::VolumeMigration;
use crate::backend::VolumeBackend;
use crate::backend::cns::{CnsBackend, CnsConfig, DEFAULT_USER_AGENT};
use crate::backend::metered::MeteredBackend;
use crate::backend::on_demand::OnDemandBackend;
use crate::cli::RunArgs;
use crate::events::Events;
use crate::full_sync::FullSync;
use crate::http::{self, Health};
use crate::leader::{LeaderConfig, Leadership, default_holder_id};
use crate::metrics::Metrics;
use crate::pv_index::PvIndex;
use crate::pv_watcher::PvWatcher;
use crate::reconcile::{self, Context};
use crate::registrar::{LeaderGate, Registrar, RegistrarConfig, RetryPolicy};
use crate::status::KubeStatusStore;

/// How long in-flight work may take to finish after SIGTERM.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// The User-Agent of every request this replica makes (Kubernetes and vCenter), naming its
/// lease holder ID so audit logs can tell replicas apart.
pub fn user_agent(holder_id: &str) -> String {
    format!("{DEFAULT_USER_AGENT} ({holder_id})")
}

/// Builds a client from `--kubeconfig`, else in-cluster / `KUBECONFIG` / `~/.kube/config`.
pub async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    kube_client_as(kubeconfig, DEFAULT_USER_AGENT).await
}

/// [`kube_client`] with a given User-Agent.
pub async fn kube_client_as(
    kubeconfig: Option<&std::path::Path>,
    agent: &str,
) -> anyhow::Result<kube::Client> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "finding a Kubernetes configuration (in-cluster, KUBECONFIG, ~/.kube/config)",
        )?,
    };
    let agent = ::http::HeaderValue::from_str(agent).context("User-Agent header")?;
    config.headers.push((::http::header::USER_AGENT, agent));
    kube::Client::try_from(config).context("creating the Kubernetes client")
}

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
    let probe = source.clone();
    let connect = move || {
        let mut config = template.clone();
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
            let backend = CnsBackend::connect(config).await?;
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

/// A stream that yields once each time `leader` turns true (including at start).
fn leadership_gained(leader: watch::Receiver<bool>) -> impl futures::Stream<Item = ()> + Send {
    stream::unfold((leader, false), |(mut rx, mut was)| async move {
        loop {
            let now = *rx.borrow_and_update();
            if now && !was {
                return Some(((), (rx, true)));
            }
            was = now;
            rx.changed().await.ok()?;
        }
    })
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let holder_id = args
        .lease_holder_id
        .clone()
        .unwrap_or_else(default_holder_id);
    let client = kube_client_as(args.kube.kubeconfig.as_deref(), &user_agent(&holder_id)).await?;
    let metrics = Metrics::new();
    let health = Health::new();
    health.set_not_ready("caches not synced yet");
    let shutdown = CancellationToken::new();

    let (http_addr, http_task) = http::serve(
        args.http_addr,
        metrics.clone(),
        health.clone(),
        shutdown.clone().cancelled_owned(),
    )
    .await?;
    info!(address = %http_addr, "HTTP endpoints up");

    let holder_id = args
        .lease_holder_id
        .clone()
        .unwrap_or_else(default_holder_id);
    let leadership = if args.leader_election {
        Leadership::start(
            client.clone(),
            LeaderConfig {
                namespace: args.lease_namespace.clone(),
                lease_name: args.lease_name.clone(),
                holder_id: holder_id.clone(),
                lease_duration: args.lease_duration,
            },
        )
        .await
        .context("starting leader election")?
    } else {
        Leadership::always_leader()
    };
    let leader_rx = leadership.watch();
    spawn_leader_metric(leader_rx.clone(), metrics.clone());
    let handle = leadership.handle();
    let gate = LeaderGate::new(leader_rx.clone()).with_check(Arc::new(move || handle.is_leader()));

    if args.vc_insecure {
        warn!("TLS verification of vCenter is disabled (--vc-insecure)");
    }
    let backend = cns_backend(&args, &metrics, &holder_id)?;
    let registrar = Arc::new(Registrar::new(
        backend,
        Arc::new(KubeStatusStore::new(client.clone())),
        RegistrarConfig {
            cluster_id: cluster_id(&args)?,
            max_concurrent: usize::from(args.max_concurrent_registrations),
            requests_per_second: Some(args.vc_requests_per_second),
            retry: RetryPolicy::default(),
            leader: gate.clone(),
            in_flight_grace: args.in_flight_grace,
        },
    ));

    let migrations: Api<VolumeMigration> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let ctx = Arc::new(Context {
        migrations: migrations.clone(),
        registrar,
        index: Arc::new(PvIndex::default()),
        leader: gate.clone(),
        metrics: metrics.clone(),
        events: Events::new(client.clone(), &holder_id),
        on_pv_delete: args.on_pv_delete,
        error_requeue: Duration::from_secs(5),
    });

    let controller = Controller::new(migrations, watcher::Config::default());
    let cache = controller.store();
    let (trigger_tx, trigger_rx) = futures::channel::mpsc::unbounded();
    let controller_task = tokio::spawn(
        controller
            .reconcile_on(trigger_rx)
            .reconcile_all_on(leadership_gained(leader_rx.clone()))
            .graceful_shutdown_on(shutdown.clone().cancelled_owned())
            .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
            .for_each(|_| async {}),
    );
    let pv_task = tokio::spawn(
        PvWatcher {
            ctx: ctx.clone(),
            migrations: cache.clone(),
            trigger: trigger_tx,
        }
        .run(pvs.clone(), shutdown.clone()),
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
        let (interval, leader) = (args.full_sync_interval, leader_rx.clone());
        tokio::spawn(async move {
            let synced = async {
                // kube-runtime's readiness signal wakes only its most recent waiter (the
                // controller's), so poll it again periodically instead of waiting once.
                while tokio::time::timeout(Duration::from_millis(100), cache.wait_until_ready())
                    .await
                    .is_err()
                {}
                while !index.is_synced() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = synced => {}
            }
            health.set_ready(true);
            info!("caches synced; ready");
            full_sync.run(interval, leader, shutdown).await;
        })
    };

    wait_for_signal().await;
    info!("shutting down: no new work; letting in-flight registrations record their status");
    health.set_not_ready("shutting down");
    // Calls already in flight finish and record their status; no new one starts.
    gate.close();
    shutdown.cancel();
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        let _ = controller_task.await;
        let _ = sync_task.await;
        let _ = pv_task.await;
    })
    .await;
    if drained.is_err() {
        warn!(grace = ?SHUTDOWN_GRACE, "in-flight work did not finish in time");
    }
    if let Err(e) = leadership.release().await {
        warn!(error = %e, "could not release the lease; a follower takes over when it expires");
    }
    let _ = http_task.await;
    info!("stopped");
    Ok(())
}

fn spawn_leader_metric(mut leader: watch::Receiver<bool>, metrics: Metrics) {
    tokio::spawn(async move {
        loop {
            let is_leader = *leader.borrow_and_update();
            metrics.set_leader(is_leader);
            info!(leader = is_leader, "leadership");
            if leader.changed().await.is_err() {
                return;
            }
        }
    });
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

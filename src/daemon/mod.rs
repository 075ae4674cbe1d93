//! `volmig run`: starts the HTTP endpoints, assembles the parts (`assemble`: settings,
//! leadership, backend, caches, registrar), starts the loops (`loops`: reconciles,
//! watches, full sync) and stops them in order on SIGTERM (docs/design.md §3.3).

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::controller::{MigrationCache, WorkQueue};
use crate::http::{self, Health};
use crate::leader::default_holder_id;
use crate::metrics::Metrics;

mod assemble;
pub mod cluster_id;
mod driver_cache;
mod dry_run;
pub mod dry_run_plan;
pub mod hand_over;
mod leadership;
mod loops;
mod readiness;
mod registrar_mode;
mod vcenter;

/// How long in-flight work may take to finish after SIGTERM before it is abandoned (a
/// create abandoned in flight is covered by its `Registering` marker: the next leader
/// waits out its grace).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

pub use crate::k8s::client::{kube_client, kube_client_as, user_agent};
pub use dry_run::run_once as dry_run_once;
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

/// Runs the daemon until SIGTERM or SIGINT: start (client, metrics, HTTP endpoints),
/// assemble the parts ([`assemble`]), start the loops ([`loops`]), wait for the signal,
/// stop in order.
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
    let started = start(&args, &holder_id, "caches not synced yet").await?;
    let parts = assemble::assemble(&args, &started, &holder_id).await?;
    let loops = loops::spawn(&args, &started, parts);
    wait_for_signal().await;
    loops.stop(&started).await;
    let Started { http_task, .. } = started;
    let _ = http_task.await;
    info!("stopped");
    Ok(())
}

/// Schedules every cached VolumeMigration for a reconcile now.
fn reconcile_all(cache: &MigrationCache, queue: &WorkQueue) {
    cache
        .names()
        .iter()
        .for_each(|name| queue.schedule_now(name));
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

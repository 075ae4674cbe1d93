//! Memory and start-up over N existing volumes: one API server is filled step by step
//! (N = 0, then more) with in-tree PVs and, for each, the Registered VolumeMigration and
//! the CSI driver's cache object volmig would have written (the driver's CRD is installed,
//! so volmig indexes those objects too). At each N, `volmig run` is started `runs` times as the single
//! replica (`--leader-election false`) with vCenter unreachable, so it does only its
//! Kubernetes work: list and watch PVs and VolumeMigrations, reconcile every object once
//! (each is already in sync, nothing to write), and start a full sync that stops at the
//! CNS listing. Measured: process start → `/readyz` 200, then the resident memory once the
//! daemon is idle.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::ensure;
use kube_testserver::Verb;

use super::{Env, progress};
use crate::cluster::{self, Cluster, Volume, daemon_writes};
use crate::daemon::{Daemon, VCenter};
use crate::results::{Summary, Tracked};
use volmig::backend::VolumeId;

/// A CNS-like volume ID (a UUID's shape) for volume `i`.
pub fn volume_id(i: usize) -> VolumeId {
    VolumeId(format!("b0b0b0b0-0000-4000-8000-{i:012x}"))
}

/// What [`run`] leaves for the in-process pass: the filled server and its volumes.
pub struct Filled {
    /// The API server holding every volume.
    pub cluster: Cluster,
    /// The volumes and their IDs.
    pub volumes: Vec<(Volume, VolumeId)>,
}

/// Measures every size of `env.scale.tracked_sizes`.
pub async fn run(env: &Env) -> anyhow::Result<(Vec<Tracked>, Filled)> {
    let cluster = Cluster::start().await?;
    cluster.install_driver_crd().await?;
    let mut all: Vec<(Volume, VolumeId)> = Vec::new();
    let mut rows: Vec<Tracked> = Vec::new();
    let mut idle_rss_kib = 0.0;
    for &size in &env.scale.tracked_sizes {
        if size > all.len() {
            let started = std::time::Instant::now();
            let new: Vec<(Volume, VolumeId)> =
                cluster::volumes("LocalDS_0", all.len() + 1..size + 1)
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| (v, volume_id(all.len() + i + 1)))
                    .collect();
            let pvs: Vec<Volume> = new.iter().map(|(v, _)| v.clone()).collect();
            cluster.create_pvs(&pvs).await?;
            cluster.create_registered(&new).await?;
            cluster.create_driver_objects(&new).await?;
            progress(format!(
                "tracked: created {} PVs, Registered VolumeMigrations and driver objects in \
                 {:.1} s",
                new.len(),
                started.elapsed().as_secs_f64()
            ));
            all.extend(new);
        }
        let mut ready = Vec::new();
        let mut rss = Vec::new();
        let mut anon = Vec::new();
        let mut peak = Vec::new();
        let mut settle = Vec::new();
        let mut writes = Vec::new();
        let mut writes_by_request: BTreeMap<String, f64> = BTreeMap::new();
        for r in 0..env.scale.runs {
            cluster.server.reset_stats();
            let mut daemon = Daemon::spawn(
                &env.volmig,
                &env.logs,
                &format!("tracked-{size}-r{r}"),
                &cluster.kubeconfig,
                VCenter::Unreachable,
                &[
                    ("--leader-election", "false".into()),
                    ("--full-sync-interval", "1h".into()),
                ],
            )?;
            let limit = Duration::from_secs(300);
            let seconds = daemon
                .wait_ready(Duration::from_millis(10), limit)
                .await?
                .as_secs_f64();
            daemon
                .wait_metric(
                    "volmig_pvs_tracked",
                    "",
                    size as f64,
                    Duration::from_millis(50),
                    limit,
                )
                .await?;
            let quiet = daemon
                .wait_quiet(Duration::from_secs(1), 0.02, Duration::from_secs(120))
                .await?
                .as_secs_f64();
            let mem = daemon.memory()?;
            tokio::time::sleep(env.hold).await;
            let tracked = daemon.metric("volmig_pvs_tracked", "").await.unwrap_or(0.0);
            ensure!(
                tracked as usize == size,
                "volmig tracks {tracked} PVs, expected {size}"
            );
            let stats = cluster.stats();
            let (_, events, other) = daemon_writes(&stats);
            for (request, n) in cluster::by_verb(&stats, Verb::is_write) {
                if !request.contains("leases") {
                    *writes_by_request.entry(request).or_default() += n as f64;
                }
            }
            daemon.stop(Duration::from_secs(20)).await;
            progress(format!(
                "tracked N={size} run {r}: ready in {seconds:.3} s, RSS {:.1} MiB once idle \
                 ({quiet:.1} s after ready), {} writes {:?}",
                mem.rss_kib as f64 / 1024.0,
                events + other,
                cluster::by_verb(&stats, Verb::is_write)
            ));
            ready.push(seconds);
            rss.push(mem.rss_kib as f64);
            anon.push(mem.rss_anon_kib as f64);
            peak.push(mem.peak_kib as f64);
            settle.push(quiet);
            writes.push((events + other) as f64);
        }
        let rss = Summary::of(&rss);
        if size == 0 {
            idle_rss_kib = rss.median;
        }
        let per_volume = if size == 0 {
            Summary::of(&vec![0.0; rss.runs.len()])
        } else {
            rss.map(|kib| (kib - idle_rss_kib) * 1024.0 / size as f64)
        };
        rows.push(Tracked {
            volumes: size,
            ready_seconds: Summary::of(&ready),
            bytes_per_volume: per_volume,
            rss_kib: rss,
            rss_anon_kib: Summary::of(&anon),
            peak_kib: Summary::of(&peak),
            settle_seconds: Summary::of(&settle),
            api_writes: Summary::of(&writes),
            api_writes_by_request: writes_by_request,
        });
    }
    Ok((
        rows,
        Filled {
            cluster,
            volumes: all,
        },
    ))
}

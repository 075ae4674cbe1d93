//! Steady-state full sync in-process at large N: volmig's own `FullSync::run_pass` (the
//! code `volmig run` runs), driven from this process against the API test server (PVs
//! listed page by page, VolumeMigrations from the compact watch cache, exactly as the daemon
//! wires them) and an in-memory backend holding one CNS volume per PV.
//!
//! CPU time is split by thread: the API test server runs on its own threads
//! (`kube-testserver`), so volmig's side is every other thread of this process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use async_trait::async_trait;
use kube::api::Api;
use kube_testserver::Verb;
use tokio_util::sync::CancellationToken;
use volmig::VolumePath;
use volmig::backend::{
    BackendError, CnsVolume, CreateVolumeRequest, ErrorClass, VolumeBackend, VolumeId, VolumePage,
    op,
};
use volmig::controller::full_sync::FullSync;
use volmig::controller::migration_cache::watch as migration_watch;
use volmig::controller::{
    ClusterWrites, Context, MigrationCache, Policy, PvDeletePolicy, PvIndex, WorkQueue,
};
use volmig::k8s::events::Events;
use volmig::k8s::status::{KubeStatusStore, StatusWriter};
use volmig::metrics::Metrics;
use volmig::registrar::{LeaderGate, Registrar, RegistrarConfig};
use volmig::volume_migration::VolumeMigration;

use super::progress;
use crate::cluster::{self, Cluster, Volume};
use crate::procfs::CpuSnapshot;
use crate::results::{SteadyPass, Summary, median_counts};

/// The cluster ID of the in-process daemon, and of every volume the listing holds.
const BENCH_CLUSTER: &str = "bench-cluster";

/// Thread name of the API test server's runtime.
const SERVER_THREAD: &str = "kube-testserver";

/// An in-memory vCenter that holds a fixed set of CNS volumes and lists them in pages of
/// volmig's in-memory page size; every other call is counted and refused (a steady pass
/// must not make any).
pub struct ListedVolumes {
    volumes: Vec<CnsVolume>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
}

impl ListedVolumes {
    /// One volume per `(volume, id)`, named as volmig names its registrations.
    pub fn new(volumes: &[(Volume, VolumeId)]) -> anyhow::Result<ListedVolumes> {
        let created = jiff::Timestamp::from_second(1_700_000_000)?;
        let mut list = volumes
            .iter()
            .map(|(v, id)| {
                let path = VolumePath::parse(&v.path)?;
                Ok(CnsVolume {
                    id: id.clone(),
                    name: path.cns_volume_name(),
                    backing_path: Some(path),
                    created: Some(created),
                    cluster_ids: vec![BENCH_CLUSTER.to_owned()],
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        list.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(ListedVolumes {
            volumes: list,
            calls: Mutex::new(BTreeMap::new()),
        })
    }

    fn count(&self, operation: &'static str) {
        *self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(operation)
            .or_default() += 1;
    }

    /// Calls so far by operation; cleared.
    pub fn take_calls(&self) -> BTreeMap<String, f64> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(PoisonError::into_inner))
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v as f64))
            .collect()
    }

    fn refuse<T>(&self, operation: &'static str) -> volmig::backend::Result<T> {
        self.count(operation);
        Err(BackendError::new(
            ErrorClass::Permanent,
            operation,
            "NotSupported",
            "the benchmark's backend only lists volumes",
        ))
    }
}

#[async_trait]
impl VolumeBackend for ListedVolumes {
    async fn disk_uuid(&self, _path: &VolumePath) -> volmig::backend::Result<String> {
        self.refuse(op::DISK_UUID)
    }

    async fn find_volumes(
        &self,
        _name: &str,
        _path: &VolumePath,
    ) -> volmig::backend::Result<Vec<CnsVolume>> {
        self.refuse(op::FIND)
    }

    async fn create_volume(&self, _r: &CreateVolumeRequest) -> volmig::backend::Result<VolumeId> {
        self.refuse(op::CREATE)
    }

    async fn delete_volume(&self, _id: &VolumeId) -> volmig::backend::Result<()> {
        self.refuse(op::DELETE)
    }

    async fn list_volumes(&self, cursor: Option<String>) -> volmig::backend::Result<VolumePage> {
        self.count(op::LIST);
        let start: usize = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
        let end = (start + volmig::backend::memory::PAGE_SIZE).min(self.volumes.len());
        Ok(VolumePage {
            volumes: self.volumes.get(start..end).unwrap_or_default().to_vec(),
            next: (end < self.volumes.len()).then(|| end.to_string()),
        })
    }
}

/// Runs `runs` passes (after one warm-up pass) over what `cluster` holds.
pub async fn run(
    cluster: &Cluster,
    volumes: &[(Volume, VolumeId)],
    runs: usize,
) -> anyhow::Result<SteadyPass> {
    let n = volumes.len();
    let backend = Arc::new(ListedVolumes::new(volumes)?);
    let client = cluster::client(&cluster.kubeconfig).await?;
    let migrations: Api<VolumeMigration> = Api::all(client.clone());
    let registrar = Arc::new(Registrar::new(
        backend.clone(),
        Arc::new(KubeStatusStore::new(client.clone())),
        RegistrarConfig::new(BENCH_CLUSTER).with_rate_limit(None),
    ));
    let ctx = Arc::new(Context {
        cluster: ClusterWrites {
            migrations: migrations.clone(),
            status: StatusWriter::new(client.clone()),
            events: Events::new(client.clone(), "volmig-bench"),
            driver: None,
        },
        registrar,
        index: Arc::new(PvIndex::default()),
        leader: LeaderGate::always(),
        metrics: Metrics::new(),
        policy: Policy {
            on_pv_delete: PvDeletePolicy::Keep,
            error_requeue: Duration::from_secs(5),
        },
    });
    // The VolumeMigration cache, as the daemon's controller keeps it.
    let cache = Arc::new(MigrationCache::default());
    let shutdown = CancellationToken::new();
    // No reconciles here: the queue's requests are dropped.
    let (queue, _) = WorkQueue::new();
    let watch_task = tokio::spawn(migration_watch::run(
        migrations,
        cache.clone(),
        queue,
        shutdown.clone(),
    ));
    tokio::time::timeout(Duration::from_secs(600), async {
        while !cache.is_synced() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .context("the VolumeMigration cache did not fill")?;
    ensure!(
        cache.len() == n,
        "cache holds {} VolumeMigrations, expected {n}",
        cache.len()
    );
    let full_sync = FullSync::new(
        ctx,
        Api::all(client.clone()),
        cache,
        false,
        8,
        shutdown.clone(),
    );

    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    let mut server_cpu = Vec::new();
    let mut lists = Vec::new();
    let mut lists_by_resource = Vec::new();
    let mut writes = Vec::new();
    let mut repairs = Vec::new();
    let mut calls = Vec::new();
    for i in 0..=runs {
        cluster.server.reset_stats();
        backend.take_calls();
        let me = std::process::id();
        let before = CpuSnapshot::read(me)?;
        let started = Instant::now();
        let summary = full_sync.run_pass().await.context("full sync pass")?;
        let elapsed = started.elapsed().as_secs_f64();
        let after = CpuSnapshot::read(me)?;
        let stats = cluster.stats();
        ensure!(
            summary.pvs == n && summary.migrations == n && summary.volumes == n,
            "the pass saw {summary:?}, expected {n} of each"
        );
        let client_cpu = before.used_until(&after, |t| t != SERVER_THREAD) as f64 / 1e9;
        let served = before.used_until(&after, |t| t == SERVER_THREAD) as f64 / 1e9;
        let list_count = cluster::count_verb(&stats, Verb::List);
        progress(format!(
            "in-process N={n} pass {i}{}: {elapsed:.3} s wall, {client_cpu:.3} s CPU (volmig \
             side), {served:.3} s CPU (API server), {list_count} lists, {} writes, {} repairs",
            if i == 0 { " (warm-up)" } else { "" },
            stats.writes,
            summary.repairs
        ));
        if i == 0 {
            continue;
        }
        wall.push(elapsed);
        cpu.push(client_cpu);
        server_cpu.push(served);
        lists.push(list_count as f64);
        lists_by_resource.push(
            cluster::by_verb(&stats, |v| v == Verb::List)
                .into_iter()
                .map(|(k, v)| (k, v as f64))
                .collect::<BTreeMap<_, _>>(),
        );
        // Every request here is volmig's code (made with the benchmark's client).
        writes.push(stats.writes as f64);
        repairs.push(summary.repairs as f64);
        calls.push(backend.take_calls());
    }
    shutdown.cancel();
    let _ = watch_task.await;
    Ok(SteadyPass {
        mode: "in-process".into(),
        what: format!(
            "volmig::controller::full_sync::FullSync::run_pass called in the benchmark process (wired as \
             `volmig run` wires it: PVs listed from the API test server in pages of {}, \
             VolumeMigrations read from volmig's compact watch cache, CNS volumes listed \
             from an in-memory backend in pages of {}); {n} PVs, {n} Registered \
             VolumeMigrations, {n} CNS volumes. CPU = every thread of this process except \
             the API test server's; one warm-up pass is not counted",
            volmig::controller::full_sync::PAGE_SIZE,
            volmig::backend::memory::PAGE_SIZE
        ),
        volumes: n,
        wall_seconds: Summary::of(&wall),
        cpu_seconds: Summary::of(&cpu),
        server_cpu_seconds: Summary::of(&server_cpu),
        api_lists: Summary::of(&lists),
        api_lists_by_resource: median_counts(&lists_by_resource),
        api_writes: Summary::of(&writes),
        lease_writes: Summary::of(&vec![0.0; wall.len()]),
        backend_calls: median_counts(&calls),
        repairs: Summary::of(&repairs),
        rss_kib_after: None,
        setup_register_seconds: None,
        setup_backend_call_ms: BTreeMap::new(),
    })
}

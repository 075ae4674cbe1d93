//! The bare client: the limit of this machine for registration throughput. In the
//! benchmark process, C workers share volmig's own CNS backend (`volmig::backend::cns`,
//! metered and gated as `volmig run` does it: `--max-concurrent-registrations C`,
//! `--vc-requests-per-second` as in the throughput runs) and make, per vmdk, exactly the
//! backend calls the registrar makes for a new vmdk, in its order — `disk_uuid`,
//! `find_volumes`, `create_volume`, `protect_from_vm_delete` — and nothing else: no
//! Kubernetes, no status, no lock. The simulator is started exactly as for volmig's runs
//! (same N vmdks, same L). The clock runs from the first call to the end of the last
//! registration's calls; afterwards every vmdk must have exactly one CNS volume.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use volmig::VolumePath;
use volmig::backend::cns::{CnsBackend, CnsConfig, CnsOptions};
use volmig::backend::metered::MeteredBackend;
use volmig::backend::{CreateVolumeRequest, SendFence, VolumeBackend, list_all_volumes};
use volmig::metrics::Metrics;
use volmig::registrar::{CallGate, Lane, LeaderGate};

use super::backend_metrics::{VC_REQUESTS_PER_SECOND, backend_call_ms_from};
use super::{CpuClock, quiet};
use crate::cluster;
use crate::results::Load;
use crate::sim::{Sim, SimOptions};

/// The CNS cluster ID the daemon gets in the benchmark (`--cluster-id`).
const CLUSTER_ID: &str = "bench-cluster";

/// What one bare-client run measured.
pub struct BareRun {
    /// From the first call to the end of the last registration's calls.
    pub seconds: f64,
    /// Simulator SOAP calls per vmdk by method.
    pub sim_calls: BTreeMap<String, f64>,
    /// Most `CnsCreateVolume` calls in flight at once at the simulator.
    pub peak_creates: f64,
    /// Mean backend call duration by operation, ms (the client's own metered backend).
    pub backend_ms: BTreeMap<String, f64>,
    /// CPU ms per vmdk of the simulator and of the benchmark process (the client).
    pub cpu_ms: BTreeMap<String, f64>,
    /// The rest of the machine during the timed window.
    pub load: Load,
    /// The wait for a quiet machine before the clock started.
    pub waited: quiet::Waited,
}

/// One run: fresh simulator with `n` vmdks and `CnsCreateVolume` delayed by `latency`
/// ms, `c` workers; the clock starts once the machine is quiet (as far as `quiet_gate`
/// lets it wait), as for volmig's runs.
pub async fn one(
    vcsim: &std::path::Path,
    quiet_gate: &quiet::Gate,
    latency: u64,
    c: u16,
    n: usize,
) -> anyhow::Result<BareRun> {
    let sim = Sim::start(
        vcsim,
        &SimOptions {
            vmdks: n,
            create_delay_ms: latency,
        },
    )
    .await?;
    let metrics = Metrics::new();
    let backend = connect(&sim, &metrics).await?;
    let gate = Arc::new(CallGate::new(
        usize::from(c),
        Some(VC_REQUESTS_PER_SECOND),
        LeaderGate::always(),
    ));
    let paths: Vec<VolumePath> = cluster::volumes(&sim.datastore, 1..n + 1)
        .iter()
        .map(|v| VolumePath::parse(&v.path))
        .collect::<Result<_, _>>()
        .context("parsing the vmdk paths")?;
    let paths = Arc::new(paths);
    let waited = quiet_gate.wait().await;
    sim.reset_stats().await?;

    let next = Arc::new(AtomicUsize::new(0));
    let cpu = CpuClock::start(&[
        ("simulator", sim.pid()),
        ("benchmark process (bare client)", Some(std::process::id())),
    ]);
    let started = Instant::now();
    let workers: Vec<_> = (0..c)
        .map(|_| {
            let (backend, gate, paths, next) =
                (backend.clone(), gate.clone(), paths.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = paths.get(i) else {
                        return Ok::<(), anyhow::Error>(());
                    };
                    register(backend.as_ref(), &gate, path)
                        .await
                        .with_context(|| format!("registering {path}"))?;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.context("a bare-client worker panicked")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let window = cpu.finish(n as f64);
    let stats = sim.stats().await?;
    // Before the check's own listing.
    let backend_ms = backend_call_ms_from(&metrics.encode_prometheus_text());

    // Every vmdk ended with exactly one CNS volume.
    let volumes = list_all_volumes(backend.as_ref())
        .await
        .context("listing the CNS volumes")?;
    let mut per_name: BTreeMap<&str, usize> = BTreeMap::new();
    for v in &volumes {
        *per_name.entry(v.name.as_str()).or_default() += 1;
    }
    let names: Vec<String> = paths.iter().map(VolumePath::cns_volume_name).collect();
    let missing = names
        .iter()
        .filter(|name| !per_name.contains_key(name.as_str()))
        .count();
    let duplicated = per_name.values().filter(|k| **k > 1).count();
    ensure!(
        volumes.len() == n && missing == 0 && duplicated == 0,
        "expected one CNS volume per vmdk ({n}), got {} volumes, {missing} vmdks without \
         one, {duplicated} with more than one",
        volumes.len()
    );
    sim.stop().await;

    let per_pv = n as f64;
    Ok(BareRun {
        seconds,
        sim_calls: stats
            .calls
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / per_pv))
            .collect(),
        peak_creates: stats
            .max_in_flight
            .get("CnsCreateVolume")
            .copied()
            .unwrap_or(0) as f64,
        backend_ms,
        cpu_ms: window.ms_per,
        load: window.load,
        waited,
    })
}

/// volmig's backend as `volmig run` builds it, minus the lazy login: the CNS backend
/// (logged in and with the inventory read before the clock starts) behind the metering
/// decorator.
async fn connect(sim: &Sim, metrics: &Metrics) -> anyhow::Result<Arc<dyn VolumeBackend>> {
    let url = reqwest::Url::parse(&sim.url).context("the simulator URL")?;
    let mut config = CnsConfig::new(url, sim.username.clone(), sim.password.as_str());
    config.ca_file = Some(sim.ca_file.clone());
    let cns = CnsBackend::connect_with(config, CnsOptions::default())
        .await
        .context("connecting to the simulator")?;
    Ok(Arc::new(MeteredBackend::new(
        Arc::new(cns),
        metrics.clone(),
    )))
}

/// The backend calls of one registration of a new vmdk, in the registrar's order, each
/// holding a slot of the gate as the registrar's calls do.
async fn register(
    backend: &dyn VolumeBackend,
    gate: &CallGate,
    path: &VolumePath,
) -> anyhow::Result<()> {
    let slot = |lane| async move { gate.enter(lane).await.context("the call gate is closed") };
    let permit = slot(Lane::New).await?;
    backend.disk_uuid(path).await?;
    drop(permit);
    let name = path.cns_volume_name();
    let permit = slot(Lane::Started).await?;
    let found = backend.find_volumes(&name, path).await?;
    drop(permit);
    ensure!(found.is_empty(), "{path} already has a CNS volume");
    let request = CreateVolumeRequest {
        path: path.clone(),
        name,
        cluster_id: CLUSTER_ID.to_owned(),
        storage_policy_name: None,
        fence: volmig::backend::SendFence::none(),
    };
    let permit = slot(Lane::Started).await?;
    let id = backend.create_volume(&request).await?;
    drop(permit);
    let permit = slot(Lane::Started).await?;
    // As in the registrar, a failed protection does not fail the registration.
    let _ = backend
        .protect_from_vm_delete(&id, &SendFence::none())
        .await;
    drop(permit);
    Ok(())
}

/// Limit of one bare run (the ideal time ten times over plus a minute), as for volmig.
pub fn limit(n: usize, latency: u64, c: u16) -> Duration {
    Duration::from_millis(n as u64 * latency / u64::from(c)) * 10 + Duration::from_secs(60)
}

//! Steady-state full sync end to end: N vmdks registered by a first `volmig run`, then a
//! second one with a short `--full-sync-interval` whose passes have nothing to repair.
//! Per pass: wall time (the pass-duration histogram), CPU time of the daemon over exactly
//! that window (`/proc/PID/task/*/schedstat`, sampled every 50 ms), requests counted at
//! the API server and the simulator between the end of one pass and the end of the next.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kube_testserver::{Stats, Verb};

use super::{Env, POLL, progress};
use crate::cluster::{self, Cluster, daemon_writes};
use crate::daemon::{Daemon, VCenter, metric_sum};
use crate::procfs::CpuSnapshot;
use crate::results::{SteadyPass, Summary, median_counts};
use crate::sim::{Sim, SimOptions, SimStats};

/// How often pass ends are looked for (and CPU sampled) while measuring passes.
const PASS_POLL: Duration = Duration::from_millis(50);

/// One measured pass.
pub struct Pass {
    /// Wall time of the pass from the daemon's histogram, seconds.
    pub wall: f64,
    /// CPU time of the daemon during the pass, seconds.
    pub cpu: f64,
    /// API requests from the end of the previous pass to the end of this one.
    pub stats: Stats,
    /// Simulator calls in the same window.
    pub sim: SimStats,
    /// Repairs (full-sync actions) in the same window.
    pub repairs: f64,
}

fn pass_metrics(body: &str) -> (f64, f64, f64) {
    (
        metric_sum(body, "volmig_full_sync_passes_total", "result=\"ok\""),
        metric_sum(body, "volmig_full_sync_duration_seconds_sum", ""),
        metric_sum(body, "volmig_full_sync_actions_total", ""),
    )
}

/// Measures the next `count` complete passes of `daemon`.
pub async fn measure_passes(
    daemon: &mut Daemon,
    cluster: &Cluster,
    sim: &Sim,
    count: usize,
    limit: Duration,
) -> anyhow::Result<Vec<Pass>> {
    let deadline = Instant::now() + limit;
    let mut cpu: VecDeque<(Instant, CpuSnapshot)> = VecDeque::new();
    let mut last: Option<(f64, f64, f64)> = None;
    // Whether the counters were reset at the end of a pass (a measuring window is open).
    let mut open = false;
    let mut passes = Vec::new();
    loop {
        daemon.check_alive()?;
        ensure!(
            Instant::now() < deadline,
            "{count} full-sync passes did not finish within {limit:?}"
        );
        let snapshot = daemon.cpu()?;
        let now = Instant::now();
        cpu.push_back((now, snapshot));
        while cpu
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(600))
        {
            cpu.pop_front();
        }
        let Some((_, body)) = daemon.get("/metrics").await else {
            tokio::time::sleep(PASS_POLL).await;
            continue;
        };
        let current = pass_metrics(&body);
        match last {
            None => last = Some(current),
            Some(prev) if current.0 > prev.0 => {
                // A pass ended since the previous poll. The first one only opens a window.
                if current.0 > prev.0 + 1.0 {
                    // Two passes between polls cannot be told apart: start over.
                    last = None;
                    open = false;
                    continue;
                }
                if open {
                    let wall = current.1 - prev.1;
                    let start = now
                        .checked_sub(Duration::from_secs_f64(wall.max(0.0)))
                        .unwrap_or(now);
                    let (_, end_cpu) = cpu.back().context("no CPU sample")?;
                    let before = cpu
                        .iter()
                        .rev()
                        .find(|(t, _)| *t <= start)
                        .or(cpu.front())
                        .map(|(_, s)| s)
                        .context("no CPU sample")?;
                    passes.push(Pass {
                        wall,
                        cpu: before.total_until(end_cpu) as f64 / 1e9,
                        stats: cluster.stats(),
                        sim: sim.stats().await?,
                        repairs: current.2 - prev.2,
                    });
                    if passes.len() == count {
                        return Ok(passes);
                    }
                }
                cluster.server.reset_stats();
                sim.reset_stats().await?;
                open = true;
                last = Some(current);
            }
            Some(_) => {}
        }
        tokio::time::sleep(PASS_POLL).await;
    }
}

/// Turns measured passes into the results row.
pub fn summarize(mode: &str, what: String, volumes: usize, passes: &[Pass]) -> SteadyPass {
    let of = |f: &dyn Fn(&Pass) -> f64| Summary::of(&passes.iter().map(f).collect::<Vec<_>>());
    let lists = |s: &Stats| -> BTreeMap<String, f64> {
        cluster::by_verb(s, |v| v == Verb::List)
            .into_iter()
            .map(|(k, v)| (k, v as f64))
            .collect()
    };
    SteadyPass {
        mode: mode.into(),
        what,
        volumes,
        wall_seconds: of(&|p| p.wall),
        cpu_seconds: of(&|p| p.cpu),
        server_cpu_seconds: Summary::default(),
        api_lists: of(&|p| cluster::count_verb(&p.stats, Verb::List) as f64),
        api_lists_by_resource: median_counts(
            &passes.iter().map(|p| lists(&p.stats)).collect::<Vec<_>>(),
        ),
        api_writes: of(&|p| {
            let (_, events, other) = daemon_writes(&p.stats);
            (events + other) as f64
        }),
        lease_writes: of(&|p| daemon_writes(&p.stats).0 as f64),
        backend_calls: median_counts(
            &passes
                .iter()
                .map(|p| {
                    p.sim
                        .calls
                        .iter()
                        .map(|(k, v)| (k.clone(), *v as f64))
                        .collect()
                })
                .collect::<Vec<_>>(),
        ),
        repairs: of(&|p| p.repairs),
        rss_kib_after: None,
        setup_register_seconds: None,
        setup_backend_call_ms: BTreeMap::new(),
    }
}

/// Registers `env.scale.steady_volumes` vmdks, then measures `env.scale.runs` steady passes.
pub async fn run(env: &Env) -> anyhow::Result<SteadyPass> {
    let n = env.scale.steady_volumes;
    let sim = Sim::start(
        &env.vcsim,
        &SimOptions {
            vmdks: n,
            create_delay_ms: 0,
        },
    )
    .await?;
    let cluster = Cluster::start().await?;
    // A cluster with the CSI driver: volmig publishes a driver object per volume, and every
    // steady pass compares them too.
    cluster.install_driver_crd().await?;
    let limit = Duration::from_secs(120);
    let mut first = Daemon::spawn(
        &env.volmig,
        &env.logs,
        "steady-register",
        &cluster.kubeconfig,
        VCenter::Sim(&sim),
        &[
            ("--max-concurrent-registrations", "32".into()),
            ("--vc-requests-per-second", "10000".into()),
            ("--full-sync-interval", "1h".into()),
        ],
    )?;
    first.wait_ready(POLL, limit).await?;
    first
        .wait_metric("volmig_full_sync_passes_total", "", 1.0, POLL, limit)
        .await?;
    let started = Instant::now();
    cluster
        .create_pvs(&cluster::volumes(&sim.datastore, 1..n + 1))
        .await?;
    first
        .wait_metric(
            "volmig_registrations_total",
            "result=\"created\"",
            n as f64,
            Duration::from_millis(200),
            Duration::from_secs(120) + Duration::from_millis(n as u64 * 100),
        )
        .await?;
    let register_seconds = started.elapsed().as_secs_f64();
    let setup_ms = super::backend_metrics::backend_call_ms(&first).await;
    progress(format!(
        "steady: {n} volumes registered in {register_seconds:.1} s (C = 32, no injected \
         latency); mean backend calls (ms): {setup_ms:?}"
    ));
    first.stop(Duration::from_secs(20)).await;

    let mut daemon = Daemon::spawn(
        &env.volmig,
        &env.logs,
        "steady",
        &cluster.kubeconfig,
        VCenter::Sim(&sim),
        &[
            ("--vc-requests-per-second", "10000".into()),
            ("--full-sync-interval", "2s".into()),
        ],
    )?;
    daemon.wait_ready(POLL, limit).await?;
    // Two passes after the start-up one: leadership's reconcile-all is over by then.
    daemon
        .wait_metric(
            "volmig_full_sync_passes_total",
            "result=\"ok\"",
            2.0,
            POLL,
            limit + Duration::from_millis(n as u64 * 10),
        )
        .await?;
    let passes = measure_passes(
        &mut daemon,
        &cluster,
        &sim,
        env.scale.runs,
        Duration::from_secs(60) + Duration::from_millis(n as u64 * 20 * env.scale.runs as u64),
    )
    .await?;
    for (i, p) in passes.iter().enumerate() {
        progress(format!(
            "steady end-to-end N={n} pass {i}: {:.3} s wall, {:.3} s CPU, {} lists, {} writes",
            p.wall,
            p.cpu,
            cluster::count_verb(&p.stats, Verb::List),
            p.stats.writes
        ));
    }
    let rss = daemon.memory()?.rss_kib as f64;
    let (registered, all) = cluster.registered_count().await?;
    ensure!(
        registered == n && all == n,
        "{registered} of {all} VolumeMigrations Registered, expected {n}"
    );
    daemon.stop(Duration::from_secs(20)).await;
    sim.stop().await;
    let mut row = summarize(
        "end-to-end",
        format!(
            "the real volmig binary (leader) against the simulator and the API test server, \
             {n} PVs, {n} Registered VolumeMigrations, {n} CNS volumes, {n} CSI driver cache \
             objects (the driver's CRD installed, volmig publishing); \
             --full-sync-interval 2s; per pass: wall time from \
             volmig_full_sync_duration_seconds, CPU time of the daemon process over the same \
             window (/proc schedstat of every thread, sampled every 50 ms), requests counted at \
             the API server and the simulator from the end of the previous pass to the end of \
             this one (lease renewals listed apart)"
        ),
        n,
        &passes,
    );
    row.rss_kib_after = Some(rss);
    row.setup_register_seconds = Some(register_seconds);
    row.setup_backend_call_ms = setup_ms;
    Ok(row)
}

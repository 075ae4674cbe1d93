//! Registration throughput and the API cost of a new PV: a fresh simulator (N vmdks,
//! `CnsCreateVolume` delayed by L), a fresh API server and `volmig run` with
//! `--max-concurrent-registrations C`; the clock runs from the first PV create to the
//! moment `volmig_registrations_total{result="created"}` reaches N (each vmdk is new, and
//! the counter moves only after the ID is stored in the status), and every VolumeMigration
//! is then checked to be Registered. After each of volmig's runs, the bare client
//! ([`bare`]) runs at the same point: the limit volmig is compared with.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kube_testserver::Verb;

use super::backend_metrics::{
    VC_REQUESTS_PER_SECOND, backend_call_ms_from, registration_stage_seconds,
};
use super::{CpuClock, Env, POLL, bare, progress, quiet};
use crate::cluster::{self, Cluster, daemon_writes};
use crate::daemon::{Daemon, VCenter};
use crate::goals::paired_ratios;
use crate::results::{ApiCost, BareClient, Load, PairedRun, Summary, Throughput, median_counts};
use crate::sim::{Sim, SimOptions};

/// What one run measured.
struct Run {
    seconds: f64,
    writes: f64,
    writes_without_events: f64,
    events: f64,
    leases: f64,
    writes_by_request: BTreeMap<String, f64>,
    reads_by_request: BTreeMap<String, f64>,
    sim_calls: BTreeMap<String, f64>,
    peak_creates: f64,
    backend_ms: BTreeMap<String, f64>,
    stage_seconds: BTreeMap<String, f64>,
    cpu_ms: BTreeMap<String, f64>,
    load: Load,
    waited: quiet::Waited,
}

/// Runs every (L, C) configuration `runs` times, each run a [`pair`] of volmig and the
/// bare client. The API cost comes from the runs at C = 8 and the smallest L.
pub async fn run(env: &Env) -> anyhow::Result<(Vec<Throughput>, ApiCost)> {
    let mut points = Vec::new();
    let mut cost_runs: Vec<Run> = Vec::new();
    let cost_latency = env.scale.latencies_ms.iter().copied().min().unwrap_or(50);
    for &latency in &env.scale.latencies_ms {
        for &c in &env.scale.concurrencies {
            let n = env.scale.volumes_at(c, latency);
            let mut runs = Vec::new();
            let mut bare_runs = Vec::new();
            let mut pairs = Vec::new();
            for r in 0..env.scale.runs {
                let (run, bare, paired) = pair(env, latency, c, n, r).await?;
                runs.push(run);
                bare_runs.push(bare);
                pairs.push(paired);
            }
            points.push(point(latency, c, n, &runs, &bare_runs, pairs));
            if c == 8 && latency == cost_latency {
                cost_runs = runs;
            }
        }
    }
    let n = env.scale.volumes_at(8, cost_latency);
    let pick = |f: fn(&Run) -> f64| Summary::of(&cost_runs.iter().map(f).collect::<Vec<_>>());
    let cost = ApiCost {
        source: format!("the throughput runs with C = 8, L = {cost_latency} ms"),
        volumes: n,
        writes_per_pv: pick(|r| r.writes),
        writes_per_pv_without_events: pick(|r| r.writes_without_events),
        events_per_pv: pick(|r| r.events),
        writes_by_request: median_counts(
            &cost_runs
                .iter()
                .map(|r| r.writes_by_request.clone())
                .collect::<Vec<_>>(),
        ),
        reads_by_request: median_counts(
            &cost_runs
                .iter()
                .map(|r| r.reads_by_request.clone())
                .collect::<Vec<_>>(),
        ),
        lease_writes_per_run: pick(|r| r.leases),
        run_seconds: pick(|r| r.seconds),
        sim_calls_by_method: median_counts(
            &cost_runs
                .iter()
                .map(|r| r.sim_calls.clone())
                .collect::<Vec<_>>(),
        ),
    };
    Ok((points, cost))
}

/// Run `r` of one point: volmig and the bare client back to back, each on a fresh
/// simulator with the same N vmdks and L (so each starts from identical simulator state),
/// volmig first in even runs and the bare client first in odd ones (so neither is always
/// the one that runs right after the other's clean-up). A pair during which other load
/// took the machine's cores ([`quiet::disturbed`]) is measured again while the quiet
/// budget lasts ([`quiet::Gate::again`]); the last attempt is kept, marked, when none was
/// undisturbed.
async fn pair(
    env: &Env,
    latency: u64,
    c: u16,
    n: usize,
    r: usize,
) -> anyhow::Result<(Run, bare::BareRun, PairedRun)> {
    let volmig_first = r.is_multiple_of(2);
    let mut attempt = 1;
    loop {
        let started = Instant::now();
        let (run, bare) = if volmig_first {
            let run = volmig_run(env, latency, c, n, r).await?;
            (run, bare_run(env, latency, c, n, r).await?)
        } else {
            let bare = bare_run(env, latency, c, n, r).await?;
            (volmig_run(env, latency, c, n, r).await?, bare)
        };
        let disturbed = quiet::disturbed(&run.load) || quiet::disturbed(&bare.load);
        if disturbed && env.quiet.again(attempt) {
            // The waits are spent already; the discarded runs are spent here.
            let waits = Duration::from_secs_f64(run.waited.seconds + bare.waited.seconds);
            env.quiet.spend(started.elapsed().saturating_sub(waits));
            progress(format!(
                "pair L={latency}ms C={c} N={n} run {r}: disturbed by other load (attempt \
                 {attempt}), measuring it again"
            ));
            attempt += 1;
            continue;
        }
        let paired = PairedRun {
            first: if volmig_first {
                "volmig"
            } else {
                "bare client"
            }
            .into(),
            volmig_per_second: n as f64 / run.seconds,
            bare_per_second: n as f64 / bare.seconds,
            ratio: bare.seconds / run.seconds,
            volmig_load: run.load,
            bare_load: bare.load,
            attempts: attempt,
            disturbed,
        };
        progress(format!(
            "pair L={latency}ms C={c} N={n} run {r} ({} first): volmig ÷ bare = {:.3}{}",
            paired.first,
            paired.ratio,
            if disturbed { ", disturbed" } else { "" }
        ));
        return Ok((run, bare, paired));
    }
}

/// One of volmig's runs, with its progress line.
async fn volmig_run(env: &Env, latency: u64, c: u16, n: usize, r: usize) -> anyhow::Result<Run> {
    let run = one(env, latency, c, n, r)
        .await
        .with_context(|| format!("throughput run {r} with L = {latency} ms, C = {c}, N = {n}"))?;
    progress(format!(
        "throughput L={latency}ms C={c} N={n} run {r}: {:.2} s, {:.1} volumes/s, \
         {:.2} API writes/PV; other load {:.2} cores, steal {:.2}; {}",
        run.seconds,
        n as f64 / run.seconds,
        run.writes,
        run.load.other_cores,
        run.load.steal_cores,
        waited_text(run.waited)
    ));
    Ok(run)
}

/// One of the bare client's runs, with its progress line.
async fn bare_run(
    env: &Env,
    latency: u64,
    c: u16,
    n: usize,
    r: usize,
) -> anyhow::Result<bare::BareRun> {
    let bare = tokio::time::timeout(
        bare::limit(n, latency, c),
        bare::one(&env.vcsim, &env.quiet, latency, c, n),
    )
    .await
    .context("timed out")
    .and_then(|r| r)
    .with_context(|| format!("bare-client run {r} with L = {latency} ms, C = {c}, N = {n}"))?;
    progress(format!(
        "bare client L={latency}ms C={c} N={n} run {r}: {:.2} s, {:.1} volumes/s; other \
         load {:.2} cores, steal {:.2}; {}",
        bare.seconds,
        n as f64 / bare.seconds,
        bare.load.other_cores,
        bare.load.steal_cores,
        waited_text(bare.waited)
    ));
    Ok(bare)
}

/// `waited 3 s for a quiet machine` for a progress line.
fn waited_text(w: quiet::Waited) -> String {
    format!(
        "waited {:.0} s for a quiet machine{}",
        w.seconds,
        if w.quiet { "" } else { " (not quiet)" }
    )
}

/// The figures of one point from its runs.
fn point(
    latency: u64,
    c: u16,
    n: usize,
    runs: &[Run],
    bare_runs: &[bare::BareRun],
    pairs: Vec<PairedRun>,
) -> Throughput {
    let ideal = f64::from(c) * 1000.0 / latency as f64;
    let seconds = Summary::of(&runs.iter().map(|r| r.seconds).collect::<Vec<_>>());
    let per_second = seconds.map(|s| n as f64 / s);
    let sim_per_pv: Vec<f64> = runs
        .iter()
        .map(|r| r.sim_calls.values().sum::<f64>())
        .collect();
    let bare = bare_client(bare_runs, n, ideal);
    let ratio_to_bare = paired_ratios(&per_second.runs, &bare.volumes_per_second.runs);
    let slot_seconds = seconds.median * f64::from(c) / n as f64;
    Throughput {
        latency_ms: latency,
        concurrency: c,
        volumes: n,
        ratio_to_ideal: per_second.map(|v| v / ideal),
        volumes_per_second: per_second,
        seconds,
        ideal_per_second: ideal,
        peak_creates_in_flight: Summary::of(
            &runs.iter().map(|r| r.peak_creates).collect::<Vec<_>>(),
        )
        .median,
        api_writes_per_pv: Summary::of(&runs.iter().map(|r| r.writes).collect::<Vec<_>>()),
        sim_calls_per_pv: Summary::of(&sim_per_pv),
        backend_call_ms: median_counts(
            &runs
                .iter()
                .map(|r| r.backend_ms.clone())
                .collect::<Vec<_>>(),
        ),
        bare: Some(bare),
        ratio_to_bare,
        pairs,
        stage_seconds: median_counts(
            &runs
                .iter()
                .map(|r| r.stage_seconds.clone())
                .collect::<Vec<_>>(),
        ),
        slot_seconds_per_registration: slot_seconds,
        cpu_ms_per_registration: median_counts(
            &runs.iter().map(|r| r.cpu_ms.clone()).collect::<Vec<_>>(),
        ),
    }
}

/// The bare client's figures over its runs.
fn bare_client(runs: &[bare::BareRun], n: usize, ideal: f64) -> BareClient {
    let seconds = Summary::of(&runs.iter().map(|r| r.seconds).collect::<Vec<_>>());
    let per_second = seconds.map(|s| n as f64 / s);
    BareClient {
        ratio_to_ideal: per_second.map(|v| v / ideal),
        volumes_per_second: per_second,
        seconds,
        peak_creates_in_flight: Summary::of(
            &runs.iter().map(|r| r.peak_creates).collect::<Vec<_>>(),
        )
        .median,
        sim_calls_per_pv: Summary::of(
            &runs
                .iter()
                .map(|r| r.sim_calls.values().sum::<f64>())
                .collect::<Vec<_>>(),
        ),
        sim_calls_by_method: median_counts(
            &runs.iter().map(|r| r.sim_calls.clone()).collect::<Vec<_>>(),
        ),
        backend_call_ms: median_counts(
            &runs
                .iter()
                .map(|r| r.backend_ms.clone())
                .collect::<Vec<_>>(),
        ),
        cpu_ms_per_registration: median_counts(
            &runs.iter().map(|r| r.cpu_ms.clone()).collect::<Vec<_>>(),
        ),
    }
}

async fn one(env: &Env, latency: u64, c: u16, n: usize, r: usize) -> anyhow::Result<Run> {
    let sim = Sim::start(
        &env.vcsim,
        &SimOptions {
            vmdks: n,
            create_delay_ms: latency,
        },
    )
    .await?;
    let cluster = Cluster::start().await?;
    let mut daemon = Daemon::spawn(
        &env.volmig,
        &env.logs,
        &format!("throughput-l{latency}-c{c}-r{r}"),
        &cluster.kubeconfig,
        VCenter::Sim(&sim),
        &[
            ("--max-concurrent-registrations", c.to_string()),
            (
                "--vc-requests-per-second",
                VC_REQUESTS_PER_SECOND.to_string(),
            ),
            ("--full-sync-interval", "1h".into()),
        ],
    )?;
    let limit = Duration::from_secs(120);
    daemon.wait_ready(POLL, limit).await?;
    daemon
        .wait_metric("volmig_leader", "", 1.0, POLL, limit)
        .await?;
    // The start-up pass (nothing to do yet) must be over before the clock starts.
    daemon
        .wait_metric("volmig_full_sync_passes_total", "", 1.0, POLL, limit)
        .await?;
    // And the machine quiet, this run's own components included.
    let waited = env.quiet.wait().await;
    cluster.server.reset_stats();
    sim.reset_stats().await?;

    let volumes = cluster::volumes(&sim.datastore, 1..n + 1);
    let cpu = CpuClock::start(&[
        ("volmig", Some(daemon.pid)),
        ("simulator", sim.pid()),
        ("benchmark process (API server)", Some(std::process::id())),
    ]);
    let started = Instant::now();
    cluster.create_pvs(&volumes).await?;
    // Generous: the ideal time, ten times over, plus a minute.
    let expected = Duration::from_millis(n as u64 * latency / u64::from(c)) * 10;
    let finished =
        wait_until_registered(&cluster, &mut daemon, n, expected + Duration::from_secs(60)).await?;
    let seconds = finished.saturating_duration_since(started).as_secs_f64();
    let window = cpu.finish(n as f64);
    // Events are published after the counter moves: wait until the writes stop.
    let mut last = cluster.stats().writes;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = cluster.stats().writes;
        if now == last {
            break;
        }
        last = now;
    }
    let stats = cluster.stats();
    let sim_stats = sim.stats().await?;
    // Checked after the counters were read, so these reads are not counted.
    let created = daemon
        .metric("volmig_registrations_total", "result=\"created\"")
        .await
        .unwrap_or(0.0);
    let metrics = daemon
        .get("/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    let backend_ms = backend_call_ms_from(&metrics);
    let stage_seconds = registration_stage_seconds(&metrics);
    let (registered, all) = cluster.registered_count().await?;
    ensure!(
        created as usize == n && registered == n && all == n,
        "expected {n} created and Registered, got {created} created, {registered} of {all} \
         Registered"
    );
    daemon.stop(Duration::from_secs(20)).await;
    sim.stop().await;

    let per_pv = n as f64;
    let (leases, events, other) = daemon_writes(&stats);
    let is_daemon_write = |key: &str| key != "create persistentvolumes" && !key.contains("leases");
    let writes_by_request = cluster::by_verb(&stats, Verb::is_write)
        .into_iter()
        .filter(|(k, _)| is_daemon_write(k))
        .map(|(k, v)| (k, v as f64 / per_pv))
        .collect();
    let reads_by_request = cluster::by_verb(&stats, |v| !v.is_write())
        .into_iter()
        .map(|(k, v)| (k, v as f64 / per_pv))
        .collect();
    Ok(Run {
        seconds,
        writes: (other + events) as f64 / per_pv,
        writes_without_events: other as f64 / per_pv,
        events: events as f64 / per_pv,
        leases: leases as f64,
        writes_by_request,
        reads_by_request,
        sim_calls: sim_stats
            .calls
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / per_pv))
            .collect(),
        backend_ms,
        stage_seconds,
        cpu_ms: window.ms_per,
        load: window.load,
        waited,
        peak_creates: sim_stats
            .max_in_flight
            .get("CnsCreateVolume")
            .copied()
            .unwrap_or(0) as f64,
    })
}

/// Waits until `n` VolumeMigrations are Registered, looking at the in-process API server's
/// store: asking volmig (its `/metrics`, fifty times a second) would load the process being
/// measured, which the bare client never pays for. Each look reads every object, on the
/// cores the system measured runs on (the store's lock only while it takes them), so the
/// looks are spaced by [`next_look`]: every [`POLL`] near the end, rarer before.
///
/// Returns when the work ended: the store's last VolumeMigration write as of the look that
/// counted `n` — the write that registered the last one, since volmig writes nothing more
/// to a Registered VolumeMigration here (a later write would only stop the clock later,
/// against volmig) — so the clock does not also run over the gap between looks, which
/// the bare client, timing its own calls, never pays for.
async fn wait_until_registered(
    cluster: &Cluster,
    daemon: &mut Daemon,
    n: usize,
    limit: Duration,
) -> anyhow::Result<Instant> {
    let started = Instant::now();
    let deadline = started + limit;
    loop {
        let looked_at = Instant::now();
        let tally = cluster
            .server
            .count_where("volmig.io", "volumemigrations", |vm| {
                vm.pointer("/status/phase").and_then(|p| p.as_str()) == Some("Registered")
            });
        if tally.matching >= n {
            return Ok(tally.last_change.unwrap_or(looked_at));
        }
        daemon.check_alive()?;
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} of {n} VolumeMigrations Registered after {limit:?}",
            tally.matching
        );
        tokio::time::sleep(next_look(tally.matching, n, started.elapsed())).await;
    }
}

/// How long to wait before the next look, with `done` of `n` registered after `elapsed`:
/// half the time the rest would take at the average rate so far, between [`POLL`] and
/// [`MAX_LOOK`]. The end is seen at most one [`POLL`] late unless the rate more than
/// doubles at the very end; the clock stops at the last write all the same, but the
/// timed CPU window closes at the look.
pub fn next_look(done: usize, n: usize, elapsed: Duration) -> Duration {
    if done == 0 || done >= n {
        return POLL;
    }
    let rest = elapsed.mul_f64((n - done) as f64 / done as f64);
    (rest / 2).clamp(POLL, MAX_LOOK)
}

/// The longest wait between two looks at the store.
const MAX_LOOK: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_are_rare_far_from_the_end_and_every_poll_near_it() {
        // 100 of 1000 after 1 s: 9 s to go, look again at the longest wait.
        assert_eq!(next_look(100, 1000, Duration::from_secs(1)), MAX_LOOK);
        // 900 of 1000 after 1 s: ~0.11 s to go, half of it.
        let wait = next_look(900, 1000, Duration::from_secs(1));
        assert!(wait > POLL && wait < Duration::from_millis(60), "{wait:?}");
        // 995 of 1000: every POLL.
        assert_eq!(next_look(995, 1000, Duration::from_secs(2)), POLL);
        // Nothing yet (no rate known) or all done: every POLL.
        assert_eq!(next_look(0, 1000, Duration::from_secs(1)), POLL);
        assert_eq!(next_look(1000, 1000, Duration::from_secs(1)), POLL);
    }
}

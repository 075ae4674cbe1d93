//! `volmig-bench`: measures the real `volmig` binary against the vCenter simulator and the
//! Kubernetes API test server (registration throughput, API cost per PV, steady-state full
//! sync, memory, start-up) and writes `results.json`, `report.md`, `throughput.png` and
//! `memory.png`. `make bench` runs it; see `bench/README.md`.

mod charts;
mod cluster;
mod daemon;
mod goals;
mod procfs;
mod report;
mod results;
mod scale;
mod scenarios;
mod sim;
mod sizing;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};

use crate::results::{ApiCost, Results};
use crate::scale::{Scale, ScaleName};
use crate::scenarios::{Env, progress};

/// Benchmarks of volmig against its performance goals (docs/performance.md, "Goals").
#[derive(Debug, Parser)]
#[command(name = "volmig-bench")]
struct Args {
    /// Sizes: `smoke` (tiny, one run), `default`, or `large` (10,000 vmdks of throughput).
    #[arg(long, env = "BENCH_SCALE", value_enum, default_value_t = ScaleName::Default)]
    scale: ScaleName,
    /// Where results.json, report.md and the PNG charts go.
    #[arg(long, default_value_os_t = workspace().join("bench"))]
    out: PathBuf,
    /// Where the daemons' logs go (emptied first).
    #[arg(long, default_value_os_t = workspace().join("target/bench-logs"))]
    logs: PathBuf,
    /// The volmig binary to measure (a release build).
    #[arg(long, default_value_os_t = workspace().join("target/release/volmig"))]
    volmig: PathBuf,
    /// The vCenter simulator harness (`make vcsim`).
    #[arg(long, default_value_os_t = workspace().join("target/vcsim/vcsim-harness"))]
    vcsim: PathBuf,
    /// Repetitions of every figure (default: 3, or 1 at `smoke`).
    #[arg(long)]
    runs: Option<usize>,
    /// Override the numbers of existing volumes for memory and start-up (comma-separated,
    /// 0 = idle baseline).
    #[arg(long, value_delimiter = ',')]
    tracked_sizes: Vec<usize>,
    /// Override the simulated `CnsCreateVolume` latencies of the throughput runs, in ms
    /// (comma-separated; e.g. to profile one point).
    #[arg(long, value_delimiter = ',')]
    latencies_ms: Vec<u64>,
    /// Override the concurrencies C of the throughput runs (comma-separated).
    #[arg(long, value_delimiter = ',')]
    concurrencies: Vec<u16>,
    /// Seconds the throughput runs may spend in all waiting for a quiet machine before
    /// each clock and measuring pairs disturbed by other load again (0: neither; default:
    /// 600, or 0 at `smoke`).
    #[arg(long)]
    quiet_budget_seconds: Option<u64>,
    /// Keep each memory/start-up daemon running this many seconds after it is idle (to let
    /// a profiler wrapped around `--volmig` see the whole run).
    #[arg(long, default_value_t = 0)]
    hold_seconds: u64,
    /// Run only these scenarios (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Scenario>,
}

/// The scenario groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Registration throughput and API cost per PV.
    Throughput,
    /// Steady-state full sync end to end.
    Steady,
    /// Memory, start-up and the in-process steady pass.
    Tracked,
}

/// The workspace root (the parent of this crate).
fn workspace() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VOLMIG_BENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("volmig-bench")
        .enable_all()
        .build()
        .context("building the runtime")?;
    runtime.block_on(run(args))
}

/// How the throughput runs dealt with other load on the machine.
fn quiet_note(scale: &Scale) -> String {
    use scenarios::quiet::{ATTEMPTS, DISTURBED_CORES, QUIET_CORES, WAIT};
    let why = "Other load slows volmig's run (three busy processes) more than the bare \
               client's (limited by the simulator's serial CNS lock), so a disturbed pair \
               understates volmig ÷ bare.";
    if scale.quiet_budget.is_zero() {
        return format!(
            "The throughput runs did not wait for a quiet machine nor measure disturbed \
             pairs again (budget 0 s: scale `{}` or `--quiet-budget-seconds 0`); the other \
             load during each timed window is recorded all the same, and pairs with more \
             than {DISTURBED_CORES} cores of it are marked \"disturbed\". {why}",
            scale.name
        );
    }
    format!(
        "Every throughput clock starts once the whole machine kept less than {QUIET_CORES} \
         cores busy over one second (waiting at most {} s). A pair of runs during which \
         other processes or the hypervisor took more than {DISTURBED_CORES} cores (from \
         `/proc/stat`, minus the measured processes' own CPU) is measured again, up to \
         {ATTEMPTS} attempts; waiting and measuring again share a budget of {} s, after \
         which the runs go on regardless and such pairs are kept, marked \"disturbed\". \
         {why}",
        WAIT.as_secs(),
        scale.quiet_budget.as_secs()
    )
}

fn notes(scale: &Scale, font: Option<&str>) -> Vec<String> {
    let mut notes = vec![
        format!(
            "Components: the `volmig` binary as a child process; the govmomi vCenter \
             simulator (`tests/support/vcsim`) as a child process over HTTPS; the Kubernetes \
             API test server (`tests/support/apiserver`) inside the benchmark process on its \
             own 2-thread runtime. All of them share the machine's {} cores, so every \
             figure includes the servers' CPU contention.",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        "Throughput and steady-state runs pass `--vc-requests-per-second 10000`: the default \
         limit (50 backend calls/s, each registration making 4 gated calls below vCenter \
         8.0.3) would cap registration at 12.5 volumes/s, below the C ÷ L ideal for C ≥ 8 \
         (see \"Sizing the vCenter request rate\")."
            .to_string(),
        "The bare client runs in the benchmark process, paired with each of \
         volmig's throughput runs back to back (volmig first in even runs, the bare client \
         first in odd ones), each on a fresh simulator started the same way: C workers over \
         volmig's own CNS backend (`volmig::backend::cns`, metered), each backend call \
         taking a slot of volmig's own `CallGate` with C slots and the same 10000 requests \
         per second as the daemon, so that the comparison isolates what volmig adds \
         (Kubernetes, status, keyed lock) to the vCenter calls. The goal \"≥ 0.9 × bare \
         client\" is judged on the median of the per-run ratios volmig ÷ bare client, not on \
         the ratio of the two medians."
            .to_string(),
        quiet_note(scale),
        "Lease writes (leader election renewing its Lease) are counted apart and excluded \
         from the per-PV and per-pass write counts; Events are counted as writes."
            .to_string(),
        "The in-process pass uses a benchmark-side in-memory backend that holds the CNS \
         volumes with UUID-shaped IDs and lists them in pages of 500 like volmig's \
         `InMemoryBackend`; that one fills in quadratic time (each create scans every \
         volume to count the path's registrations) and hands out short `mem-N` IDs."
            .to_string(),
    ];
    if scale.serial_volumes != scale.throughput_volumes {
        notes.push(format!(
            "The serial baseline (C = 1) registers {} vmdks per run instead of {}, to keep \
             `make bench` near 20 minutes on 2 cores; one-at-a-time throughput does not \
             depend on N.",
            scale.serial_volumes, scale.throughput_volumes
        ));
    }
    if scale.min_run_seconds > 0 {
        notes.push(format!(
            "A throughput run with C > 1 registers at least {} vmdks, and more where that \
             would take less than {} s at the ideal rate C ÷ L (the vmdks column says how \
             many): the fixed costs of a run (the first PVs reaching the registrar, the last \
             status write) and one disturbed second weigh on a 2 s \
             run as much as the 10 % margin of its goal.",
            scale.throughput_volumes, scale.min_run_seconds
        ));
    }
    if scale.runs < 3 {
        notes.push(format!(
            "Scale `{}`: {} run(s) per figure, not 3 — a check that the harness works, not a \
             measurement.",
            scale.name, scale.runs
        ));
    }
    if font.is_none() {
        notes.push(
            "No TrueType font was found (Debian `fonts-dejavu-core`): the charts have no text."
                .into(),
        );
    }
    notes
}

async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let date = jiff::Timestamp::now()
        .round(jiff::Unit::Second)?
        .to_string();
    let mut scale = Scale::of(args.scale);
    if let Some(runs) = args.runs {
        scale.runs = runs.max(1);
    }
    if !args.tracked_sizes.is_empty() {
        scale.tracked_sizes = args.tracked_sizes.clone();
    }
    if !args.latencies_ms.is_empty() {
        scale.latencies_ms = args.latencies_ms.clone();
    }
    if !args.concurrencies.is_empty() {
        scale.concurrencies = args.concurrencies.clone();
    }
    if let Some(seconds) = args.quiet_budget_seconds {
        scale.quiet_budget = std::time::Duration::from_secs(seconds);
    }
    for (what, path, hint) in [
        ("volmig", &args.volmig, "cargo build --release --bin volmig"),
        ("simulator", &args.vcsim, "make vcsim"),
    ] {
        if !path.is_file() {
            bail!(
                "{what} binary {} not found; build it with `{hint}` (make bench does)",
                path.display()
            );
        }
    }
    if args.logs.exists() {
        std::fs::remove_dir_all(&args.logs)
            .with_context(|| format!("emptying {}", args.logs.display()))?;
    }
    std::fs::create_dir_all(&args.logs)
        .with_context(|| format!("creating {}", args.logs.display()))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let font = charts::font();
    let env = Env {
        volmig: args.volmig.clone(),
        vcsim: args.vcsim.clone(),
        logs: args.logs.clone(),
        scale: scale.clone(),
        hold: std::time::Duration::from_secs(args.hold_seconds),
        quiet: scenarios::quiet::Gate::new(scale.quiet_budget),
    };
    let wanted = |s: Scenario| args.only.is_empty() || args.only.contains(&s);
    let mut results = Results {
        date,
        scale: scale.name.into(),
        runs: scale.runs,
        machine: procfs::Machine::read(),
        total_seconds: 0.0,
        throughput: Vec::new(),
        api_cost: ApiCost::default(),
        steady: Vec::new(),
        tracked: Vec::new(),
        goals: Vec::new(),
        notes: notes(&scale, font),
    };
    progress(format!(
        "scale {}, {} run(s) per figure, logs in {}",
        scale.name,
        scale.runs,
        args.logs.display()
    ));
    let mut failures = Vec::new();
    if wanted(Scenario::Throughput) {
        match scenarios::throughput::run(&env).await {
            Ok((points, cost)) => {
                results.throughput = points;
                results.api_cost = cost;
            }
            Err(e) => failures.push(format!("throughput: {e:#}")),
        }
        if !scale.quiet_budget.is_zero() && env.quiet.left().is_zero() {
            results.notes.push(format!(
                "The machine did not stay quiet: the throughput runs spent their {} s budget \
                 for waiting and measuring again, and the runs after that went on regardless \
                 (see the other load run by run).",
                scale.quiet_budget.as_secs()
            ));
        }
    }
    if wanted(Scenario::Steady) {
        match scenarios::steady::run(&env).await {
            Ok(row) => results.steady.push(row),
            Err(e) => failures.push(format!("steady state: {e:#}")),
        }
    }
    if wanted(Scenario::Tracked) {
        match scenarios::tracked::run(&env).await {
            Ok((rows, filled)) => {
                for t in rows.iter().filter(|t| t.api_writes.max > 0.0) {
                    results.notes.push(format!(
                        "Memory and start-up with N = {}: volmig wrote although every object \
                         was in sync ({} writes in the worst of {} runs: {}). It reconciles \
                         VolumeMigrations before its PV index holds every PV, writes the \
                         partial PV list to status.persistentVolumes and then the full one \
                         again.",
                        t.volumes,
                        t.api_writes.max,
                        t.api_writes.runs.len(),
                        t.api_writes_by_request
                            .iter()
                            .map(|(k, v)| format!("{k}: {v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                results.tracked = rows;
                match scenarios::in_process::run(&filled.cluster, &filled.volumes, scale.runs).await
                {
                    Ok(row) => results.steady.push(row),
                    Err(e) => failures.push(format!("in-process steady state: {e:#}")),
                }
            }
            Err(e) => failures.push(format!("memory and start-up: {e:#}")),
        }
    }
    results.total_seconds = started.elapsed().as_secs_f64();
    results.goals = goals::check(&results);
    let beyond = goals::beyond_the_machine(&results);
    if !beyond.is_empty() {
        results.notes.push(format!(
            "Not judged against C ÷ L, because the bare client (the machine's limit) does not \
             reach 0.9 × C ÷ L there either: {}.",
            beyond.join("; ")
        ));
    }
    for f in &failures {
        results.notes.push(format!("FAILED: {f}"));
    }
    write_outputs(&results, &args.out)?;
    progress(format!(
        "done in {:.0} s: {} goals met of {}; results in {}",
        results.total_seconds,
        results.goals.iter().filter(|g| g.met).count(),
        results.goals.len(),
        args.out.display()
    ));
    if !failures.is_empty() {
        bail!(
            "{} scenario(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}

fn write_outputs(results: &Results, out: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(results).context("encoding results")?;
    let file = out.join("results.json");
    std::fs::write(&file, json + "\n").with_context(|| format!("writing {}", file.display()))?;
    let file = out.join("report.md");
    std::fs::write(&file, report::render(results))
        .with_context(|| format!("writing {}", file.display()))?;
    charts::throughput(results, &out.join("throughput.png"))?;
    charts::memory(results, &out.join("memory.png"))?;
    Ok(())
}

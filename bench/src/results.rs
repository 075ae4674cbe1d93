//! What `bench/results.json` holds: every figure with its parameters, as median, min and
//! max of its runs (every run's value is kept too).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::procfs::Machine;

/// Median, min and max of a figure over its runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
    /// Every run, in the order measured.
    pub runs: Vec<f64>,
}

impl Summary {
    /// The summary of `values` (all zero when empty).
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Summary {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            runs: values.to_vec(),
        }
    }

    /// The summary of `f` applied to every run.
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Summary {
        Summary::of(&self.runs.iter().map(|v| f(*v)).collect::<Vec<_>>())
    }
}

/// Median of per-run maps of counters, key by key.
pub fn median_counts(runs: &[BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let mut keys: Vec<&String> = runs.iter().flat_map(|r| r.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let values: Vec<f64> = runs
                .iter()
                .map(|r| r.get(k).copied().unwrap_or(0.0))
                .collect();
            (k.clone(), Summary::of(&values).median)
        })
        .collect()
}

/// One registration-throughput configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// Injected `CnsCreateVolume` latency L in ms.
    pub latency_ms: u64,
    /// `--max-concurrent-registrations` C.
    pub concurrency: u16,
    /// vmdks (one PV each) registered per run.
    pub volumes: usize,
    /// Seconds from the first PV create to the last registration.
    pub seconds: Summary,
    /// Registered volumes per second.
    pub volumes_per_second: Summary,
    /// The ideal C ÷ L in volumes per second.
    pub ideal_per_second: f64,
    /// Throughput ÷ ideal.
    pub ratio_to_ideal: Summary,
    /// Most `CnsCreateVolume` calls in flight at once at the simulator (median).
    pub peak_creates_in_flight: f64,
    /// API writes per registered PV by volmig, leases excluded (events included).
    pub api_writes_per_pv: Summary,
    /// Simulator SOAP calls per registered PV.
    pub sim_calls_per_pv: Summary,
    /// Mean duration of volmig's backend calls by operation, ms, as volmig measured them
    /// (`volmig_backend_request_duration_seconds`; median of runs). Each holds one of the
    /// C slots.
    pub backend_call_ms: BTreeMap<String, f64>,
    /// The bare client at the same point (same simulator, N, L and C, no Kubernetes): the
    /// limit of this machine. `None` when it was not measured.
    pub bare: Option<BareClient>,
    /// volmig's volumes/s ÷ the bare client's, run by run (run i of volmig against run i
    /// of the bare client, measured back to back); the goal is judged on its median.
    /// `None` when the bare client was not measured.
    pub ratio_to_bare: Option<Summary>,
    /// Every run of volmig beside the bare client's run it is paired with, in the order
    /// measured.
    pub pairs: Vec<PairedRun>,
    /// Mean seconds per registration inside volmig's registrar by stage
    /// (`volmig_registration_stage_seconds`: `path_lock_wait`, `backend_slot_wait`,
    /// `vcenter_call`, `status_read`, `status_write_ahead`, `status_write_result`, `other`;
    /// median of runs). They add up to the mean time a registration spent in the registrar.
    pub stage_seconds: BTreeMap<String, f64>,
    /// The run's wall time per registration × C (median of runs): the slot time each
    /// registration had; compare with the sum of `stage_seconds`.
    pub slot_seconds_per_registration: f64,
    /// CPU ms per registration during the timed window by process (`volmig`, the
    /// simulator, the benchmark process with the API test server; median of runs).
    pub cpu_ms_per_registration: BTreeMap<String, f64>,
}

/// The bare client at one throughput point: volmig's CNS backend making only the vCenter
/// calls of one registration of a new vmdk, C workers, no Kubernetes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BareClient {
    /// Seconds from the first call to the end of the last registration's calls.
    pub seconds: Summary,
    /// Registered volumes per second.
    pub volumes_per_second: Summary,
    /// Throughput ÷ the ideal C ÷ L.
    pub ratio_to_ideal: Summary,
    /// Most `CnsCreateVolume` calls in flight at once at the simulator (median).
    pub peak_creates_in_flight: f64,
    /// Simulator SOAP calls per vmdk.
    pub sim_calls_per_pv: Summary,
    /// Simulator SOAP calls per vmdk by method (median of runs).
    pub sim_calls_by_method: BTreeMap<String, f64>,
    /// Mean duration of the client's backend calls by operation, ms (median of runs).
    pub backend_call_ms: BTreeMap<String, f64>,
    /// CPU ms per vmdk during the timed window by process (the simulator, the benchmark
    /// process with the client; median of runs).
    pub cpu_ms_per_registration: BTreeMap<String, f64>,
}

/// One run of a throughput point: volmig and the bare client back to back, each on a fresh
/// simulator started the same way, in alternating order from run to run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PairedRun {
    /// Which of the two ran first: `volmig` or `bare client`.
    pub first: String,
    /// volmig's volumes/s.
    pub volmig_per_second: f64,
    /// The bare client's volumes/s.
    pub bare_per_second: f64,
    /// volmig ÷ the bare client in this run.
    pub ratio: f64,
    /// The rest of the machine during volmig's timed window.
    pub volmig_load: Load,
    /// The rest of the machine during the bare client's timed window.
    pub bare_load: Load,
    /// Attempts it took: a pair disturbed by other load is measured again.
    pub attempts: usize,
    /// Whether other load took more than a quarter of a core during either timed window
    /// of the pair kept (every attempt was disturbed).
    pub disturbed: bool,
}

/// What the rest of the machine did during a timed window: the benchmark shares its cores
/// with whatever else runs there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Load {
    /// Mean cores busy with processes other than the measured ones (another build, kernel
    /// threads), from `/proc/stat` minus the measured processes' own CPU time.
    pub other_cores: f64,
    /// Mean cores the hypervisor gave to someone else (`steal` in `/proc/stat`).
    pub steal_cores: f64,
}

/// API and vCenter cost of one new PV.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApiCost {
    /// Which runs the figures come from.
    pub source: String,
    /// PVs per run.
    pub volumes: usize,
    /// volmig's writes per PV (leases excluded, events included).
    pub writes_per_pv: Summary,
    /// volmig's writes per PV without events and leases.
    pub writes_per_pv_without_events: Summary,
    /// Event creates per PV.
    pub events_per_pv: Summary,
    /// volmig's writes per PV by `verb resource[/subresource]` (median of runs).
    pub writes_by_request: BTreeMap<String, f64>,
    /// volmig's reads per PV by `verb resource` (median of runs).
    pub reads_by_request: BTreeMap<String, f64>,
    /// Lease writes during a whole run (leader election, not per PV; median).
    pub lease_writes_per_run: Summary,
    /// Run length in seconds (to read the lease writes against).
    pub run_seconds: Summary,
    /// Simulator SOAP calls per PV by method (median of runs).
    pub sim_calls_by_method: BTreeMap<String, f64>,
}

/// One steady-state full-sync measurement (nothing to repair).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SteadyPass {
    /// `end-to-end` (the real binary and the simulator) or `in-process`.
    pub mode: String,
    /// What exactly was measured.
    pub what: String,
    /// Volumes (PVs = VolumeMigrations = CNS volumes).
    pub volumes: usize,
    /// Wall time of one pass, seconds.
    pub wall_seconds: Summary,
    /// CPU time of one pass (volmig's side only), seconds.
    pub cpu_seconds: Summary,
    /// CPU time the API test server spent answering the pass (in-process mode only).
    pub server_cpu_seconds: Summary,
    /// API list requests per pass.
    pub api_lists: Summary,
    /// API list requests per pass by resource (median).
    pub api_lists_by_resource: BTreeMap<String, f64>,
    /// API writes per pass, leases excluded.
    pub api_writes: Summary,
    /// Lease writes seen in the same windows.
    pub lease_writes: Summary,
    /// vCenter / backend calls per pass by method (median).
    pub backend_calls: BTreeMap<String, f64>,
    /// Repairs the passes made (must be 0).
    pub repairs: Summary,
    /// Resident memory of the daemon after the passes (end-to-end only), KiB.
    pub rss_kib_after: Option<f64>,
    /// End-to-end only: seconds the first daemon took to register the N volumes
    /// (C = 32, no injected latency), and its mean backend call durations then, ms.
    pub setup_register_seconds: Option<f64>,
    /// Mean backend call duration by operation during that registration, ms.
    pub setup_backend_call_ms: BTreeMap<String, f64>,
}

/// Memory and start-up of the daemon over a given number of existing volumes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tracked {
    /// PVs (each with its Registered VolumeMigration).
    pub volumes: usize,
    /// Seconds from process start to `/readyz` 200.
    pub ready_seconds: Summary,
    /// Resident memory once idle, KiB.
    pub rss_kib: Summary,
    /// Anonymous resident memory once idle, KiB.
    pub rss_anon_kib: Summary,
    /// Peak resident memory, KiB.
    pub peak_kib: Summary,
    /// (RSS − median idle RSS) ÷ volumes, bytes (0 for the idle row).
    pub bytes_per_volume: Summary,
    /// Seconds from ready until the daemon was idle.
    pub settle_seconds: Summary,
    /// API writes volmig made during the run (leases excluded; expected 0).
    pub api_writes: Summary,
    /// Those writes by `verb resource[/subresource]`, summed over the runs.
    pub api_writes_by_request: BTreeMap<String, f64>,
}

/// One performance goal (docs/performance.md, "Goals") and whether it was met.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    /// What is measured.
    pub figure: String,
    /// The goal, as text.
    pub goal: String,
    /// volmig's value, as text.
    pub value: String,
    /// Whether the goal was met.
    pub met: bool,
    /// How far off, when missed.
    pub miss: Option<String>,
}

/// Everything one `volmig-bench` run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// When the run started (UTC, RFC 3339).
    pub date: String,
    /// `smoke`, `default` or `large`.
    pub scale: String,
    /// Repetitions per figure.
    pub runs: usize,
    /// The machine.
    pub machine: Machine,
    /// Wall time of the whole benchmark, seconds.
    pub total_seconds: f64,
    /// Registration throughput per (L, C).
    pub throughput: Vec<Throughput>,
    /// Cost per new PV.
    pub api_cost: ApiCost,
    /// Steady-state passes.
    pub steady: Vec<SteadyPass>,
    /// Memory and start-up by number of volumes (first row: idle).
    pub tracked: Vec<Tracked>,
    /// Goals met or missed.
    pub goals: Vec<Goal>,
    /// Deviations from the parameters and how things were measured.
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_median_min_max() {
        let s = Summary::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(s.runs, vec![3.0, 1.0, 2.0]);
        let even = Summary::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!(even.median, 2.5);
        assert_eq!(Summary::of(&[]).median, 0.0);
        assert_eq!(s.map(|v| v * 2.0).median, 4.0);
        let runs = vec![
            BTreeMap::from([("a".to_string(), 1.0)]),
            BTreeMap::from([("a".to_string(), 3.0), ("b".to_string(), 2.0)]),
            BTreeMap::from([("a".to_string(), 2.0)]),
        ];
        let m = median_counts(&runs);
        assert_eq!(m["a"], 2.0);
        assert_eq!(m["b"], 0.0);
    }
}

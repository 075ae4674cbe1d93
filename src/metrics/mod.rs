//! volmig's Prometheus metrics (prefix `volmig_`), built on `prometheus-client`.
//!
//! [`Metrics`] is a cheap handle (an `Arc` inside): clone it into every task that records.
//! Recording never blocks for long and never fails. [`Metrics::encode`] renders the
//! OpenMetrics text exposition, [`Metrics::encode_prometheus_text`] the Prometheus text
//! format 0.0.4; [`crate::http`] serves either on `/metrics`.
//!
//! Besides the `volmig_` families, the registry carries the standard `process_*` metrics
//! (CPU, memory, file descriptors, start time), read from `/proc/self` at scrape time on
//! Linux ([`process`]).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::volume_migration::Phase;

mod families;
mod labels;
mod process;

use labels::{
    ActionLabels, BackendLabels, BuildLabels, DryRunLabels, ModeLabels, OperationLabels, PHASES,
    PassLabels, PhaseLabels, PhaseValue, REGISTRAR_MODES, ReasonLabels, RegistrationLabels,
    StageLabels, pass_labels,
};
pub use labels::{
    BackendResult, ReconcileFailure, RegistrationResult, RegistrationStage, SyncAction,
};

/// Registration latency buckets in seconds: 10 ms to 120 s.
const REGISTRATION_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Full-sync pass buckets in seconds: 100 ms to 30 min.
const FULL_SYNC_BUCKETS: [f64; 12] = [
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// Backend request buckets in seconds: 5 ms to 60 s.
const BACKEND_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Registration stage buckets in seconds: 0.5 ms to 120 s.
const STAGE_BUCKETS: [f64; 17] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0,
];

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

fn backend_histogram() -> Histogram {
    Histogram::new(BACKEND_BUCKETS)
}

fn stage_histogram() -> Histogram {
    Histogram::new(STAGE_BUCKETS)
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    registrations: Family<RegistrationLabels, Counter>,
    registration_duration: Histogram,
    registration_stages: HistogramFamily<StageLabels>,
    volumes: Family<PhaseLabels, Gauge>,
    full_sync_duration: Histogram,
    full_sync_actions: Family<ActionLabels, Counter>,
    full_sync_passes: Family<PassLabels, Counter>,
    duplicate_volumes: Gauge,
    orphan_volumes: Gauge,
    backend_requests: Family<BackendLabels, Counter>,
    backend_duration: HistogramFamily<OperationLabels>,
    leader: Gauge,
    registrar_mode: Family<ModeLabels, Gauge>,
    pvs_tracked: Gauge,
    build_info: Family<BuildLabels, Gauge>,
    full_sync_last_success: Gauge<f64, AtomicU64>,
    driver_objects_missing: Gauge,
    reconcile_failures: Family<ReasonLabels, Counter>,
    name_collisions: Counter,
    dry_run_actions: Family<DryRunLabels, Gauge>,
}

/// All of volmig's metrics behind one cloneable handle.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered. Closed label sets (registration
    /// results, phases, sync actions, pass results) start at zero so that rates and
    /// absent-series alerts work from the first scrape.
    pub fn new() -> Self {
        let mut inner = Inner {
            registry: Registry::default(),
            registrations: Family::default(),
            registration_duration: Histogram::new(REGISTRATION_BUCKETS),
            registration_stages: Family::new_with_constructor(stage_histogram),
            volumes: Family::default(),
            full_sync_duration: Histogram::new(FULL_SYNC_BUCKETS),
            full_sync_actions: Family::default(),
            full_sync_passes: Family::default(),
            duplicate_volumes: Gauge::default(),
            orphan_volumes: Gauge::default(),
            backend_requests: Family::default(),
            backend_duration: Family::new_with_constructor(backend_histogram),
            leader: Gauge::default(),
            registrar_mode: Family::default(),
            pvs_tracked: Gauge::default(),
            build_info: Family::default(),
            full_sync_last_success: Gauge::default(),
            driver_objects_missing: Gauge::default(),
            name_collisions: Counter::default(),
            dry_run_actions: Family::default(),
            reconcile_failures: Family::default(),
        };
        inner.build_info.get_or_create(&BuildLabels::CURRENT).set(1);
        for mode in REGISTRAR_MODES {
            let _ = inner
                .registrar_mode
                .get_or_create_owned(&ModeLabels { mode });
        }
        // Create the series now (at zero); the handles are not needed.
        for &result in RegistrationResult::ALL {
            let _ = inner
                .registrations
                .get_or_create_owned(&RegistrationLabels { result });
        }
        for &stage in RegistrationStage::ALL {
            let _ = inner
                .registration_stages
                .get_or_create_owned(&StageLabels { stage });
        }
        for phase in PHASES {
            let _ = inner.volumes.get_or_create_owned(&PhaseLabels {
                phase: PhaseValue(phase),
            });
        }
        for &action in SyncAction::ALL {
            let _ = inner
                .full_sync_actions
                .get_or_create_owned(&ActionLabels { action });
        }
        for ok in [true, false] {
            let _ = inner.full_sync_passes.get_or_create_owned(&pass_labels(ok));
        }
        for reason in ReconcileFailure::ALL {
            let _ = inner.reconcile_failures.get_or_create_owned(&ReasonLabels {
                reason: reason.as_str().to_owned(),
            });
        }
        families::register_all(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Records one finished registration and its latency (from the first attempt to the
    /// final outcome).
    pub fn registration(&self, result: RegistrationResult, latency: Duration) {
        self.inner
            .registrations
            .get_or_create(&RegistrationLabels { result })
            .inc();
        self.inner
            .registration_duration
            .observe(latency.as_secs_f64());
    }

    /// Records where the time of one registration inside the registrar went: one
    /// observation per stage (zero included), so that every stage's count is the number of
    /// registrations and the means add up to the mean time in the registrar.
    pub fn registration_stages(&self, seconds: &[(RegistrationStage, Duration)]) {
        for &stage in RegistrationStage::ALL {
            let total: Duration = seconds
                .iter()
                .filter(|(s, _)| *s == stage)
                .map(|(_, d)| *d)
                .sum();
            self.inner
                .registration_stages
                .get_or_create(&StageLabels { stage })
                .observe(total.as_secs_f64());
        }
    }

    /// Sets `volmig_volumes` from a complete snapshot; phases absent from `counts` are
    /// set to zero.
    pub fn set_volumes_by_phase(&self, counts: &[(Phase, i64)]) {
        for phase in PHASES {
            let n = counts
                .iter()
                .filter(|(p, _)| *p == phase)
                .map(|(_, n)| *n)
                .sum::<i64>();
            self.inner
                .volumes
                .get_or_create(&PhaseLabels {
                    phase: PhaseValue(phase),
                })
                .set(n);
        }
    }

    /// Records one full-sync pass: its duration and whether it completed. A completed pass
    /// also sets `volmig_full_sync_last_success_timestamp_seconds` to now.
    pub fn full_sync_pass(&self, duration: Duration, ok: bool) {
        if ok {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.inner.full_sync_last_success.set(now);
        }
        self.inner
            .full_sync_duration
            .observe(duration.as_secs_f64());
        self.inner
            .full_sync_passes
            .get_or_create(&pass_labels(ok))
            .inc();
    }

    /// Sets how many actions of kind `action` the last dry-run pass found for `source`
    /// (`reconcile`, `full_sync`, `publish`).
    pub fn set_dry_run_actions(&self, source: &str, action: &str, n: usize) {
        self.inner
            .dry_run_actions
            .get_or_create(&DryRunLabels {
                source: source.to_owned(),
                action: action.to_owned(),
            })
            .set(gauge_value(n));
    }

    /// Adds `n` repairs of kind `action` made by a full-sync pass.
    pub fn full_sync_action(&self, action: SyncAction, n: u64) {
        self.inner
            .full_sync_actions
            .get_or_create(&ActionLabels { action })
            .inc_by(n);
    }

    /// Sets the number of vmdks with two or more CNS volumes seen by the last pass.
    pub fn set_duplicate_volumes(&self, n: usize) {
        self.inner.duplicate_volumes.set(gauge_value(n));
    }

    /// Sets the number of orphan volmig-named CNS volumes seen by the last pass.
    pub fn set_orphan_volumes(&self, n: usize) {
        self.inner.orphan_volumes.set(gauge_value(n));
    }

    /// Records one backend call: its operation (see [`crate::backend::op`]), result class
    /// and latency.
    pub fn backend_request(
        &self,
        operation: &'static str,
        result: BackendResult,
        latency: Duration,
    ) {
        self.inner
            .backend_requests
            .get_or_create(&BackendLabels { operation, result })
            .inc();
        self.inner
            .backend_duration
            .get_or_create(&OperationLabels { operation })
            .observe(latency.as_secs_f64());
    }

    /// Sets `volmig_leader` to 1 while this replica holds the Lease, else 0.
    pub fn set_leader(&self, leader: bool) {
        self.inner.leader.set(i64::from(leader));
    }

    /// Sets `volmig_registrar_mode`: 1 for `mode` (`unknown`, `own`, `follow` or `hold`), 0 for
    /// the others (docs/design.md §8.2).
    pub fn set_registrar_mode(&self, mode: &str) {
        for known in REGISTRAR_MODES {
            self.inner
                .registrar_mode
                .get_or_create(&ModeLabels { mode: known })
                .set(i64::from(known == mode));
        }
    }

    /// The mode `volmig_registrar_mode` names (its series at 1), if any.
    pub fn registrar_mode(&self) -> Option<&'static str> {
        REGISTRAR_MODES.into_iter().find(|&mode| {
            self.inner
                .registrar_mode
                .get_or_create(&ModeLabels { mode })
                .get()
                == 1
        })
    }

    /// Sets the number of in-tree vSphere PVs the watcher tracks.
    pub fn set_pvs_tracked(&self, n: usize) {
        self.inner.pvs_tracked.set(gauge_value(n));
    }

    /// Sets the number of registered volume paths whose `CnsVSphereVolumeMigration` driver
    /// object is missing.
    pub fn set_driver_objects_missing(&self, n: usize) {
        self.inner.driver_objects_missing.set(gauge_value(n));
    }

    /// Counts one failed reconcile of a VolumeMigration, by `reason` (a short, bounded
    /// identifier such as a status reason; never a free-form message).
    pub fn reconcile_failure(&self, reason: &str) {
        self.inner
            .reconcile_failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// The OpenMetrics text exposition (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry) {
            tracing::error!(error = %e, "encoding metrics as OpenMetrics text failed");
        }
        out
    }

    /// The Prometheus text exposition format 0.0.4.
    pub fn encode_prometheus_text(&self) -> String {
        let mut out = String::new();
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.inner.registry)
        {
            tracing::error!(error = %e, "encoding metrics as Prometheus text failed");
        }
        out
    }

    /// Registrations recorded with `result`.
    pub fn registrations(&self, result: RegistrationResult) -> u64 {
        counter(&self.inner.registrations, &RegistrationLabels { result })
    }

    /// The current `volmig_volumes` value of `phase`.
    pub fn volumes(&self, phase: Phase) -> i64 {
        let labels = PhaseLabels {
            phase: PhaseValue(phase),
        };
        self.inner.volumes.get(&labels).map_or(0, |g| g.get())
    }

    /// Full-sync passes recorded as completed (`ok`) or failed.
    pub fn full_sync_passes(&self, ok: bool) -> u64 {
        counter(&self.inner.full_sync_passes, &pass_labels(ok))
    }

    /// Full-sync repairs recorded of kind `action`.
    pub fn full_sync_actions(&self, action: SyncAction) -> u64 {
        counter(&self.inner.full_sync_actions, &ActionLabels { action })
    }

    /// The current `volmig_duplicate_volumes` value.
    pub fn duplicate_volumes(&self) -> i64 {
        self.inner.duplicate_volumes.get()
    }

    /// The current `volmig_orphan_volumes` value.
    pub fn orphan_volumes(&self) -> i64 {
        self.inner.orphan_volumes.get()
    }

    /// Backend calls recorded of `operation` with `result`.
    pub fn backend_requests(&self, operation: &'static str, result: BackendResult) -> u64 {
        counter(
            &self.inner.backend_requests,
            &BackendLabels { operation, result },
        )
    }

    /// Backend calls of `operation` recorded with any result.
    pub fn backend_requests_total(&self, operation: &'static str) -> u64 {
        BackendResult::ALL
            .iter()
            .map(|&result| self.backend_requests(operation, result))
            .sum()
    }

    /// True while `volmig_leader` is 1.
    pub fn is_leader(&self) -> bool {
        self.inner.leader.get() == 1
    }

    /// The current `volmig_pvs_tracked` value.
    pub fn pvs_tracked(&self) -> i64 {
        self.inner.pvs_tracked.get()
    }

    /// Counts an object found under another path's name (docs/design.md §2.6).
    pub fn name_collision(&self) {
        self.inner.name_collisions.inc();
    }

    /// Name collisions seen so far.
    pub fn name_collisions(&self) -> u64 {
        self.inner.name_collisions.get()
    }

    /// Unix time in seconds of the last completed full-sync pass; 0 before the first.
    pub fn full_sync_last_success(&self) -> f64 {
        self.inner.full_sync_last_success.get()
    }

    /// The current `volmig_driver_objects_missing` value.
    pub fn driver_objects_missing(&self) -> i64 {
        self.inner.driver_objects_missing.get()
    }

    /// Reconcile failures recorded with `reason`.
    pub fn reconcile_failures(&self, reason: &str) -> u64 {
        counter(
            &self.inner.reconcile_failures,
            &ReasonLabels {
                reason: reason.to_owned(),
            },
        )
    }
}

fn counter<S>(family: &Family<S, Counter>, labels: &S) -> u64
where
    S: Clone + Eq + std::hash::Hash,
{
    family.get(labels).map_or(0, |c| c.get())
}

#[cfg(test)]
mod tests;

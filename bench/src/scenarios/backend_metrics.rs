//! What the throughput runs and the bare client both read from a metrics exposition, and
//! the request rate both allow vCenter: shared here so neither scenario imports the other.

use std::collections::BTreeMap;

use crate::daemon::{Daemon, metric_by_label};

/// `--vc-requests-per-second` of the throughput runs (and of the bare client's gate): far
/// above what any configuration reaches, so that only the C slots limit.
pub const VC_REQUESTS_PER_SECOND: f64 = 10_000.0;

/// Mean duration of each backend operation so far, ms, from the daemon's histogram.
pub async fn backend_call_ms(daemon: &Daemon) -> BTreeMap<String, f64> {
    let metrics = daemon
        .get("/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    backend_call_ms_from(&metrics)
}

/// Mean duration of each backend operation, ms, from a metrics exposition.
pub fn backend_call_ms_from(metrics: &str) -> BTreeMap<String, f64> {
    means_by_label(
        metrics,
        "volmig_backend_request_duration_seconds",
        "operation",
    )
    .into_iter()
    .map(|(op, seconds)| (op, seconds * 1000.0))
    .collect()
}

/// Mean seconds per registration inside the registrar by stage, from a metrics
/// exposition (`volmig_registration_stage_seconds`; every registration observes every
/// stage once).
pub fn registration_stage_seconds(metrics: &str) -> BTreeMap<String, f64> {
    means_by_label(metrics, "volmig_registration_stage_seconds", "stage")
}

/// `_sum ÷ _count` of histogram `name` by the value of `label` (series with no
/// observation left out).
fn means_by_label(metrics: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let sums = metric_by_label(metrics, &format!("{name}_sum"), label);
    let counts = metric_by_label(metrics, &format!("{name}_count"), label);
    sums.iter()
        .filter_map(|(key, sum)| {
            let n = counts.get(key).copied().filter(|n| *n > 0.0)?;
            Some((key.clone(), sum / n))
        })
        .collect()
}

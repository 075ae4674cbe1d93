//! Where the time of one registration goes (`volmig_registration_stage_seconds`): a clock
//! per registration, carried in a task-local so that the registrar's helpers (the path's
//! lock, the backend slot, backend calls, status reads and writes) add to it without
//! threading it through every call. Outside a measured registration (unregistration,
//! protection repairs) the helpers add nothing.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::{Metrics, RegistrationStage};

tokio::task_local! {
    static CLOCK: RefCell<Vec<(RegistrationStage, Duration)>>;
}

/// Adds `elapsed` to `stage` of the registration running on this task, if one is measured.
pub(super) fn add(stage: RegistrationStage, elapsed: Duration) {
    let _ = CLOCK.try_with(|clock| clock.borrow_mut().push((stage, elapsed)));
}

/// Runs `work` and adds its duration to `stage`.
pub(super) async fn timed<T>(stage: RegistrationStage, work: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let out = work.await;
    add(stage, start.elapsed());
    out
}

/// Runs one registration with a fresh clock and, when `counts(&outcome)`, records its
/// stages into `metrics`; the time no helper accounted for is [`RegistrationStage::Other`],
/// so the stages add up to the registration's time in the registrar.
pub(super) async fn measured<T>(
    metrics: Option<&Metrics>,
    counts: impl FnOnce(&T) -> bool,
    registration: impl Future<Output = T>,
) -> T {
    let Some(metrics) = metrics else {
        return registration.await;
    };
    CLOCK
        .scope(RefCell::new(Vec::new()), async {
            let start = Instant::now();
            let out = registration.await;
            let total = start.elapsed();
            if counts(&out) {
                let mut spent = CLOCK.with(RefCell::take);
                let accounted: Duration = spent.iter().map(|(_, d)| *d).sum();
                spent.push((RegistrationStage::Other, total.saturating_sub(accounted)));
                metrics.registration_stages(&spent);
            }
            out
        })
        .await
}

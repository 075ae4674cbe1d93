//! End-to-end test of recording a create's vCenter task (docs/design.md §4.4): the task is
//! recorded beside the marker even when another writer touched the object meanwhile, and a
//! successor asks vCenter about it instead of waiting out the grace. Real `volmig` binary,
//! the API server and the govmomi simulator harness.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/fencing.rs"]
mod fencing;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::{Duration, Instant};

use e2e::Daemon;
use fencing::{CreateInFlight, create_in_flight, one_volume_each, registered};
use kube::api::{Patch, PatchParams};

/// The create's task runs 45 s; right after it was sent another writer changes the object
/// (a label), so the task write loses its condition. The daemon is SIGKILLed 6 s into the
/// task; its successor (grace 20 s) must not create beside the task still running, and
/// converges by following the recorded task: within 60 s of its start, with one create.
/// Before the fix the task write was given up on the conflict, and the successor created
/// a second volume after its grace while the first task still ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_asks_about_a_task_recorded_despite_a_conflict() {
    let flags = ["--lease-duration", "4s"];
    let CreateInFlight {
        sim,
        cluster,
        path,
        mut first,
        sent_at,
    } = create_in_flight(Duration::from_secs(45), &flags).await;
    let name = cluster
        .migration(&path)
        .await
        .and_then(|vm| vm.metadata.name)
        .expect("the object");
    let label = serde_json::json!({"metadata": {"labels": {"touched": "yes"}}});
    cluster
        .migrations()
        .patch(&name, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("another writer");
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(sent_at.elapsed())).await;
    first.kill().await;
    let recorded = cluster
        .migration(&path)
        .await
        .and_then(|vm| vm.status)
        .and_then(|s| s.registering_task);

    let started = Instant::now();
    let successor = ["--lease-duration", "4s", "--in-flight-grace", "20s"];
    let _second = Daemon::spawn(&cluster, &sim, "second", &successor);
    let ids = registered(
        &cluster,
        std::slice::from_ref(&path),
        Duration::from_secs(120),
    )
    .await;
    eprintln!(
        "the successor converged {:?} after its start",
        started.elapsed()
    );
    assert_eq!(
        sim.stats().await.calls("CnsCreateVolume"),
        1,
        "no create beside the running task"
    );
    one_volume_each(&sim, &ids).await;
    assert!(recorded.is_some(), "the task is recorded beside the marker");
}

//! End-to-end test of an object deleted while `Registering` (docs/design.md §5.4): the
//! registrar resolves the create in flight before the finalizer goes. Real `volmig`
//! binary, the API server and the govmomi simulator harness.

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

use std::time::Duration;

use e2e::{Daemon, phase, wait_for};
use fencing::{CreateInFlight, create_in_flight, one_volume_each, registered};
use kube::api::DeleteParams;
use volmig::volume_migration::Phase;

/// The daemon is SIGKILLed while its create (task 8 s, recorded beside the marker) runs,
/// and the object is deleted by hand while its PV still uses the path. The successor
/// follows the recorded task, records the volume that landed, lets the object go and
/// recreates it: Registered with that volume, one create in all. Before the fix the
/// successor retried the deletion every 5 s forever and the path was never Registered
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_deleted_while_registering_is_resolved() {
    let flags = ["--lease-duration", "4s"];
    let CreateInFlight {
        sim,
        cluster,
        path,
        mut first,
        ..
    } = create_in_flight(Duration::from_secs(8), &flags).await;
    let vm = wait_for(Duration::from_secs(30), "the task recorded", || async {
        cluster.migration(&path).await.filter(|vm| {
            vm.status
                .as_ref()
                .is_some_and(|s| s.registering_task.is_some())
        })
    })
    .await;
    first.kill().await;
    let name = vm.metadata.name.clone().expect("named");
    cluster
        .migrations()
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the object by hand");
    assert_eq!(
        cluster.migration(&path).await.as_ref().and_then(phase),
        Some(Phase::Registering),
        "held by the finalizer"
    );

    let _second = Daemon::spawn(&cluster, &sim, "second", &flags);
    let ids = registered(
        &cluster,
        std::slice::from_ref(&path),
        Duration::from_secs(90),
    )
    .await;
    one_volume_each(&sim, &ids).await;
    assert_eq!(
        sim.stats().await.calls("CnsCreateVolume"),
        1,
        "the volume that landed is the one recorded"
    );
    let now = cluster.migration(&path).await.expect("recreated");
    assert_ne!(now.metadata.uid, vm.metadata.uid, "a new object");
}

//! End-to-end test of the ID write after a conflict (docs/design.md §4.9): a volume ID is
//! never written over an unregistration another leader started. Real `volmig` binary,
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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::{phase, wait_for};
use fencing::{CreateInFlight, create_in_flight};
use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use volmig::volume_migration::Phase;

/// While the daemon's create runs (8 s), its PV goes and another leader (a replica whose
/// clock ran fast) deletes the object and writes `Unregistering`. The daemon's ID write
/// then loses its condition; it must not write `Registered` over the unregistration, and
/// the volume that landed must not stay behind. Before the fix the status went
/// `Unregistering` → `Registered` → `Unregistering`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_write_never_replaces_an_unregistration() {
    let CreateInFlight {
        sim,
        cluster,
        path,
        first: _daemon,
        ..
    } = create_in_flight(Duration::from_secs(8), &[]).await;
    let vm = cluster.migration(&path).await.expect("the object");
    let name = vm.metadata.name.clone().expect("named");
    let api = cluster.migrations();

    // Every phase the API server stores from now on.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = {
        let (seen, api) = (seen.clone(), api.clone());
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(vm)) = events.next().await {
                let mut seen = seen.lock().unwrap();
                let now = phase(&vm);
                if seen.last() != Some(&now) {
                    seen.push(now);
                }
            }
        })
    };

    cluster.delete_pv("pv-1").await;
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete the object");
    let unregistering = serde_json::json!({"status": {"phase": "Unregistering"}});
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&unregistering),
    )
    .await
    .expect("the other leader's Unregistering");

    wait_for(Duration::from_secs(90), "the object finalized", || async {
        cluster.migration(&path).await.is_none().then_some(())
    })
    .await;
    recorder.abort();
    let seen = seen.lock().unwrap().clone();
    let after = seen
        .iter()
        .position(|p| *p == Some(Phase::Unregistering))
        .expect("the unregistration seen");
    assert!(
        !seen[after..].contains(&Some(Phase::Registered)),
        "an ID was written over the unregistration: {seen:?}"
    );
    assert_eq!(
        sim.stats().await.calls("CnsCreateVolume"),
        1,
        "one create in all"
    );
    assert!(
        sim.volumes_for(&path).await.is_empty(),
        "the volume that landed was unregistered: {:?}",
        sim.volumes_for(&path).await
    );
}

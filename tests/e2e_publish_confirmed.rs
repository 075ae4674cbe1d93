//! End-to-end test of publishing only confirmed IDs (docs/design.md §8.1): a status
//! restored from a backup or edited by hand with a dead volume ID is never published to
//! the CSI driver's cache; full sync registers the path again and that ID is published.
//! Real `volmig` binary, the API server and the govmomi simulator harness.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::k8s::migrations::new_migration;
use volmig::volume_migration::Phase;

const DEAD: &str = "00000000-dead-4000-8000-000000000000";

/// The object of a PV's path comes back with a `Registered` status naming a volume CNS
/// does not have. Before the fix the first reconcile published that ID to the driver's
/// cache (where the driver would hand it to a pod's attach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_status_id_is_never_published() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let raw = sim.vmdk_path("kubevols", 1);
    let path = VolumePath::parse(&raw).unwrap();
    cluster.create_pv("pv-1", &raw).await;
    let migrations = cluster.migrations();
    let name = path.object_name();
    migrations
        .create(&PostParams::default(), &new_migration(&path))
        .await
        .expect("the restored object");
    let restored = serde_json::json!({"status": {"phase": "Registered", "volumeID": DEAD}});
    migrations
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&restored))
        .await
        .expect("its restored status");

    // Every volume ID the driver's cache ever holds.
    let published = Arc::new(Mutex::new(BTreeSet::new()));
    let recorder = {
        let published = published.clone();
        let api: Api<CnsVSphereVolumeMigration> = Api::all(cluster.client.clone());
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(object)) = events.next().await {
                published.lock().unwrap().insert(object.spec.volumeid);
            }
        })
    };

    let _daemon = Daemon::spawn(&cluster, &sim, "restored", &[]);
    let live = wait_for(
        Duration::from_secs(90),
        "registered again with a live ID and published",
        || async {
            let vm = cluster.migration(&raw).await?;
            let id = volume_id(&vm).filter(|id| id != DEAD)?;
            (phase(&vm) == Some(Phase::Registered) && published.lock().unwrap().contains(&id))
                .then_some(id)
        },
    )
    .await;
    recorder.abort();
    let published = published.lock().unwrap().clone();
    assert!(
        !published.contains(DEAD),
        "the dead ID was published: {published:?}"
    );
    assert_eq!(published, BTreeSet::from([live]));
}

//! The CSI driver's CRD is watched, not checked once (docs/design.md §8.3): installed after
//! volmig started, it is published to without a restart; an object volmig needs that is
//! deleted is created again at once. The real `volmig` binary, the API test server and
//! the simulator harness.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use kube::api::{Api, DeleteParams, ListParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::volume_migration::Phase;

/// The driver's objects: name → (volume path, volume ID).
async fn driver_objects(cluster: &Cluster) -> BTreeMap<String, (String, String)> {
    let api: Api<CnsVSphereVolumeMigration> = Api::all(cluster.client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .map(|o| {
                (
                    o.metadata.name.unwrap_or_default(),
                    (o.spec.volumepath, o.spec.volumeid),
                )
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_crd_installed_later_is_published_to_and_deleted_objects_come_back() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    let paths: Vec<String> = (1..=2).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    let mut daemon = Daemon::spawn(
        &cluster,
        &sim,
        "volmig-crd-later",
        &["--full-sync-interval", "1h"],
    );
    daemon.wait_ready().await;
    let mut ids = BTreeMap::new();
    for path in &paths {
        let canonical = VolumePath::parse(path).unwrap().canonical();
        let vm = wait_for(Duration::from_secs(60), "Registered", || async {
            cluster
                .migration(&canonical)
                .await
                .filter(|vm| phase(vm) == Some(Phase::Registered))
        })
        .await;
        ids.insert(path.clone(), volume_id(&vm).unwrap());
    }

    // The driver is installed now; volmig publishes without a restart.
    cluster.install_driver_crd().await;
    let want: BTreeMap<String, (String, String)> = ids
        .iter()
        .map(|(path, id)| (id.clone(), (path.clone(), id.clone())))
        .collect();
    wait_for(
        Duration::from_secs(120),
        "every mapping published after the CRD appeared",
        || async { (driver_objects(&cluster).await == want).then_some(()) },
    )
    .await;
    assert_eq!(daemon.exit_status(), None, "no restart");

    // An object volmig needs, deleted by someone else, comes back at once (the full sync
    // runs hourly here: the watch does it).
    let (gone, _) = want.iter().next().unwrap();
    Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
        .delete(gone, &DeleteParams::default())
        .await
        .expect("delete the object");
    wait_for(
        Duration::from_secs(10),
        "the deleted object created again",
        || async { (driver_objects(&cluster).await == want).then_some(()) },
    )
    .await;
}

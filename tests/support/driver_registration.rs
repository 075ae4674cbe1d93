//! What the vSphere CSI driver's syncer does on a cache miss, for the end-to-end tests:
//! it registers the vmdk under a random CNS name of its own, then writes its
//! `CnsVSphereVolumeMigration` object named by the ID (docs/design.md §8).

use kube::api::{Api, PostParams};
use volmig::k8s::driver_cache::{CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec};

use crate::e2e::Cluster;
use crate::vcsim::Vcsim;

/// Registers `raw` (a PV's raw volume path on the simulator's first datastore) under the
/// CNS name `name` with the e2e cluster ID, writes the driver's object; returns the ID.
pub async fn driver_registers(cluster: &Cluster, sim: &Vcsim, raw: &str, name: &str) -> String {
    let file = raw
        .split_once("] ")
        .unwrap_or_else(|| panic!("{raw} has no [datastore] part"))
        .1;
    let id = sim
        .soap()
        .await
        .create_volume(
            name,
            &sim.datacenter,
            &sim.datastores[0].name,
            file,
            "e2e-cluster",
        )
        .await;
    let object = CnsVSphereVolumeMigration::new(
        &id,
        CnsVSphereVolumeMigrationSpec {
            volumepath: raw.to_owned(),
            volumeid: id.clone(),
            protectvolumefromvmdelete: false,
        },
    );
    Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("the driver writes its object");
    id
}

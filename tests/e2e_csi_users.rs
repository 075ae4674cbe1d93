//! End-to-end test of the CSI driver's users of a migrated volume (docs/design.md §5.1):
//! after cut-over a static CSI PV (`spec.csi.driver: csi.vsphere.vmware.com`,
//! `volumeHandle: <ID>`) and its VolumeAttachment use the volume volmig registered, so
//! deleting the last in-tree PV of the vmdk must not unregister it, with
//! `--on-pv-delete=unregister` (the default) and with `--gc-orphans`. Real `volmig`
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

use e2e::{Cluster, Daemon, wait_for};
use fencing::{canonical, registered};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, PostParams};
use vcsim::{Vcsim, VcsimOptions};

/// How long the test watches for an unregistration that must not come: several full-sync
/// passes (3 s each in these tests) after the object went.
const QUIET: Duration = Duration::from_secs(12);

async fn create_csi_pv(cluster: &Cluster, name: &str, volume_id: &str) {
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": "csi.vsphere.vmware.com", "volumeHandle": volume_id,
                    "fsType": "ext4"}
        }
    }))
    .unwrap();
    cluster
        .pvs()
        .create(&PostParams::default(), &pv)
        .await
        .expect("the static CSI PV");
}

async fn create_attachment(cluster: &Cluster, name: &str, pv: &str) -> Api<VolumeAttachment> {
    let api: Api<VolumeAttachment> = Api::all(cluster.client.clone());
    let attachment: VolumeAttachment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"attacher": "csi.vsphere.vmware.com", "nodeName": "node-1",
                 "source": {"persistentVolumeName": pv}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &attachment)
        .await
        .expect("the VolumeAttachment");
    api
}

/// Asserts for [`QUIET`] that `path` keeps its one volume `id`.
async fn stays_registered(sim: &Vcsim, path: &str, id: &str, why: &str) {
    tokio::time::sleep(QUIET).await;
    let ids: Vec<String> = sim
        .volumes_for(path)
        .await
        .into_iter()
        .map(|v| v.id)
        .collect();
    assert_eq!(ids, [id], "{why}");
    assert_eq!(sim.stats().await.calls("CnsDeleteVolume"), 0, "{why}");
}

/// The in-tree PV goes, the static CSI PV and its attachment stay: the volume stays
/// registered. Then the CSI PV goes while its attachment stays (detach pending): still
/// registered. Only once the attachment is gone does `--gc-orphans` collect it. Before
/// the fix the volume was unregistered as soon as the in-tree PV was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_users_keep_a_migrated_volume_registered() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    let raw = sim.vmdk_path("kubevols", 1);
    let path = canonical(&raw);
    cluster.create_pv("in-tree", &raw).await;
    let _daemon = Daemon::spawn(
        &cluster,
        &sim,
        "csi-users",
        &["--on-pv-delete", "unregister", "--gc-orphans"],
    );
    let ids = registered(
        &cluster,
        std::slice::from_ref(&path),
        Duration::from_secs(90),
    )
    .await;
    let id = ids[&path].clone();

    // Cut-over: a static CSI PV of the same volume, attached to a node.
    create_csi_pv(&cluster, "static-csi", &id).await;
    let attachments = create_attachment(&cluster, "csi-attachment", "static-csi").await;

    cluster.delete_pv("in-tree").await;
    wait_for(
        Duration::from_secs(60),
        "the VolumeMigration gone",
        || async { cluster.migration(&path).await.is_none().then_some(()) },
    )
    .await;
    stays_registered(&sim, &path, &id, "the CSI PV and its attachment use it").await;
    assert_eq!(
        cluster.events("Unregistered").await,
        [],
        "no Event says the registration was removed"
    );

    cluster.delete_pv("static-csi").await;
    stays_registered(&sim, &path, &id, "the attachment outlives its PV").await;

    attachments
        .delete("csi-attachment", &DeleteParams::default())
        .await
        .expect("delete the attachment");
    wait_for(Duration::from_secs(60), "the orphan collected", || async {
        sim.volumes_for(&path).await.is_empty().then_some(())
    })
    .await;
}

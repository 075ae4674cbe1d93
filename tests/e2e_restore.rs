//! Restore without loss (docs/operations.md, "Backup and restore"; docs/design.md §4.3,
//! §8): the cluster's VolumeMigrations and the CSI driver's cache objects are lost while
//! volmig is stopped — deleted outright, or brought back from a backup without their
//! status — and volmig, started again, rebuilds every mapping by adoption: the same volume
//! IDs, the driver's objects back, and not one new `CnsCreateVolume`. Real `volmig` binary,
//! the API test server (driven with the real kubectl) and the simulator harness.

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
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::volume_migration::Phase;

/// In-tree PVs of the scenario; the first half is lost outright, the second half comes
/// back from a backup without status.
const PVS: usize = 6;

fn drivers(cluster: &Cluster) -> Api<CnsVSphereVolumeMigration> {
    Api::all(cluster.client.clone())
}

/// The driver's cache as the driver builds it: raw volume path → volume ID.
async fn driver_cache(cluster: &Cluster) -> BTreeMap<String, String> {
    drivers(cluster)
        .list(&ListParams::default())
        .await
        .expect("list the driver's objects")
        .items
        .into_iter()
        .map(|o| (o.spec.volumepath, o.spec.volumeid))
        .collect()
}

/// Raw path → status volume ID, once every path is Registered with an ID.
async fn registered(cluster: &Cluster, raws: &[String]) -> Option<BTreeMap<String, String>> {
    let mut ids = BTreeMap::new();
    for raw in raws {
        let vm = cluster.migration(raw).await?;
        if phase(&vm) != Some(Phase::Registered) {
            return None;
        }
        ids.insert(raw.clone(), volume_id(&vm)?);
    }
    Some(ids)
}

/// Every path Registered and published, with the IDs of status and cache agreeing.
async fn registered_and_published(
    cluster: &Cluster,
    raws: &[String],
) -> Option<BTreeMap<String, String>> {
    let ids = registered(cluster, raws).await?;
    let cache = driver_cache(cluster).await;
    raws.iter()
        .all(|raw| cache.get(raw) == ids.get(raw))
        .then_some(ids)
}

/// What a backup keeps of an object: everything but its status and the fields the API
/// server assigns.
fn without_status(mut object: serde_json::Value) -> serde_json::Value {
    let map = object.as_object_mut().unwrap();
    map.remove("status");
    let metadata = map["metadata"].as_object_mut().unwrap();
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        metadata.remove(field);
    }
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_without_status_adopts_every_volume_and_creates_none() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(PVS)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let raws: Vec<String> = (1..=PVS).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, raw) in raws.iter().enumerate() {
        cluster.create_pv(&format!("pv-{}", n + 1), raw).await;
    }

    let mut daemon = Daemon::spawn(&cluster, &sim, "before", &[]);
    let before = wait_for(
        Duration::from_secs(120),
        "every path registered and published",
        || registered_and_published(&cluster, &raws),
    )
    .await;
    let creates_before = sim.stats().await.calls("CnsCreateVolume");
    assert_eq!(creates_before, PVS as u64, "one create per vmdk");
    let volumes_before = sim.volumes().await.len();
    assert_eq!(volumes_before, PVS);
    // The backup, taken with kubectl as an operator would.
    let backup: serde_json::Value = serde_json::from_str(
        &cluster.kubectl_ok(&["get", "volumemigrations.volmig.io", "-o", "json"], None),
    )
    .expect("kubectl JSON");
    assert_eq!(backup["items"].as_array().map(Vec::len), Some(PVS));
    assert!(
        daemon.terminate(Duration::from_secs(30)).await.success(),
        "volmig stops cleanly"
    );
    let first_log = daemon.log_text();

    // The loss: every VolumeMigration goes (finalizers stripped first, as a restore tool
    // would), and every object of the driver's cache.
    let migrations = cluster.migrations();
    for vm in cluster.list_migrations().await {
        let name = vm.metadata.name.clone().unwrap();
        migrations
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
            )
            .await
            .expect("strip the finalizers");
        migrations
            .delete(&name, &DeleteParams::default())
            .await
            .expect("delete the VolumeMigration");
    }
    for object in drivers(&cluster)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        drivers(&cluster)
            .delete(&object.metadata.name.unwrap(), &DeleteParams::default())
            .await
            .expect("delete the driver's object");
    }
    wait_for(Duration::from_secs(30), "everything gone", || async {
        (cluster.list_migrations().await.is_empty() && driver_cache(&cluster).await.is_empty())
            .then_some(())
    })
    .await;
    // Half of the paths come back from the backup, without status (`kubectl apply`).
    let restored_paths: Vec<String> = raws[PVS / 2..]
        .iter()
        .map(|raw| VolumePath::parse(raw).unwrap().canonical())
        .collect();
    let restored: Vec<serde_json::Value> = backup["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            o["spec"]["volumePath"]
                .as_str()
                .is_some_and(|p| restored_paths.iter().any(|r| r == p))
        })
        .cloned()
        .map(without_status)
        .collect();
    assert_eq!(restored.len(), PVS - PVS / 2);
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": restored});
    cluster.kubectl_ok(&["apply", "-f", "-"], Some(&list.to_string()));
    for raw in &raws[PVS / 2..] {
        let vm = cluster.migration(raw).await.expect("restored object");
        assert_eq!(volume_id(&vm), None, "{raw}: restored without status");
    }
    for raw in &raws[..PVS / 2] {
        assert!(cluster.migration(raw).await.is_none(), "{raw}: lost");
    }

    let daemon = Daemon::spawn(&cluster, &sim, "after", &[]);
    let after = wait_for(
        Duration::from_secs(120),
        "every path registered and published again",
        || registered_and_published(&cluster, &raws),
    )
    .await;
    assert_eq!(after, before, "every path has its old volume ID again");
    // One full-sync pass after the restore finds nothing to create either.
    let passes = daemon
        .metric("volmig_full_sync_passes_total{result=\"ok\"}")
        .await
        .unwrap_or(0.0);
    wait_for(
        Duration::from_secs(30),
        "a later full-sync pass",
        || async {
            let now = daemon
                .metric("volmig_full_sync_passes_total{result=\"ok\"}")
                .await?;
            (now > passes).then_some(())
        },
    )
    .await;
    assert_eq!(
        registered_and_published(&cluster, &raws).await.as_ref(),
        Some(&before),
        "still the same IDs after a full sync"
    );
    let adopted = daemon
        .metric("volmig_registrations_total{result=\"adopted\"}")
        .await;
    assert!(
        adopted.is_some_and(|n| n >= PVS as f64),
        "every path adopted: {adopted:?}"
    );
    assert_eq!(
        daemon
            .metric("volmig_registrations_total{result=\"created\"}")
            .await
            .unwrap_or(0.0),
        0.0,
        "nothing created"
    );
    let stats = sim.stats().await;
    assert_eq!(
        stats.calls("CnsCreateVolume"),
        creates_before,
        "no CnsCreateVolume after the restore: {:?}",
        stats.calls
    );
    assert_eq!(stats.calls("CnsDeleteVolume"), 0, "nothing unregistered");
    assert_eq!(sim.volumes().await.len(), volumes_before, "no new volume");
    assert!(sim.duplicates().await.is_empty(), "no duplicate volume");
    for raw in &raws {
        let vm = cluster.migration(raw).await.unwrap();
        assert!(
            vm.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == "volmig.io/registration")),
            "{raw}: the finalizer is back"
        );
    }
    let log = first_log + &daemon.log_text();
    assert!(!log.contains("panicked"), "a volmig task panicked");
}

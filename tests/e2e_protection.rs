//! End-to-end: protection from VM deletion (docs/design.md §8.1, §8.3). The status's
//! `protectedFromVMDelete` and the driver's `protectvolumefromvmdelete: true` follow only a
//! `keepAfterDeleteVm` flag volmig set or verified, never the vCenter release alone: on
//! 8.0.3 a volume the driver registered earlier is registered again by its ID (as the
//! driver protects one), below 8.0.3 the flag is read back. What the disk carries is read
//! from the simulator's own state. Real `volmig` binary, the API test server and the
//! simulator harness.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::Duration;

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use kube::api::{Api, ListParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::volume_migration::Phase;

const CONVERGE: Duration = Duration::from_secs(90);

fn canonical(raw: &str) -> String {
    VolumePath::parse(raw).unwrap().canonical()
}

/// The `protectvolumefromvmdelete` of every driver object for the raw path `raw`.
async fn published(cluster: &Cluster, raw: &str) -> Vec<bool> {
    Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .expect("list the driver's objects")
        .items
        .into_iter()
        .filter(|o| o.spec.volumepath == raw)
        .map(|o| o.spec.protectvolumefromvmdelete)
        .collect()
}

/// The status's `protectedFromVMDelete` for `raw` once it is Registered with `id` (any ID
/// when `None`).
async fn recorded(cluster: &Cluster, raw: &str, id: Option<&str>) -> Option<Option<bool>> {
    let vm = cluster.migration(&canonical(raw)).await?;
    let registered = phase(&vm) == Some(Phase::Registered)
        && id.is_none_or(|id| volume_id(&vm).as_deref() == Some(id));
    registered.then(|| vm.status.and_then(|s| s.protected_from_vm_delete))
}

/// Whether the simulator says volume `id`'s disk carries `keepAfterDeleteVm`.
async fn kept(sim: &Vcsim, id: &str) -> bool {
    sim.volumes()
        .await
        .iter()
        .any(|v| v.id == id && v.keep_after_delete_vm)
}

/// The driver registered the vmdk while vCenter was 7.0.3 (its flag unset) and its object
/// is gone (its syncer stopped before writing it); then vCenter went to 8.0.3. volmig
/// adopts the driver's ID and protects the disk by registering the volume again by its ID;
/// only then does the status say protected and `true` get published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_803_the_drivers_volume_is_protected_before_anything_says_so() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1).vcenter_version("7.0.3")).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let raw = sim.vmdk_path("kubevols", 1);
    let file = raw.split_once("] ").unwrap().1;
    let soap = sim.soap().await;
    let ds = &sim.datastores[0].name;
    let id = soap
        .create_volume("pvc-driver-1", &sim.datacenter, ds, file, "e2e-cluster")
        .await;
    assert!(!kept(&sim, &id).await, "7.0.3 registration sets no flag");
    sim.set_vcenter_version("8.0.3").await;
    sim.clear_creates().await;
    cluster.create_pv("pv-1", &raw).await;
    let _daemon = Daemon::spawn(&cluster, &sim, "protector", &[]);

    let flags = wait_for(CONVERGE, "`true` published for the path", || async {
        let flags = published(&cluster, &raw).await;
        flags.contains(&true).then_some(flags)
    })
    .await;
    assert!(
        kept(&sim, &id).await,
        "published protected, so the disk carries keepAfterDeleteVm"
    );
    assert_eq!(flags, [true]);
    assert_eq!(
        recorded(&cluster, &raw, Some(&id)).await,
        Some(Some(true)),
        "the driver's ID adopted and recorded protected"
    );
    // volmig's name finds nothing; its create by URL is refused with the driver's ID
    // (`CnsAlreadyRegisteredFault`), which it adopts, then registers again by that ID.
    let creates = sim.creates().await;
    let again: Vec<_> = creates
        .iter()
        .filter(|c| !c.backing_disk_id.is_empty())
        .collect();
    assert_eq!(again.len(), 1, "{creates:?}");
    assert_eq!(
        (again[0].backing_disk_id.as_str(), again[0].name.as_str()),
        (id.as_str(), "pvc-driver-1"),
        "protected by registering it again by its ID, under its own name"
    );
    assert_eq!(sim.volumes().await.len(), 1, "no second volume");
}

/// Below 8.0.3 a `keepAfterDeleteVm` that does not stick (the set answers success, the
/// read-back finds it unset) is neither recorded nor published; once it sticks, full sync
/// protects the disk and both follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_803_a_flag_that_does_not_stick_is_neither_recorded_nor_published() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1).vcenter_version("7.0.3")).await;
    sim.patch_modes(serde_json::json!({ "vslmSetFlagsIgnored": true }))
        .await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let raw = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("pv-1", &raw).await;
    let _daemon = Daemon::spawn(&cluster, &sim, "reader", &["--full-sync-interval", "2s"]);

    let flag = wait_for(CONVERGE, "registered", || recorded(&cluster, &raw, None)).await;
    assert_ne!(flag, Some(true), "the flag did not stick");
    let flags = wait_for(CONVERGE, "published", || async {
        let flags = published(&cluster, &raw).await;
        (!flags.is_empty()).then_some(flags)
    })
    .await;
    assert!(flags.iter().all(|p| !p), "{flags:?}");
    // Full sync tries again (and the flag still does not stick).
    let calls = |stats: vcsim::SimStats| stats.calls("VslmSetVStorageObjectControlFlags");
    let before = calls(sim.stats().await);
    wait_for(CONVERGE, "full sync tries again", || async {
        (calls(sim.stats().await) > before).then_some(())
    })
    .await;
    assert_ne!(recorded(&cluster, &raw, None).await, Some(Some(true)));
    assert!(published(&cluster, &raw).await.iter().all(|p| !p));

    sim.patch_modes(serde_json::json!({ "vslmSetFlagsIgnored": false }))
        .await;
    wait_for(
        CONVERGE,
        "recorded and published once it sticks",
        || async {
            let flags = published(&cluster, &raw).await;
            let recorded = recorded(&cluster, &raw, None).await? == Some(true);
            (recorded && !flags.is_empty() && flags.iter().all(|p| *p)).then_some(())
        },
    )
    .await;
    let id = volume_id(&cluster.migration(&canonical(&raw)).await.unwrap()).unwrap();
    assert!(kept(&sim, &id).await);
}

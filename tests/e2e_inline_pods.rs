//! Pods that name a vmdk inline (`spec.volumes[].vsphereVolume`, no PV), end to end
//! (docs/design.md §8.9): the real `volmig` binary, the API test server (which serves pods)
//! and the simulator harness, with and without the CSI driver double leading.
//!
//! - volmig registering (no driver): an inline-only vmdk gets its VolumeMigration and one
//!   CNS volume, the pod's raw spelling is published, full-sync passes never take it for
//!   unused; once the pod is gone the path is unused like a PV's and unregistered.
//! - holding the driver syncer's Lease, then following: the pods' spellings are
//!   registered and published before the driver leads, so the driver's `podAdded` for
//!   every existing pod hits its cache; a later pod is the driver's, adopted by volmig.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/csi_driver/mod.rs"]
mod csi_driver;
#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::Duration;

use csi_driver::{CsiDriverDouble, DriverOptions};
use e2e::{Cluster, Daemon, cluster_for_hold, phase, volume_id, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::volume_migration::Phase;

/// The driver's cache objects: (volumepath, volumeid).
async fn driver_objects(cluster: &Cluster) -> Vec<(String, String)> {
    Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| (o.spec.volumepath, o.spec.volumeid))
        .collect()
}

/// The IDs of the CNS volumes backing `raw`'s vmdk.
async fn cns_ids(sim: &Vcsim, raw: &str) -> Vec<String> {
    let path = volmig::VolumePath::parse(raw).unwrap().canonical();
    sim.volumes_for(&path)
        .await
        .into_iter()
        .map(|v| v.id)
        .collect()
}

/// volmig registers: an inline-only vmdk is registered once, published under the pod's
/// spelling, kept through full-sync passes, and unregistered once its pod is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_pod_volume_is_registered_published_kept_and_released_with_its_pod() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let pv_path = sim.vmdk_path("kubevols", 1);
    let canonical = sim.vmdk_path("kubevols", 2);
    // The pod spells the vmdk its own way; the driver looks it up verbatim.
    let ds = sim.datastores[0].inventory_path.clone();
    let pod_raw = format!("[{ds}] kubevols//disk-0002.vmdk");
    cluster.create_pv("pv-1", &pv_path).await;
    cluster.create_pod("web", &pod_raw).await;

    let daemon = Daemon::spawn(&cluster, &sim, "volmig-inline", &[]);
    daemon.wait_ready().await;
    let id = wait_for(
        Duration::from_secs(60),
        "the pod's vmdk Registered",
        || async {
            let vm = cluster.migration(&canonical).await?;
            (phase(&vm) == Some(Phase::Registered)).then(|| volume_id(&vm))?
        },
    )
    .await;
    let vm = cluster.migration(&canonical).await.unwrap();
    let users = vm
        .status
        .and_then(|s| s.persistent_volumes)
        .unwrap_or_default();
    assert_eq!(
        users,
        ["pod/default/web/data"],
        "the pod is the path's user"
    );
    wait_for(
        Duration::from_secs(30),
        "the pod's spelling published",
        || async {
            driver_objects(&cluster)
                .await
                .contains(&(pod_raw.clone(), id.clone()))
                .then_some(())
        },
    )
    .await;

    // Three full-sync passes (every 3 s): an inline-only path is in use, never unused.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let vm = cluster.migration(&canonical).await;
    assert_eq!(vm.as_ref().and_then(phase), Some(Phase::Registered));
    assert_eq!(
        vm.as_ref().and_then(volume_id).as_deref(),
        Some(id.as_str())
    );
    assert!(
        vm.as_ref()
            .is_some_and(|v| v.metadata.deletion_timestamp.is_none()),
        "not being deleted"
    );
    assert_eq!(
        cns_ids(&sim, &canonical).await,
        std::slice::from_ref(&id),
        "one CNS volume"
    );
    assert_eq!(sim.creates().await.len(), 2, "one create per vmdk");

    // The pod goes: the path is unused (two passes) and its volume unregistered.
    Api::<Pod>::namespaced(cluster.client.clone(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(60),
        "the unused path released",
        || async {
            let gone = cluster.migration(&canonical).await.is_none();
            (gone && cns_ids(&sim, &canonical).await.is_empty()).then_some(())
        },
    )
    .await;
    let pv_vm = cluster.migration(&pv_path).await;
    assert_eq!(
        pv_vm.as_ref().and_then(phase),
        Some(Phase::Registered),
        "the PV's vmdk is untouched"
    );
}

/// Hold, then follow: volmig holds the driver syncer's Lease while pods name one vmdk
/// inline only and another (a PV's) under an alias spelling. It registers and publishes
/// both before it hands over; the driver's pod informer then delivers every pod as an add
/// (`podAdded`): what its cold cache has listed is a hit, what it has not is registered
/// again and answered AlreadyRegistered (7.0 U1 and later) — one volume per vmdk either
/// way. A pod added after the hand-over is registered by the driver and adopted by volmig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_inline_pod_volumes_are_registered_and_published_before_the_driver_leads() {
    // 7.0 U1 and later: the only releases volmig hands the Lease over on.
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3).vcenter_version("7.0.3")).await;
    let cluster = cluster_for_hold().await;
    let pv_path = sim.vmdk_path("kubevols", 1);
    let inline_only = sim.vmdk_path("kubevols", 2);
    let ds = sim.datastores[0].inventory_path.clone();
    let alias = format!("[{ds}] kubevols//disk-0001.vmdk");
    cluster.create_pv("pv-1", &pv_path).await;
    cluster.create_pod("web", &inline_only).await;
    cluster.create_pod("alias", &alias).await;

    let daemon = Daemon::spawn(
        &cluster,
        &sim,
        "volmig-inline-hold",
        &["--hold-driver-syncer", "--full-sync-interval", "2s"],
    );
    daemon.wait_ready().await;
    // The driver is installed once volmig holds its syncer's Lease (the runbook's order);
    // started together, either may take the free Lease first.
    wait_for(
        Duration::from_secs(30),
        "volmig holds the Lease",
        || async {
            daemon
                .metric("volmig_registrar_mode{mode=\"hold\"}")
                .await
                .filter(|v| *v == 1.0)
        },
    )
    .await;
    let driver = CsiDriverDouble::start(&cluster, &sim, DriverOptions::default()).await;
    wait_for(
        Duration::from_secs(90),
        "the hand-over (the driver leads)",
        || async { driver.is_leading().then_some(()) },
    )
    .await;
    // The pod informer's initial list delivers both pods as adds.
    wait_for(Duration::from_secs(30), "the driver's podAdded", || async {
        (driver.pod_adds() >= 2).then_some(())
    })
    .await;
    let after_sync = driver.full_syncs();
    wait_for(Duration::from_secs(30), "a driver full sync", || async {
        (driver.full_syncs() > after_sync).then_some(())
    })
    .await;
    // Its first term starts cold: what it reaches before its cache lists is registered
    // again and answered AlreadyRegistered, never a second volume (checked below).
    eprintln!(
        "figure: the driver's cold first term sent {} registrations",
        driver.creates()
    );
    let id_of = |raw: String| {
        let cluster = &cluster;
        async move { cluster.migration(&raw).await.as_ref().and_then(volume_id) }
    };
    let pv_id = id_of(pv_path.clone())
        .await
        .expect("the PV's vmdk Registered");
    let inline_id = id_of(inline_only.clone())
        .await
        .expect("the pod's vmdk Registered");
    assert_eq!(
        cns_ids(&sim, &pv_path).await,
        std::slice::from_ref(&pv_id),
        "one volume"
    );
    assert_eq!(
        cns_ids(&sim, &inline_only).await,
        std::slice::from_ref(&inline_id)
    );
    assert_eq!(driver.attach_lookup(&alias), Some(pv_id));
    assert_eq!(driver.attach_lookup(&inline_only), Some(inline_id));

    // After the hand-over volmig follows: a new pod's vmdk is the driver's to register.
    let late = sim.vmdk_path("kubevols", 3);
    cluster.create_pod("late", &late).await;
    let late_id = wait_for(Duration::from_secs(60), "the late pod adopted", || async {
        let vm = cluster.migration(&late).await?;
        (phase(&vm) == Some(Phase::Registered)).then(|| volume_id(&vm))?
    })
    .await;
    assert_eq!(cns_ids(&sim, &late).await, std::slice::from_ref(&late_id));
    assert_eq!(driver.cache_snapshot().get(&late), Some(&late_id));
    let creates: Vec<String> = sim.creates().await.into_iter().map(|c| c.name).collect();
    assert_eq!(
        creates.iter().filter(|n| n.starts_with("volmig-")).count(),
        2,
        "volmig registered the two held vmdks only: {creates:?}"
    );
}

/// The driver's stale clean-up (`cleanupStaleCRDInstances`, migration.go:588-667) deletes
/// every object whose name is not a CNS volume ID of its cluster and whose path no PV spells.
/// A spelling only pods use — an alias of a PV's vmdk, or an inline-only vmdk — must ride
/// on the object named by the volume ID, so that two clean-up passes delete none of
/// volmig's objects and the driver's cache never loses a spelling in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_only_spellings_survive_the_drivers_stale_clean_up() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let pv_path = sim.vmdk_path("kubevols", 1);
    let inline_only = sim.vmdk_path("kubevols", 2);
    let ds = sim.datastores[0].inventory_path.clone();
    let alias = format!("[{ds}] kubevols//disk-0001.vmdk");
    cluster.create_pv("pv-1", &pv_path).await;
    // The pods come later (creation times count in whole seconds): the PV's spelling is
    // the oldest.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    cluster.create_pod("alias", &alias).await;
    cluster.create_pod("web", &inline_only).await;
    // The driver's cache and clean-up only: no driver syncer leads, volmig registers.
    let driver = CsiDriverDouble::start(
        &cluster,
        &sim,
        DriverOptions {
            lead: false,
            cleanup_interval: None,
            ..DriverOptions::default()
        },
    )
    .await;
    let daemon = Daemon::spawn(&cluster, &sim, "volmig-cleanup", &[]);
    daemon.wait_ready().await;
    let spellings = [pv_path.clone(), alias.clone(), inline_only.clone()];
    wait_for(
        Duration::from_secs(60),
        "every spelling published",
        || async {
            let cache = driver.cache_snapshot();
            spellings
                .iter()
                .all(|raw| cache.contains_key(raw))
                .then_some(())
        },
    )
    .await;
    let mut deleted = Vec::new();
    for _ in 0..2 {
        deleted.extend(driver.run_cleanup().await.expect("a clean-up pass"));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let cache = driver.cache_snapshot();
    let missing: Vec<&String> = spellings
        .iter()
        .filter(|raw| !cache.contains_key(*raw))
        .collect();
    assert!(
        deleted.is_empty(),
        "the clean-up deleted {deleted:?}; objects: {:?}",
        driver_objects(&cluster).await
    );
    assert!(missing.is_empty(), "missing from the cache: {missing:?}");
    assert_eq!(cns_ids(&sim, &pv_path).await.len(), 1);
}

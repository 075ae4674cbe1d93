//! End-to-end tests beside the vSphere CSI driver (docs/design.md §8): volmig fills the
//! driver's `CnsVSphereVolumeMigration` cache for every raw spelling, adopts what the
//! driver registered, and protects the disks. A test-side *driver informer* builds the
//! driver's cache the way the driver does: from ADDED and DELETED watch events only (raw
//! `spec.volumepath` → `spec.volumeid`; a change in place is never seen), so volmig must
//! never change an object in place. The driver's registration on a miss comes from the
//! CSI driver double (tests/support/csi_driver/, not leading, so volmig owns registration),
//! placed at chosen moments: random CNS name, then its object named by the ID. Real `volmig` binary, the API
//! test server and the simulator harness.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/csi_driver/mod.rs"]
mod csi_driver;
#[path = "support/e2e.rs"]
mod e2e;
#[path = "e2e_driver_cache/informer.rs"]
mod informer;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeMap;
use std::time::Duration;

use csi_driver::{CsiDriverDouble, DriverOptions};
use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use informer::DriverInformer;
use kube::api::{Api, ListParams, PostParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::volume_migration::Phase;

/// The driver's cache as the driver builds it: raw volume path → volume ID.
async fn driver_cache(cluster: &Cluster) -> BTreeMap<String, (String, bool)> {
    let api: Api<CnsVSphereVolumeMigration> = Api::all(cluster.client.clone());
    api.list(&ListParams::default())
        .await
        .expect("list the driver's objects")
        .items
        .into_iter()
        .map(|o| {
            (
                o.spec.volumepath,
                (o.spec.volumeid, o.spec.protectvolumefromvmdelete),
            )
        })
        .collect()
}

fn canonical(raw: &str) -> String {
    VolumePath::parse(raw).unwrap().canonical()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_raw_spelling_hits_the_drivers_cache_with_the_registered_id() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3).vcenter_version("7.0.3")).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let informer = DriverInformer::start(&cluster).await;
    let mut raws = BTreeMap::new();
    for n in 1..=3 {
        let raw = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("pv-{n}"), &raw).await;
        raws.insert(format!("pv-{n}"), raw);
    }
    let _daemon = Daemon::spawn(&cluster, &sim, "publisher", &[]);
    // A second PV spells the first vmdk differently (inventory path, doubled slash).
    let ds = &sim.datastores[0];
    let alias = format!("[{}] kubevols//disk-0001.vmdk", ds.inventory_path);
    cluster.create_pv("pv-1-alias", &alias).await;
    raws.insert("pv-1-alias".into(), alias.clone());

    let cache = wait_for(
        Duration::from_secs(120),
        "every spelling cached",
        || async {
            let cache = driver_cache(&cluster).await;
            raws.values()
                .all(|raw| cache.get(raw).is_some_and(|(_, protected)| *protected))
                .then_some(cache)
        },
    )
    .await;
    for (pv, raw) in &raws {
        let (id, _) = &cache[raw];
        let vm = cluster
            .migration(&canonical(raw))
            .await
            .expect("VolumeMigration");
        assert_eq!(phase(&vm), Some(Phase::Registered), "{pv}");
        assert_eq!(
            volume_id(&vm).as_ref(),
            Some(id),
            "{pv}: cache and status agree"
        );
        let volumes = sim.volumes_for(&canonical(raw)).await;
        assert_eq!(volumes.len(), 1, "{pv}: one CNS volume");
        assert_eq!(&volumes[0].id, id, "{pv}: the cached ID is the CNS volume");
    }
    assert_eq!(cache.len(), 4, "three vmdks, one alias: {cache:?}");
    let alias_id = &cache[&alias].0;
    assert_eq!(
        alias_id, &cache[&raws["pv-1"]].0,
        "the alias maps to the same ID"
    );
    // On 7.0.3 volmig sets keepAfterDeleteVm itself.
    let flagged = sim.vslm_objects().await;
    for (id, _) in cache.values() {
        assert!(
            flagged
                .iter()
                .any(|o| &o.id == id && o.keep_after_delete_vm),
            "{id} keeps its disk when the VM is deleted: {flagged:?}"
        );
    }
    informer.assert_every_pv_hits(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drivers_registration_is_adopted_never_duplicated_or_deleted() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let informer = DriverInformer::start(&cluster).await;
    // The driver, not leading: its registrations are placed by the test.
    let driver = CsiDriverDouble::start(
        &cluster,
        &sim,
        DriverOptions {
            lead: false,
            ..DriverOptions::default()
        },
    )
    .await;

    // Ordering 1: the driver registered before volmig ever ran.
    let before = sim.vmdk_path("kubevols", 1);
    let drivers_before = driver.register_on_miss(&before).await;
    cluster.create_pv("pv-1", &before).await;
    sim.reset_stats().await;
    let _daemon = Daemon::spawn(&cluster, &sim, "adopter", &[]);

    // Ordering 2: the driver registers while volmig runs, right as the PV appears.
    let racing = sim.vmdk_path("kubevols", 2);
    cluster.create_pv("pv-2", &racing).await;
    let drivers_racing = driver.register_on_miss(&racing).await;

    // Ordering 3: volmig alone (the driver hits the cache volmig publishes).
    let alone = sim.vmdk_path("kubevols", 3);
    cluster.create_pv("pv-3", &alone).await;

    let expect = [
        (before.clone(), Some(drivers_before.clone())),
        (racing.clone(), Some(drivers_racing.clone())),
        (alone.clone(), None),
    ];
    wait_for(
        Duration::from_secs(120),
        "statuses hold the driver's IDs",
        || async {
            for (raw, driver_id) in &expect {
                let vm = cluster.migration(&canonical(raw)).await?;
                let id = volume_id(&vm)?;
                if phase(&vm) != Some(Phase::Registered)
                    || driver_id.as_ref().is_some_and(|d| *d != id)
                {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let stats = sim.stats().await;
    assert_eq!(
        stats.calls("CnsDeleteVolume"),
        0,
        "nothing is ever unregistered"
    );
    let vm = cluster.migration(&canonical(&before)).await.unwrap();
    assert_eq!(
        sim.volumes_for(&canonical(&before)).await.len(),
        1,
        "the driver's earlier registration was adopted, not duplicated"
    );
    assert_eq!(volume_id(&vm), Some(drivers_before));
    // The race may have produced a second volume: then it is listed, never deleted.
    let racing_volumes = sim.volumes_for(&canonical(&racing)).await;
    assert!(racing_volumes.len() <= 2, "{racing_volumes:?}");
    if racing_volumes.len() == 2 {
        let other = racing_volumes
            .iter()
            .find(|v| v.id != drivers_racing)
            .unwrap()
            .id
            .clone();
        wait_for(
            Duration::from_secs(60),
            "the race's duplicate listed",
            || async {
                let vm = cluster.migration(&canonical(&racing)).await?;
                let dups = vm.status?.duplicate_volume_ids?;
                dups.contains(&other).then_some(())
            },
        )
        .await;
    }
    assert_eq!(sim.volumes_for(&canonical(&alone)).await.len(), 1);
    // The driver's cache covers every PV with the status ID.
    let cache = driver_cache(&cluster).await;
    for raw in [&before, &racing, &alone] {
        let vm = cluster.migration(&canonical(raw)).await.unwrap();
        assert_eq!(
            cache.get(raw.as_str()).map(|(id, _)| id.clone()),
            volume_id(&vm),
            "{raw}"
        );
    }
    informer.assert_every_pv_hits(&cluster).await;
}

/// Create-spec parity through the real binary: on vCenter 8.0.3 registration itself keeps
/// the disk (no VSLM call), and a storage policy named in the VolumeMigration's spec is
/// resolved through PBM and set as the profile; the container cluster is the driver's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_803_no_vslm_call_and_the_spec_storage_policy_is_the_profile() {
    const POLICY: &str = "vSAN Default Storage Policy";
    const POLICY_ID: &str = "aa6d5a82-1c88-45da-85d3-3d74b91a5bad";
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2).vcenter_version("8.0.3")).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let informer = DriverInformer::start(&cluster).await;
    let with_policy = sim.vmdk_path("kubevols", 1);
    let mut vm = volmig::k8s::migrations::new_migration(&VolumePath::parse(&with_policy).unwrap());
    vm.spec.storage_policy_name = Some(POLICY.into());
    cluster
        .migrations()
        .create(&PostParams::default(), &vm)
        .await
        .expect("a VolumeMigration that names a storage policy");
    cluster.create_pv("pv-1", &with_policy).await;
    let plain = sim.vmdk_path("kubevols", 2);
    cluster.create_pv("pv-2", &plain).await;
    let _daemon = Daemon::spawn(&cluster, &sim, "parity", &[]);

    let cache = wait_for(
        Duration::from_secs(120),
        "both published, protected",
        || async {
            let cache = driver_cache(&cluster).await;
            [&with_policy, &plain]
                .iter()
                .all(|raw| cache.get(raw.as_str()).is_some_and(|(_, p)| *p))
                .then_some(cache)
        },
    )
    .await;
    let stats = sim.stats().await;
    let vslm_calls: u64 = stats
        .calls
        .iter()
        .filter(|(method, _)| method.starts_with("Vslm"))
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(
        vslm_calls, 0,
        "8.0.3 protects on registration: {:?}",
        stats.calls
    );
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 2, "{creates:?}");
    let by_file = |raw: &str| {
        let file = raw.split_once("] ").unwrap().1.to_owned();
        creates
            .iter()
            .find(|c| c.backing_disk_url_path.contains(&file))
            .unwrap_or_else(|| panic!("no create for {raw}: {creates:?}"))
            .clone()
    };
    assert_eq!(by_file(&with_policy).profile_ids, [POLICY_ID]);
    assert!(by_file(&plain).profile_ids.is_empty());
    for create in &creates {
        let cc = create.container_cluster.as_ref().expect("containerCluster");
        assert_eq!(cc.cluster_flavor, "VANILLA");
        assert_eq!(create.container_cluster_array.len(), 1);
    }
    for raw in [&with_policy, &plain] {
        let vm = cluster.migration(&canonical(raw)).await.unwrap();
        assert_eq!(volume_id(&vm), Some(cache[raw.as_str()].0.clone()));
    }
    informer.assert_every_pv_hits(&cluster).await;
}

/// volmig registered and published first; then the driver registers the same vmdk anyway
/// (the residual race once CSI migration is on). The driver's ID wins: the status takes it,
/// volmig's ID is listed as a duplicate (never unregistered), and the driver's cache ends
/// with one object for the path, holding the driver's ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_driver_registers_after_volmig_its_id_wins_and_one_object_remains() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let informer = DriverInformer::start(&cluster).await;
    // The driver, not leading: its registrations are placed by the test.
    let driver = CsiDriverDouble::start(
        &cluster,
        &sim,
        DriverOptions {
            lead: false,
            ..DriverOptions::default()
        },
    )
    .await;
    let raw = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("pv-1", &raw).await;
    let _daemon = Daemon::spawn(&cluster, &sim, "first", &["--full-sync-interval", "2s"]);
    let volmigs = wait_for(Duration::from_secs(60), "volmig published", || async {
        driver_cache(&cluster)
            .await
            .get(&raw)
            .map(|(id, _)| id.clone())
    })
    .await;

    let drivers = driver.register_on_miss(&raw).await;
    wait_for(Duration::from_secs(60), "the driver's ID wins", || async {
        let vm = cluster.migration(&canonical(&raw)).await?;
        let dups = vm.status.clone()?.duplicate_volume_ids.unwrap_or_default();
        let objects: Vec<String> = Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|o| o.spec.volumepath == raw)
            .map(|o| o.spec.volumeid)
            .collect();
        (volume_id(&vm).as_ref() == Some(&drivers)
            && dups.contains(&volmigs)
            && objects == [drivers.clone()])
        .then_some(())
    })
    .await;
    assert_eq!(
        sim.stats().await.calls("CnsDeleteVolume"),
        0,
        "nothing unregistered"
    );
    assert_eq!(
        sim.volumes_for(&canonical(&raw)).await.len(),
        2,
        "both volumes kept"
    );
    let warned = cluster.events("DuplicateVolumes").await;
    assert!(
        warned
            .iter()
            .any(|(_, note)| note.contains(&drivers) && note.contains(&volmigs)),
        "{warned:?}"
    );
    informer.assert_every_pv_hits(&cluster).await;
}

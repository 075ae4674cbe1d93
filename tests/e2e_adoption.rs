//! End-to-end acceptance tests of what volmig adopts (docs/design.md §4.3, §8.2), with the
//! real `volmig` binary, the API test server and the govmomi simulator harness:
//!
//! - an ID in the CSI driver's cache is adopted only after CNS says it backs this vmdk:
//!   a hand-made (or stale) driver object mapping disk P to disk Q's volume never moves
//!   P's status to Q's ID, neither at P's first registration nor in later full syncs;
//! - a disk the CSI driver registered under a random `pvc-…` name, with no driver object,
//!   is adopted (its ID in the status, one CNS volume for the disk): where CNS answers
//!   `CnsAlreadyRegisteredFault` (7.0.3, 8.0.3) through that fault, on older vCenters (the
//!   default profile 6.5, and 7.0.0) through volmig's look-up by backing disk, without a
//!   create.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::{Duration, Instant};

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use kube::api::{Api, ListParams, PostParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::driver_cache::{CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec};
use volmig::volume_migration::Phase;

const PASSES_OK: &str = "volmig_full_sync_passes_total{result=\"ok\"}";
/// Counts the full sync's `AdoptDriverId` (and `Duplicates`) repairs.
const ACTION_DUPLICATE: &str = "volmig_full_sync_actions_total{action=\"duplicate\"}";
/// Counts the full sync's `RepairVolumeId` (and `ReRegister*`) repairs.
const ACTION_REREGISTER: &str = "volmig_full_sync_actions_total{action=\"reregister\"}";
/// The log line of the registrar refusing a driver-cache ID of another disk
/// (`src/registrar/operations.rs`).
const REFUSED: &str = "CNS says it backs another disk";

fn canonical(raw: &str) -> String {
    VolumePath::parse(raw).expect("valid path").canonical()
}

/// (phase, volume ID) of the VolumeMigration of `raw`.
async fn status_of(cluster: &Cluster, raw: &str) -> (Option<Phase>, Option<String>) {
    match cluster.migration(&canonical(raw)).await {
        Some(vm) => (phase(&vm), volume_id(&vm)),
        None => (None, None),
    }
}

/// Waits until `raw` is Registered; returns its ID.
async fn registered(cluster: &Cluster, raw: &str, within: Duration) -> String {
    wait_for(within, &format!("{raw} Registered"), || async {
        match status_of(cluster, raw).await {
            (Some(Phase::Registered), Some(id)) => Some(id),
            _ => None,
        }
    })
    .await
}

async fn metric(daemon: &Daemon, sample: &str) -> f64 {
    daemon.metric(sample).await.unwrap_or(0.0)
}

/// The driver's objects: name → (raw path, ID, labelled as volmig's).
async fn driver_objects(cluster: &Cluster) -> Vec<(String, String, String, bool)> {
    Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .expect("list the driver's objects")
        .items
        .into_iter()
        .map(|o| {
            let ours = o
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/managed-by"))
                .is_some_and(|v| v == "volmig");
            (
                o.metadata.name.unwrap_or_default(),
                o.spec.volumepath,
                o.spec.volumeid,
                ours,
            )
        })
        .collect()
}

/// Creates an object that looks like the driver's (no volmig label) mapping `raw` to `id`.
async fn hand_made_object(cluster: &Cluster, name: &str, raw: &str, id: &str) {
    let object = CnsVSphereVolumeMigration::new(
        name,
        CnsVSphereVolumeMigrationSpec {
            volumepath: raw.to_owned(),
            volumeid: id.to_owned(),
            protectvolumefromvmdelete: false,
        },
    );
    Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create the hand-made object {name}: {e}"));
}

/// docs/design.md §4.3, §8.2: "an ID is adopted only when CNS says it backs this vmdk".
/// P and Q are registered by volmig (its own creates). Then an object without volmig's
/// label (it looks like the driver's) maps P's raw path to Q's volume ID, and another maps
/// a third disk R — whose PV appears only afterwards — to Q's ID too. Sampled every 200 ms
/// over 5 complete full-sync passes (`volmig_full_sync_passes_total{result="ok"}`) after
/// the objects were created: P stays Registered with its own ID (never Q's), R is
/// registered with a volume of its own (never Q's), the full sync switches no ID (no
/// `duplicate`/`reregister` action, no `DuplicateVolumes`/`VolumeIdRepaired` Event), CNS
/// got exactly one create per disk, and the hand-made objects are left alone. Why Q's ID
/// was refused is logged (a WARN line naming the ID and the disk it backs), published as a
/// `DriverIdOfAnotherDisk` Warning Event on P's VolumeMigration and counted as the
/// `foreign_driver_id` full-sync action.
///
/// It fails when volmig adopts a driver-cache ID without checking its backing disk: found
/// so on 2026-12-07 with this tree's build. The registrar's first look checks the disk
/// (R got its own volume and the WARN line), but the full sync's `Repair::AdoptDriverId`
/// (`plan.rs`: `live_driver_id` checks only that the ID exists in CNS;
/// `Registrar::adopt_driver_id` does not check it either) moves P's and R's status to Q's
/// ID in one pass, and `Repair::RepairVolumeId` moves them back in the next ("that CNS
/// volume backs …/disk-0002.vmdk; restored …"): the IDs flip every pass, with a
/// `DuplicateVolumes` and a `VolumeIdRepaired` Warning each time. Checked against a build
/// with `AdoptDriverId` planned only when the driver's ID does not back another disk
/// (`disk_of` in `full_sync::plan`): passes in about 20 s; with the registrar's
/// backing-path check removed as well: fails at once on R.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_cache_id_is_adopted_only_when_cns_says_it_backs_this_vmdk() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let (p, q, r) = (
        sim.vmdk_path("kubevols", 1),
        sim.vmdk_path("kubevols", 2),
        sim.vmdk_path("kubevols", 3),
    );
    cluster.create_pv("pv-p", &p).await;
    cluster.create_pv("pv-q", &q).await;
    let daemon = Daemon::spawn(&cluster, &sim, "adopter", &[]);
    let p_id = registered(&cluster, &p, Duration::from_secs(60)).await;
    let q_id = registered(&cluster, &q, Duration::from_secs(60)).await;
    assert_ne!(p_id, q_id);
    // volmig published both mappings: the index that adoption and full sync read is live.
    wait_for(
        Duration::from_secs(30),
        "both mappings published",
        || async {
            let objects = driver_objects(&cluster).await;
            [(&p, &p_id), (&q, &q_id)]
                .iter()
                .all(|(raw, id)| {
                    objects
                        .iter()
                        .any(|(_, path, oid, ours)| path == *raw && oid == *id && *ours)
                })
                .then_some(())
        },
    )
    .await;

    hand_made_object(&cluster, "stale-p-to-q", &p, &q_id).await;
    hand_made_object(&cluster, "stale-r-to-q", &r, &q_id).await;
    cluster.create_pv("pv-r", &r).await;
    let adopt_before = metric(&daemon, ACTION_DUPLICATE).await;
    let repair_before = metric(&daemon, ACTION_REREGISTER).await;
    // The pass running now may have started before the objects were seen: count 5
    // passes that started after them.
    let start = metric(&daemon, PASSES_OK).await + 1.0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut samples = 0;
    let mut r_id = None;
    loop {
        let passes = metric(&daemon, PASSES_OK).await;
        let (p_phase, p_now) = status_of(&cluster, &p).await;
        assert_eq!(p_phase, Some(Phase::Registered), "after {passes} passes");
        assert_eq!(
            p_now.as_deref(),
            Some(p_id.as_str()),
            "P's ID never changes (Q's is {q_id}), after {passes} passes"
        );
        let (r_phase, r_now) = status_of(&cluster, &r).await;
        assert_ne!(
            r_now.as_deref(),
            Some(q_id.as_str()),
            "R never takes Q's ID"
        );
        if r_phase == Some(Phase::Registered) {
            r_id = r_now;
        }
        samples += 1;
        if passes >= start + 5.0 && r_id.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "5 full-sync passes and R registered within 60 s (passes {passes}, from {start}; R {r_phase:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r_id = r_id.unwrap();
    assert!(samples >= 10, "sampled {samples} times");
    assert_eq!(
        metric(&daemon, ACTION_DUPLICATE).await - adopt_before,
        0.0,
        "the full sync never adopted the hand-made ID"
    );
    for reason in ["DuplicateVolumes", "VolumeIdRepaired"] {
        let events = cluster.events(reason).await;
        assert!(events.is_empty(), "no ID switched: {reason} {events:?}");
    }
    assert_eq!(
        metric(&daemon, ACTION_REREGISTER).await - repair_before,
        0.0,
        "nothing to repair: no ID ever moved"
    );
    let log = daemon.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains(REFUSED) && l.contains(&q_id)),
        "the refusal of Q's ID for R is logged with the ID"
    );
    let refused = cluster.events("DriverIdOfAnotherDisk").await;
    assert!(
        refused
            .iter()
            .any(|(_, note)| note.contains(&q_id) && note.contains("not adopted")),
        "a Warning Event names the refused ID: {refused:?}"
    );
    assert!(
        metric(
            &daemon,
            "volmig_full_sync_actions_total{action=\"foreign_driver_id\"}"
        )
        .await
            >= 1.0,
        "the refusal is counted"
    );

    // One CNS volume per disk, each the one its status holds; one create per disk.
    for (raw, id) in [(&p, &p_id), (&q, &q_id), (&r, &r_id)] {
        let volumes = sim.volumes_for(&canonical(raw)).await;
        assert_eq!(volumes.len(), 1, "{raw}: {volumes:?}");
        assert_eq!(&volumes[0].id, id, "{raw}");
    }
    let creates = sim.creates().await;
    assert_eq!(
        creates.len(),
        3,
        "one create per disk, 0 extra: {creates:?}"
    );
    // The driver's objects stay as they were (volmig deletes a driver's object only with
    // the registration of its ID).
    let objects = driver_objects(&cluster).await;
    for name in ["stale-p-to-q", "stale-r-to-q"] {
        assert!(
            objects
                .iter()
                .any(|(n, _, id, ours)| n == name && *id == q_id && !ours),
            "{name} left alone: {objects:?}"
        );
    }
}

/// A `pvc-<uuid>` name, as the CSI driver gives the volumes it registers.
fn random_pvc_name() -> String {
    let hex = format!("{:032x}", rand::random::<u128>());
    format!(
        "pvc-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// docs/design.md §4.3: a disk registered in CNS before volmig started, under a random
/// `pvc-…` name (as the CSI driver does) with volmig's cluster ID and no driver object,
/// is adopted: the status holds that ID and the disk ends with one CNS volume.
///
/// The harness honours `CnsQueryFilter.names` as vCenter does (`-cns-query vcenter`, the
/// default: `candidateIDs`/`query` in tests/support/vcsim/cns.go), so volmig's look-up by
/// its own name (`volmig-<sha256>`) does not return the `pvc-…` volume: adoption cannot
/// work by name by accident. What finds it is CNS refusing volmig's create with
/// `CnsAlreadyRegisteredFault` carrying the existing ID (vSphere 7.0 Update 1 and later;
/// the harness answers so on 7.0.3 and 8.0.3), and on older releases (`refuses` false)
/// volmig's look-up by backing disk before the first create (the vmdk's datastore,
/// `CnsQueryFilter.datastores`, every page): there volmig sends no create at all.
///
/// If volmig created again instead of adopting the fault's ID, the disk would end with two
/// CNS volumes (the harness registers every create that CNS does not refuse) and the
/// status would hold the new one.
async fn pre_registered_disk_is_adopted(version: &str, refuses: bool) {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1).vcenter_version(version)).await;
    let cluster = Cluster::start().await;
    let raw = sim.vmdk_path("kubevols", 1);
    let name = random_pvc_name();
    let path = VolumePath::parse(&raw).unwrap();
    assert_ne!(name, path.cns_volume_name());
    let file = raw.split_once("] ").unwrap().1;
    let pre_id = sim
        .soap()
        .await
        .create_volume(
            &name,
            &sim.datacenter,
            &sim.datastores[0].name,
            file,
            "e2e-cluster",
        )
        .await;
    let before = sim.volumes().await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].name, name);
    sim.clear_creates().await;
    cluster.create_pv("pv-1", &raw).await;
    let daemon = Daemon::spawn(&cluster, &sim, "adopter", &[]);

    let id = registered(&cluster, &raw, Duration::from_secs(60)).await;
    // Two more full-sync passes: nothing creates a second volume later either.
    let passes = metric(&daemon, PASSES_OK).await;
    wait_for(Duration::from_secs(30), "two more full syncs", || async {
        (metric(&daemon, PASSES_OK).await >= passes + 2.0).then_some(())
    })
    .await;
    let creates = sim.creates().await;
    let volumes = sim.volumes().await;
    assert_eq!(
        id, pre_id,
        "the pre-registered volume is adopted; creates: {creates:?}"
    );
    assert_eq!(
        volumes.len(),
        1,
        "no create produced a second volume: {volumes:?}; creates: {creates:?}"
    );
    assert_eq!(volumes[0].id, pre_id);
    if !refuses {
        assert!(
            creates.is_empty(),
            "found by backing disk: no create; creates: {creates:?}"
        );
    }
    let (phase_now, id_now) = status_of(&cluster, &raw).await;
    assert_eq!(phase_now, Some(Phase::Registered));
    assert_eq!(id_now.as_deref(), Some(pre_id.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_pre_registered_under_a_random_name_is_adopted_on_703() {
    pre_registered_disk_is_adopted("7.0.3", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_pre_registered_under_a_random_name_is_adopted_on_803() {
    pre_registered_disk_is_adopted("8.0.3", true).await;
}

/// The default profile (`6.5`, CNS before vSphere 7.0 Update 1: no
/// `CnsAlreadyRegisteredFault`, every create makes another volume). Failed before the
/// look-up by backing disk existed (2026-12-07): volmig's look-up by its own name found
/// nothing, its create succeeded, the status held volmig's new ID and the disk had two CNS
/// volumes (the full sync then listed the `pvc-…` one as a duplicate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_pre_registered_under_a_random_name_is_adopted_on_the_default_profile() {
    pre_registered_disk_is_adopted("6.5", false).await;
}

/// 7.0.0 (no `CnsAlreadyRegisteredFault` yet; volmig registers through `RegisterDisk`
/// first, docs/design.md §8.4): the look-up by backing disk adopts before any of that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_pre_registered_under_a_random_name_is_adopted_on_700() {
    pre_registered_disk_is_adopted("7.0.0", false).await;
}

//! Hostile Kubernetes objects: what the real `volmig` binary does with objects a user or
//! another tool got wrong, against the Kubernetes API test server (or
//! `VOLMIG_E2E_KUBECONFIG`) and the govmomi vCenter simulator. Each test is one row of the
//! outcome table in docs/security.md.

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
use std::time::Duration;

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use futures::StreamExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::{MAX_STATUS_PVS, Phase, VolumeMigration, VolumeMigrationSpec};

const CONVERGE: Duration = Duration::from_secs(120);

/// etcd's default request limit: an object larger than this cannot be stored.
const ETCD_LIMIT: usize = 1536 * 1024;

fn object_name(path: &str) -> String {
    VolumePath::parse(path).expect("valid").object_name()
}

async fn registered(cluster: &Cluster, path: &str) -> VolumeMigration {
    wait_for(CONVERGE, &format!("{path} Registered"), || async {
        cluster
            .migration(path)
            .await
            .filter(|vm| phase(vm) == Some(Phase::Registered) && volume_id(vm).is_some())
    })
    .await
}

/// Creates a VolumeMigration as a user would with `kubectl create` (admin client).
async fn create_by_hand(cluster: &Cluster, name: &str, volume_path: &str) {
    let vm = VolumeMigration::new(
        name,
        VolumeMigrationSpec {
            volume_path: volume_path.into(),
            storage_policy_name: None,
        },
    );
    cluster
        .migrations()
        .create(&PostParams::default(), &vm)
        .await
        .unwrap_or_else(|e| panic!("create VolumeMigration {name}: {e}"));
}

/// Edits `status.volumeID` by hand through the status subresource (admin client).
async fn edit_volume_id(cluster: &Cluster, name: &str, id: &str) {
    cluster
        .migrations()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"volumeID": id}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch status of {name}: {e}"));
}

/// Row: a VolumeMigration created by hand for a path no PV uses → never registered; after
/// two full syncs without a PV it is deleted like any unused object (docs/design.md §5.1,
/// §5.3), and nothing reaches CNS. One created under a name that is not its path's →
/// `NameCollision` (§2.6), never registered, never deleted by volmig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_made_migration_for_an_unused_path_is_never_registered() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    let unused = sim.vmdk_path("kubevols", 1);
    let squatted = sim.vmdk_path("kubevols", 2);
    create_by_hand(&cluster, &object_name(&unused), &unused).await;
    create_by_hand(&cluster, "my-own-name", &squatted).await;

    let daemon = Daemon::spawn(&cluster, &sim, "hand-made", &[]);
    daemon.wait_ready().await;
    // The squatter is reported, once, and left alone.
    let squatter = wait_for(CONVERGE, "NameCollision recorded", || async {
        cluster
            .migrations()
            .get_opt("my-own-name")
            .await
            .expect("get")
            .filter(|vm| {
                vm.status
                    .as_ref()
                    .and_then(|s| s.last_error.as_ref())
                    .is_some_and(|e| e.reason == "NameCollision")
            })
    })
    .await;
    assert_eq!(volume_id(&squatter), None);
    // The unused one goes after two passes (3 s interval), through its finalizer, without
    // an unregistration (it never held a volume).
    wait_for(CONVERGE, "the unused VolumeMigration deleted", || async {
        cluster.migration(&unused).await.is_none().then_some(())
    })
    .await;
    // Several more passes: nothing is created for either path.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        sim.volumes().await.is_empty(),
        "no CNS volume for unused paths"
    );
    assert!(sim.creates().await.is_empty(), "no create was even tried");
    assert!(
        cluster
            .migrations()
            .get_opt("my-own-name")
            .await
            .expect("get")
            .is_some(),
        "a user's object under a foreign name is not volmig's to delete"
    );
    assert!(cluster.migration(&unused).await.is_none(), "not recreated");
    assert!(cluster.events("Unregistered").await.is_empty());
}

/// Rows: `status.volumeID` edited by hand to (a) another path's CNS volume, (b) garbage →
/// the next full sync restores this path's volume found in CNS (by volmig's name / backing
/// path), with a Warning Event `VolumeIdRepaired` naming both IDs; no create, no
/// unregistration, the other path untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_edited_volume_id_is_repaired_from_cns() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    let mine = sim.vmdk_path("kubevols", 1);
    let other = sim.vmdk_path("kubevols", 2);
    cluster.create_pv("pv-mine", &mine).await;
    cluster.create_pv("pv-other", &other).await;
    let daemon = Daemon::spawn(&cluster, &sim, "edited-id", &[]);
    daemon.wait_ready().await;
    let my_id = volume_id(&registered(&cluster, &mine).await).unwrap();
    let other_id = volume_id(&registered(&cluster, &other).await).unwrap();
    assert_ne!(my_id, other_id);
    let creates = sim.creates().await.len();
    assert_eq!(creates, 2);
    let name = object_name(&mine);

    for (case, wrong) in [
        ("another path's volume", other_id.clone()),
        ("garbage", "00000000-not-a-volume-id".to_owned()),
    ] {
        edit_volume_id(&cluster, &name, &wrong).await;
        let repaired = wait_for(CONVERGE, &format!("{case}: ID restored"), || async {
            cluster
                .migration(&mine)
                .await
                .filter(|vm| volume_id(vm).as_deref() == Some(my_id.as_str()))
        })
        .await;
        assert_eq!(phase(&repaired), Some(Phase::Registered), "{case}");
        // The Event follows the status write.
        let what = format!("{case}: a VolumeIdRepaired Event naming {wrong} and {my_id}");
        wait_for(Duration::from_secs(30), &what, || async {
            let events = cluster.events("VolumeIdRepaired").await;
            events
                .iter()
                .any(|(obj, note)| *obj == name && note.contains(&wrong) && note.contains(&my_id))
                .then_some(())
        })
        .await;
    }
    // Protection of the restored volume is checked again by a later pass.
    wait_for(CONVERGE, "protectedFromVMDelete again", || async {
        cluster
            .migration(&mine)
            .await
            .filter(|vm| vm.status.as_ref().and_then(|s| s.protected_from_vm_delete) == Some(true))
    })
    .await;

    let volumes: BTreeSet<String> = sim.volumes().await.into_iter().map(|v| v.id).collect();
    assert_eq!(
        volumes,
        [my_id.clone(), other_id.clone()].into(),
        "no second volume, none unregistered"
    );
    assert_eq!(sim.creates().await.len(), creates, "no create");
    let other_vm = cluster.migration(&other).await.unwrap();
    assert_eq!(
        volume_id(&other_vm),
        Some(other_id),
        "the other path untouched"
    );
    assert!(cluster.events("Unregistered").await.is_empty());
    assert!(cluster.events("ReRegistered").await.is_empty());
}

/// Row: `spec.volumePath` edited → refused by the CRD's `self == oldSelf` rule (the API
/// test server evaluates exactly that rule); the mapping is unchanged.
/// `spec.storagePolicyName` stays editable and changes nothing of a registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_volume_path_edits_are_refused_by_the_crd() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    let path = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("pv-1", &path).await;
    let daemon = Daemon::spawn(&cluster, &sim, "spec-edit", &[]);
    daemon.wait_ready().await;
    let id = volume_id(&registered(&cluster, &path).await).unwrap();
    let name = object_name(&path);

    let patch = json!({"spec": {"volumePath": sim.vmdk_path("kubevols", 2)}}).to_string();
    let out = std::process::Command::new("/usr/bin/kubectl")
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("HOME", cluster.dir.path())
        .args([
            "patch",
            "volumemigration",
            &name,
            "--type=merge",
            "-p",
            &patch,
        ])
        .output()
        .expect("run kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the edit must be refused");
    assert!(
        stderr.contains("volumePath is immutable"),
        "kubectl says why: {stderr}"
    );
    // Same through the client (a controller or script would meet a 422).
    let err = cluster
        .migrations()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"volumePath": "[LocalDS_0] kubevols/x.vmdk"}})),
        )
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err}"
    );

    cluster.kubectl_ok(
        &[
            "patch",
            "volumemigration",
            &name,
            "--type=merge",
            "-p",
            r#"{"spec":{"storagePolicyName":"gold"}}"#,
        ],
        None,
    );
    tokio::time::sleep(Duration::from_secs(7)).await;
    let vm = cluster.migration(&path).await.unwrap();
    assert_eq!(vm.spec.volume_path, path);
    assert_eq!(volume_id(&vm), Some(id));
    assert_eq!(sim.volumes().await.len(), 1);
}

/// Rows: the longest legal PV name (253 characters) → registered and listed in full;
/// unicode in a path → registered like any other; a 10,000-character volumePath and every
/// malformed form → `InvalidVolumePath` Warning Event on the PV, no VolumeMigration, no
/// CNS call for it; the valid PVs beside them are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_names_unicode_and_malformed_paths() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    let ds = sim.datastores[0].name.clone();

    let long_name = format!("pv-{}", "n".repeat(250));
    assert_eq!(long_name.len(), 253);
    let plain = sim.vmdk_path("kubevols", 1);
    cluster.create_pv(&long_name, &plain).await;

    let unicode = format!("[{ds}] kubevols/données-ünïcode-日本語-💾.vmdk");
    sim.create_vmdk(&unicode).await;
    cluster.create_pv("pv-unicode", &unicode).await;

    let huge = format!("[{ds}] {}.vmdk", "d/".repeat(5000));
    assert!(huge.len() >= 10_000);
    let malformed: Vec<(&str, String)> = vec![
        ("too-long", huge),
        ("blank", "   ".into()),
        ("control-character", format!("[{ds}] kubevols/a\nb.vmdk")),
        ("nul", format!("[{ds}] kubevols/a\u{0}b.vmdk")),
        ("no-datastore", "kubevols/disk.vmdk".into()),
        ("unbalanced-open", format!("[{ds} kubevols/disk.vmdk")),
        ("unbalanced-close", format!("{ds}] kubevols/disk.vmdk")),
        ("nested-brackets", format!("[[{ds}]] kubevols/disk.vmdk")),
        ("empty-datastore", "[] kubevols/disk.vmdk".into()),
        ("slash-datastore", "[//] kubevols/disk.vmdk".into()),
        ("no-file", format!("[{ds}]")),
        ("blank-file", format!("[{ds}]    ")),
        (
            "parent-segment",
            format!("[{ds}] kubevols/../../etc/shadow.vmdk"),
        ),
        ("not-vmdk", format!("[{ds}] kubevols/disk.txt")),
    ];
    // A trailing slash is an empty segment, normalized away like `//`: the path is the
    // file's, which does not exist here → Failed DiskNotFound, never a registration.
    let trailing = format!("[{ds}] kubevols/absent.vmdk/");
    cluster.create_pv("pv-trailing-slash", &trailing).await;
    let mut created = Vec::new();
    for (name, path) in &malformed {
        let pv = format!("bad-{name}");
        cluster.create_pv(&pv, path).await;
        created.push(pv);
    }

    let daemon = Daemon::spawn(&cluster, &sim, "extreme", &[]);
    daemon.wait_ready().await;
    let vm = registered(&cluster, &plain).await;
    assert_eq!(
        vm.status
            .as_ref()
            .and_then(|s| s.persistent_volumes.clone()),
        Some(vec![long_name.clone()])
    );
    let vm = registered(&cluster, &unicode).await;
    let canonical = VolumePath::parse(&unicode).unwrap().canonical();
    assert_eq!(vm.spec.volume_path, canonical);
    assert_eq!(sim.volumes_for(&canonical).await.len(), 1);
    assert!(
        vm.metadata.name.as_ref().unwrap().is_ascii(),
        "object names stay DNS-1123"
    );

    let deadline = std::time::Instant::now() + CONVERGE;
    let events = loop {
        let events = cluster.events("InvalidVolumePath").await;
        let seen: BTreeSet<&str> = events.iter().map(|(pv, _)| pv.as_str()).collect();
        let missing: Vec<&String> = created
            .iter()
            .filter(|pv| !seen.contains(pv.as_str()))
            .collect();
        if missing.is_empty() {
            break events;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no InvalidVolumePath Event for {missing:?}; seen {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let too_long = events
        .iter()
        .find(|(pv, _)| pv == "bad-too-long")
        .map(|(_, note)| note.clone())
        .unwrap();
    assert!(
        too_long.len() < 200,
        "the note does not echo a 10k path: {too_long}"
    );
    // Only the two valid paths have objects and volumes.
    let paths: BTreeSet<String> = cluster
        .list_migrations()
        .await
        .into_iter()
        .map(|vm| vm.spec.volume_path)
        .collect();
    let absent = format!("[{ds}] kubevols/absent.vmdk");
    assert_eq!(VolumePath::parse(&trailing).unwrap().canonical(), absent);
    let vm = wait_for(CONVERGE, "trailing slash: Failed", || async {
        cluster
            .migration(&absent)
            .await
            .filter(|vm| phase(vm) == Some(Phase::Failed))
    })
    .await;
    let reason = vm.status.and_then(|s| s.last_error).map(|e| e.reason);
    assert_eq!(reason.as_deref(), Some("DiskNotFound"));
    assert_eq!(
        paths,
        [
            VolumePath::parse(&plain).unwrap().canonical(),
            canonical,
            absent
        ]
        .into()
    );
    assert_eq!(sim.volumes().await.len(), 2);
    assert_eq!(sim.creates().await.len(), 2);
}

/// Row: 10,000 PVs for one vmdk (names of 200 characters: 2 MB of names) → one
/// VolumeMigration, one CNS volume; `status.persistentVolumes` lists the first 1000 names
/// (sorted) and `status.persistentVolumeCount` says 10000, so the object stays far below
/// etcd's 1.5 MiB limit. Deleting PVs keeps the count right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_pvs_for_one_vmdk() {
    const N: usize = 10_000;
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    let path = sim.vmdk_path("kubevols", 1);
    let names: Vec<String> = (0..N)
        .map(|i| format!("pv-{i:05}-{}", "x".repeat(191)))
        .collect();
    assert_eq!(names[0].len(), 200);
    assert!(
        names.iter().map(|n| n.len() + 3).sum::<usize>() > ETCD_LIMIT,
        "the full list alone would not fit in etcd"
    );
    futures::stream::iter(names.iter())
        .for_each_concurrent(16, |name| cluster.create_pv(name, &path))
        .await;

    let daemon = Daemon::spawn(&cluster, &sim, "ten-thousand", &[]);
    daemon.wait_ready().await;
    let vm = wait_for(CONVERGE, "Registered with every PV counted", || async {
        cluster.migration(&path).await.filter(|vm| {
            phase(vm) == Some(Phase::Registered)
                && vm.status.as_ref().and_then(|s| s.persistent_volume_count) == Some(N as u64)
        })
    })
    .await;
    let status = vm.status.clone().unwrap();
    let listed = status.persistent_volumes.clone().unwrap();
    assert_eq!(listed.len(), MAX_STATUS_PVS);
    assert_eq!(
        listed[..],
        names[..MAX_STATUS_PVS],
        "the first names, sorted"
    );
    let size = serde_json::to_vec(&vm).unwrap().len();
    assert!(size < ETCD_LIMIT / 4, "object is {size} bytes");
    assert_eq!(sim.volumes().await.len(), 1, "one CNS volume");
    assert_eq!(sim.creates().await.len(), 1, "one create");
    assert_eq!(cluster.list_migrations().await.len(), 1);

    // A PV beyond the listed ones goes away: the count follows, the list stays.
    cluster.delete_pv(&names[N - 1]).await;
    let vm = wait_for(CONVERGE, "count 9999", || async {
        cluster.migration(&path).await.filter(|vm| {
            vm.status.as_ref().and_then(|s| s.persistent_volume_count) == Some(N as u64 - 1)
        })
    })
    .await;
    assert_eq!(
        vm.status.unwrap().persistent_volumes.unwrap()[..],
        names[..MAX_STATUS_PVS]
    );
    assert_eq!(
        volume_id(&cluster.migration(&path).await.unwrap()),
        status.volume_id
    );
}

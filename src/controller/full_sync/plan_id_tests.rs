//! Full-sync plans that decide which volume ID a path keeps: the CSI driver's cache, a
//! status ID that is garbage or belongs to another disk, and live IDs of unknown disks.

use super::*;

/// The CSI driver's own volume for path 1, ID `drv`: registered with a random name, so CNS
/// reports no backing path for it; created at `created` (seconds).
fn drivers_volume(created: i64) -> CnsVolume {
    CnsVolume {
        id: VolumeId("drv".into()),
        name: "pvc-random".into(),
        backing_path: None,
        created: Some(jiff::Timestamp::from_second(created).unwrap()),
        cluster_ids: vec![CLUSTER.into()],
    }
}

/// A pass over path 1 (PV `pv-1`) whose driver cache object holds `drv`.
fn run_with_drivers_id(migrations: &[MigrationRecord], volumes: &[CnsVolume]) -> PassPlan {
    let driver: HashMap<VolumePath, Vec<String>> = [(p(1), vec!["drv".to_owned()])].into();
    plan(&PassInputs {
        pvs: &pvs(&[(1, &["pv-1"])]),
        migrations,
        volumes,
        absent_before: &HashSet::new(),
        gc_orphans: false,
        cluster_id: CLUSTER,
        driver_ids: &driver,
        in_use: &HashSet::new(),
    })
}

#[test]
fn the_drivers_id_wins_over_the_status_and_the_other_is_a_duplicate() {
    let migrations = [migration(
        1,
        Some(Phase::Registered),
        Some("mine"),
        &["pv-1"],
    )];
    let volumes = [volume("mine", 1, 1), drivers_volume(2)];
    let out = run_with_drivers_id(&migrations, &volumes);
    assert_eq!(
        out.repairs,
        [
            Repair::AdoptDriverId {
                path: p(1),
                driver_id: "drv".into(),
                replaced: "mine".into()
            },
            Repair::Duplicates {
                name: p(1).object_name(),
                path: p(1),
                keep: "drv".into(),
                others: vec!["mine".into()],
            },
        ]
    );
    // A driver object whose volume is gone from CNS does not win.
    let out = run_with_drivers_id(&migrations, &[volume("mine", 1, 1)]);
    assert!(out.repairs.is_empty(), "{:?}", out.repairs);
}

/// A driver object (hand-made or stale) that maps path 1 to the volume of path 2: never
/// adopted, pass after pass; path 1 keeps its own ID (no flip back and forth), and the
/// object is reported.
#[test]
fn a_driver_id_of_another_disks_volume_is_never_adopted() {
    let driver: HashMap<VolumePath, Vec<String>> = [(p(1), vec!["two".to_owned()])].into();
    let migrations = [
        migration(1, Some(Phase::Registered), Some("one"), &["pv-1"]),
        migration(2, Some(Phase::Registered), Some("two"), &["pv-2"]),
    ];
    let volumes = [volume("one", 1, 1), volume("two", 2, 2)];
    let out = plan(&PassInputs {
        pvs: &pvs(&[(1, &["pv-1"]), (2, &["pv-2"])]),
        migrations: &migrations,
        volumes: &volumes,
        absent_before: &HashSet::new(),
        gc_orphans: false,
        cluster_id: CLUSTER,
        driver_ids: &driver,
        in_use: &HashSet::new(),
    });
    assert_eq!(
        out.repairs,
        [Repair::ForeignDriverId {
            path: p(1),
            driver_id: "two".into(),
            other_disk: p(2),
        }]
    );
}

#[test]
fn a_garbage_status_id_is_restored_from_cns_never_registered_again() {
    let out = run(
        &pvs(&[(1, &["pv-1"])]),
        &[migration(
            1,
            Some(Phase::Registered),
            Some("not-a-volume"),
            &["pv-1"],
        )],
        &[volume("v1", 1, 1)],
        &HashSet::new(),
    );
    assert_eq!(
        out.repairs,
        [Repair::RepairVolumeId {
            name: p(1).object_name(),
            path: p(1),
            wrong: "not-a-volume".into(),
            why: WrongId::NotInCns,
            right: "v1".into(),
            version: Some("7".into()),
        }]
    );
}

#[test]
fn another_disks_id_in_the_status_is_replaced_by_the_paths_own_volume() {
    let pvs = pvs(&[(1, &["pv-1"]), (2, &["pv-2"])]);
    let migrations = [
        migration(1, Some(Phase::Registered), Some("v2"), &["pv-1"]),
        migration(2, Some(Phase::Registered), Some("v2"), &["pv-2"]),
    ];
    let volumes = [volume("v1", 1, 1), volume("v2", 2, 2)];
    let out = run(&pvs, &migrations, &volumes, &HashSet::new());
    assert_eq!(
        out.repairs,
        [Repair::RepairVolumeId {
            name: p(1).object_name(),
            path: p(1),
            wrong: "v2".into(),
            why: WrongId::OtherDisk(p(2)),
            right: "v1".into(),
            version: Some("7".into()),
        }],
        "path 2 (the owner of v2) is left alone"
    );
    assert_eq!(out.orphans, 0);
}

#[test]
fn another_disks_volume_found_by_volmig_name_only_is_still_foreign() {
    // Some vCenter versions report no backing path: the volume's volmig name says whose.
    let blind = |id: &str, n, created| CnsVolume {
        backing_path: None,
        ..volume(id, n, created)
    };
    let out = run(
        &pvs(&[(1, &["pv-1"]), (2, &["pv-2"])]),
        &[
            migration(1, Some(Phase::Registered), Some("v2"), &["pv-1"]),
            migration(2, Some(Phase::Registered), Some("v2"), &["pv-2"]),
        ],
        &[blind("v1", 1, 1), blind("v2", 2, 2)],
        &HashSet::new(),
    );
    assert!(
        matches!(&out.repairs[..], [Repair::RepairVolumeId { right, why: WrongId::OtherDisk(owner), .. }]
            if right == "v1" && *owner == p(2)),
        "{:?}",
        out.repairs
    );
}

#[test]
fn another_disks_id_without_a_volume_of_the_path_registers_the_path() {
    let out = run(
        &pvs(&[(1, &["pv-1"]), (2, &["pv-2"])]),
        &[
            migration(1, Some(Phase::Registered), Some("v2"), &["pv-1"]),
            migration(2, Some(Phase::Registered), Some("v2"), &["pv-2"]),
        ],
        &[volume("v2", 2, 2)],
        &HashSet::new(),
    );
    assert_eq!(
        out.repairs,
        [Repair::ReRegisterForeign {
            path: p(1),
            wrong: "v2".into(),
            owner: p(2),
        }]
    );
}

#[test]
fn a_repaired_id_is_the_one_duplicates_keep() {
    let out = run(
        &pvs(&[(1, &["pv-1"])]),
        &[migration(
            1,
            Some(Phase::Registered),
            Some("junk"),
            &["pv-1"],
        )],
        &[volume("newer", 1, 5), volume("older", 1, 1)],
        &HashSet::new(),
    );
    assert_eq!(
        out.repairs,
        [
            Repair::RepairVolumeId {
                name: p(1).object_name(),
                path: p(1),
                wrong: "junk".into(),
                why: WrongId::NotInCns,
                right: "older".into(),
                version: Some("7".into()),
            },
            Repair::Duplicates {
                name: p(1).object_name(),
                path: p(1),
                keep: "older".into(),
                others: vec!["newer".into()],
            },
        ]
    );
}

#[test]
fn the_drivers_live_id_is_the_one_restored() {
    let migrations = [migration(
        1,
        Some(Phase::Registered),
        Some("junk"),
        &["pv-1"],
    )];
    let volumes = [volume("mine", 1, 1), drivers_volume(9)];
    let out = run_with_drivers_id(&migrations, &volumes);
    assert!(
        matches!(&out.repairs[0], Repair::RepairVolumeId { right, .. } if right == "drv"),
        "{:?}",
        out.repairs
    );
    assert!(
        !out.repairs
            .iter()
            .any(|r| matches!(r, Repair::AdoptDriverId { .. })),
        "one repair of the ID, not two: {:?}",
        out.repairs
    );
}

#[test]
fn a_live_id_of_unknown_disk_is_given_the_benefit_of_the_doubt() {
    // No backing path, a name that is not volmig's, not in the driver's cache: whose it is
    // cannot be told, so nothing is rewritten.
    let unknown = CnsVolume {
        id: VolumeId("other".into()),
        name: "pvc-random".into(),
        backing_path: None,
        created: None,
        cluster_ids: vec![CLUSTER.into()],
    };
    let out = run(
        &pvs(&[(1, &["pv-1"])]),
        &[migration(
            1,
            Some(Phase::Registered),
            Some("other"),
            &["pv-1"],
        )],
        &[volume("v1", 1, 1), unknown],
        &HashSet::new(),
    );
    assert!(
        out.repairs
            .iter()
            .all(|r| !matches!(r, Repair::RepairVolumeId { .. } | Repair::ReRegister { .. })),
        "{:?}",
        out.repairs
    );
}

use super::*;
use crate::backend::VolumeId;

/// The cluster ID the passes of these tests run with.
const CLUSTER: &str = "this-cluster";

fn p(n: u32) -> VolumePath {
    VolumePath::parse(&format!("[ds] k/d{n}.vmdk")).unwrap()
}

fn migration(n: u32, phase: Option<Phase>, id: Option<&str>, pvs: &[&str]) -> MigrationRecord {
    MigrationRecord {
        name: p(n).object_name(),
        version: Some("7".into()),
        path: Some(p(n)),
        phase,
        volume_id: id.map(Into::into),
        pvs: pvs.iter().map(|s| s.to_string()).collect(),
        duplicates: vec![],
        protected: true,
        deleting: false,
    }
}

fn volume(id: &str, n: u32, created: i64) -> CnsVolume {
    CnsVolume {
        id: VolumeId(id.into()),
        name: p(n).cns_volume_name(),
        backing_path: Some(p(n)),
        created: Some(jiff::Timestamp::from_second(created).unwrap()),
        cluster_ids: vec![CLUSTER.into()],
    }
}

fn pvs(entries: &[(u32, &[&str])]) -> HashMap<VolumePath, Vec<String>> {
    entries
        .iter()
        .map(|(n, names)| (p(*n), names.iter().map(|s| s.to_string()).collect()))
        .collect()
}

fn run(
    pvs: &HashMap<VolumePath, Vec<String>>,
    migrations: &[MigrationRecord],
    volumes: &[CnsVolume],
    absent_before: &HashSet<VolumePath>,
) -> PassPlan {
    plan(&PassInputs {
        pvs,
        migrations,
        volumes,
        absent_before,
        gc_orphans: false,
        cluster_id: CLUSTER,
        driver_ids: &HashMap::new(),
        in_use: &HashSet::new(),
    })
}

#[test]
fn steady_state_has_nothing_to_do() {
    let pvs = pvs(&[(1, &["pv-1"]), (2, &["pv-2a", "pv-2b"])]);
    let migrations = [
        migration(1, Some(Phase::Registered), Some("v1"), &["pv-1"]),
        migration(2, Some(Phase::Registered), Some("v2"), &["pv-2a", "pv-2b"]),
    ];
    let volumes = [volume("v1", 1, 1), volume("v2", 2, 2)];
    let out = run(&pvs, &migrations, &volumes, &HashSet::new());
    assert_eq!(out, PassPlan::default());
}

#[test]
fn missing_migration_is_created() {
    let out = run(&pvs(&[(1, &["pv-1"])]), &[], &[], &HashSet::new());
    assert_eq!(out.repairs, [Repair::CreateMigration(p(1))]);
}

#[test]
fn unregistered_phases_are_retried() {
    for phase in [
        None,
        Some(Phase::Pending),
        Some(Phase::Failed),
        Some(Phase::Registering),
    ] {
        let out = run(
            &pvs(&[(1, &["pv-1"])]),
            &[migration(1, phase, None, &["pv-1"])],
            &[],
            &HashSet::new(),
        );
        assert_eq!(out.repairs, [Repair::Retry(p(1))], "{phase:?}");
    }
}

#[test]
fn registered_id_missing_in_cns_is_reregistered() {
    let out = run(
        &pvs(&[(1, &["pv-1"])]),
        &[migration(
            1,
            Some(Phase::Registered),
            Some("gone"),
            &["pv-1"],
        )],
        &[],
        &HashSet::new(),
    );
    assert_eq!(
        out.repairs,
        [Repair::ReRegister {
            path: p(1),
            missing_id: "gone".into()
        }]
    );
}

#[test]
fn stale_pv_list_is_rewritten() {
    let out = run(
        &pvs(&[(1, &["pv-1", "pv-9"])]),
        &[migration(1, Some(Phase::Registered), Some("v1"), &["pv-1"])],
        &[volume("v1", 1, 1)],
        &HashSet::new(),
    );
    assert_eq!(
        out.repairs,
        [Repair::SetPvs {
            name: p(1).object_name(),
            pvs: vec!["pv-1".into(), "pv-9".into()],
            version: Some("7".into()),
        }]
    );
}

#[test]
fn duplicates_keep_status_id_else_oldest() {
    let volumes = [
        volume("old", 1, 1),
        volume("mine", 1, 5),
        volume("new", 1, 9),
    ];
    let pvs = pvs(&[(1, &["pv-1"])]);
    let out = run(
        &pvs,
        &[migration(
            1,
            Some(Phase::Registered),
            Some("mine"),
            &["pv-1"],
        )],
        &volumes,
        &HashSet::new(),
    );
    assert_eq!(out.duplicate_disks, 1);
    assert_eq!(
        out.repairs,
        [Repair::Duplicates {
            name: p(1).object_name(),
            path: p(1),
            keep: "mine".into(),
            others: vec!["new".into(), "old".into()]
        }]
    );
    let out = run(
        &pvs,
        &[migration(1, None, None, &["pv-1"])],
        &volumes,
        &HashSet::new(),
    );
    assert!(out.repairs.contains(&Repair::Duplicates {
        name: p(1).object_name(),
        path: p(1),
        keep: "old".into(),
        others: vec!["mine".into(), "new".into()]
    }));
    // Already reported: no write.
    let mut m = migration(1, Some(Phase::Registered), Some("mine"), &["pv-1"]);
    m.duplicates = vec!["new".into(), "old".into()];
    let out = run(&pvs, &[m], &volumes, &HashSet::new());
    assert!(out.repairs.is_empty());
    assert_eq!(out.duplicate_disks, 1);
}

#[test]
fn deletion_needs_two_passes_without_pv() {
    let migrations = [migration(1, Some(Phase::Registered), Some("v1"), &["pv-1"])];
    let volumes = [volume("v1", 1, 1)];
    let first = run(&HashMap::new(), &migrations, &volumes, &HashSet::new());
    assert!(first.repairs.is_empty(), "{:?}", first.repairs);
    assert_eq!(first.absent, HashSet::from([p(1)]));
    let second = run(&HashMap::new(), &migrations, &volumes, &first.absent);
    assert_eq!(
        second.repairs,
        [Repair::DeleteMigration {
            name: p(1).object_name(),
            path: p(1)
        }]
    );
    // A PV that came back in between resets the count.
    let back = run(
        &pvs(&[(1, &["pv-1"])]),
        &migrations,
        &volumes,
        &HashSet::new(),
    );
    assert!(back.absent.is_empty());
}

#[test]
fn orphans_are_reported_and_collected_only_when_asked() {
    let volumes = [
        volume("orphan", 7, 1),
        CnsVolume {
            id: VolumeId("foreign".into()),
            name: "pvc-123".into(),
            backing_path: Some(p(8)),
            created: None,
            cluster_ids: vec![CLUSTER.into()],
        },
    ];
    let out = run(&HashMap::new(), &[], &volumes, &HashSet::new());
    assert_eq!(out.orphans, 1);
    assert_eq!(
        out.repairs,
        [Repair::Orphan {
            id: "orphan".into(),
            path: Some(p(7)),
            collect: false
        }]
    );
    let out = plan(&PassInputs {
        pvs: &HashMap::new(),
        migrations: &[],
        volumes: &volumes,
        absent_before: &HashSet::new(),
        gc_orphans: true,
        cluster_id: CLUSTER,
        driver_ids: &HashMap::new(),
        in_use: &HashSet::new(),
    });
    assert_eq!(
        out.repairs,
        [Repair::Orphan {
            id: "orphan".into(),
            path: Some(p(7)),
            collect: true
        }]
    );
}

#[test]
fn deleting_migrations_are_left_to_the_finalizer() {
    let mut m = migration(1, Some(Phase::Registered), Some("v1"), &[]);
    m.deleting = true;
    let out = run(
        &pvs(&[(1, &["pv-1"])]),
        &[m.clone()],
        &[volume("v1", 1, 1)],
        &HashSet::new(),
    );
    assert!(out.repairs.is_empty());
    let out = run(
        &HashMap::new(),
        &[m],
        &[volume("v1", 1, 1)],
        &HashSet::from([p(1)]),
    );
    assert!(out.repairs.is_empty());
}

#[test]
fn large_join_is_linear_and_quiet() {
    let n = 20_000;
    let pvs: HashMap<VolumePath, Vec<String>> =
        (0..n).map(|i| (p(i), vec![format!("pv-{i}")])).collect();
    let migrations: Vec<_> = (0..n)
        .map(|i| {
            let id = format!("v{i}");
            migration(i, Some(Phase::Registered), Some(&id), &[&format!("pv-{i}")])
        })
        .collect();
    let volumes: Vec<_> = (0..n).map(|i| volume(&format!("v{i}"), i, 1)).collect();
    let out = run(&pvs, &migrations, &volumes, &HashSet::new());
    assert!(out.repairs.is_empty());
}

#[test]
fn duplicates_without_backing_path_are_found_by_volmig_name() {
    // Measured with the simulator: when every first create reply is lost, two volumes
    // carry volmig's name for one disk and CNS reports no backing path for either.
    let blind = |id: &str, created| CnsVolume {
        backing_path: None,
        ..volume(id, 1, created)
    };
    let out = run(
        &pvs(&[(1, &["pv-1"])]),
        &[migration(
            1,
            Some(Phase::Registered),
            Some("second"),
            &["pv-1"],
        )],
        &[blind("first", 1), blind("second", 2)],
        &HashSet::new(),
    );
    assert_eq!(out.duplicate_disks, 1);
    assert_eq!(
        out.repairs,
        [Repair::Duplicates {
            name: p(1).object_name(),
            path: p(1),
            keep: "second".into(),
            others: vec!["first".into()],
        }],
        "the ID in the status is kept, the other is listed"
    );
}

#[test]
fn an_object_under_another_paths_name_is_never_acted_on() {
    let mut squatter = migration(2, Some(Phase::Registered), Some("v2"), &[]);
    squatter.path = None; // what `record` yields when the name is not the path's
    let out = run(
        &pvs(&[]),
        &[squatter],
        &[volume("v2", 2, 1)],
        &[p(2)].into_iter().collect(),
    );
    assert!(
        out.repairs
            .iter()
            .all(|r| !matches!(r, Repair::DeleteMigration { .. })),
        "{:?}",
        out.repairs
    );
}

#[test]
fn unprotected_registered_volumes_are_protected() {
    let mut m = migration(1, Some(Phase::Registered), Some("v1"), &["pv-1"]);
    m.protected = false;
    let out = run(
        &pvs(&[(1, &["pv-1"])]),
        &[m],
        &[volume("v1", 1, 1)],
        &HashSet::new(),
    );
    assert_eq!(
        out.repairs,
        [Repair::Protect {
            path: p(1),
            volume_id: "v1".into()
        }]
    );
}

/// Which ID is the path's: the driver's, a garbage or foreign one in the status, a live one.
#[path = "plan_id_tests.rs"]
mod ids;

/// Whose volmig-named volumes are this cluster's orphans: its own only.
#[path = "plan_orphan_tests.rs"]
mod orphans;

//! Reasons, phases and totals of the readiness report.

use super::*;

#[test]
fn last_error_reason_and_message_are_copied() {
    for (reason, needle) in [
        ("DiskNotFound", "restore"),
        ("InvalidLogin", "credentials"),
        ("NotAuthenticated", "credentials"),
        ("BackendUnavailable", "retries"),
        ("BackendRejected", "privileges"),
        ("InvalidPath", "fix the PV spec"),
    ] {
        let i = inputs(
            vec![pv("pv-1", P1)],
            vec![vm(P1, failed(reason, "what vCenter said"))],
            DriverCache::Served(vec![]),
        );
        let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
        assert!(!report.ready);
        assert_eq!(row.phase, Some(Phase::Failed));
        assert_eq!(row.reason.as_deref(), Some(reason));
        assert_eq!(row.message, "what vCenter said");
        assert_eq!(row.driver_object, Some(false));
        assert_eq!(report.totals.by_reason.get(reason), Some(&1));
        assert_eq!(report.advice.len(), 1);
        assert!(
            report.advice[0].action.contains(needle),
            "{reason}: {:?}",
            report.advice[0]
        );
    }
}

#[test]
fn an_unknown_reason_gets_the_generic_advice() {
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, failed("SomethingNew", "m"))],
        DriverCache::NotServed,
    );
    let report = build(&i, DriverCacheRequirement::Auto);
    assert_eq!(report.advice[0].reason, "SomethingNew");
    assert!(
        report.advice[0]
            .action
            .contains("kubectl describe volumemigration")
    );
}

#[test]
fn an_invalid_path_has_no_canonical_form_and_no_migration() {
    let i = inputs(
        vec![pv("pv-bad", "kubevols/disk.vmdk")],
        vec![],
        DriverCache::NotServed,
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(!report.ready);
    assert_eq!(row.canonical_path, None);
    assert_eq!(row.volume_migration, None);
    assert_eq!(row.phase, None);
    assert_eq!(row.reason.as_deref(), Some(reason::INVALID_VOLUME_PATH));
    let error = VolumePath::parse("kubevols/disk.vmdk")
        .unwrap_err()
        .to_string();
    assert_eq!(row.path_error.as_deref(), Some(error.as_str()));
    assert_eq!(row.message, error);
    assert_eq!(report.totals.by_phase.get(NO_PHASE), Some(&1));
    assert!(report.advice[0].action.contains("fix the PV spec"));
}

#[test]
fn a_pv_without_volume_migration() {
    let i = inputs(vec![pv("pv-1", P1)], vec![], DriverCache::NotServed);
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(!report.ready);
    assert_eq!(row.reason.as_deref(), Some(reason::NO_VOLUME_MIGRATION));
    assert_eq!(row.volume_migration, Some(object_name(P1)));
    assert!(row.message.contains(&object_name(P1)));
    assert_eq!(row.phase, None);
}

#[test]
fn a_migration_of_another_path_under_the_same_name_is_a_collision_and_leaks_no_id() {
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm_named(P1, P2, registered("id-of-p2"))],
        DriverCache::Served(vec![object("id-of-p2", P1, "id-of-p2")]),
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(!report.ready);
    assert_eq!(row.reason.as_deref(), Some(reason::NAME_COLLISION));
    assert_eq!(row.volume_id, None);
    assert_eq!(row.phase, None);
    assert_eq!(row.driver_object, None);
    assert!(row.message.contains(P2), "{}", row.message);

    // an unparsable spec path under the name is a collision too
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm_named(P1, "garbage", registered("id"))],
        DriverCache::NotServed,
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert_eq!(row.reason.as_deref(), Some(reason::NAME_COLLISION));
}

#[test]
fn another_spelling_of_the_same_path_in_the_spec_is_not_a_collision() {
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm_named(
            P1,
            "[/DC0/datastore/LocalDS_0]  kubevols/./disk-1.vmdk",
            registered("id-1"),
        )],
        DriverCache::NotServed,
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(report.ready, "{row:?}");
    assert_eq!(row.volume_id.as_deref(), Some("id-1"));
}

#[test]
fn phases_in_progress_are_not_registered_yet() {
    for phase in [
        Phase::Pending,
        Phase::Registering,
        Phase::Unregistering,
        Phase::Failed,
    ] {
        let status = VolumeMigrationStatus {
            phase: Some(phase),
            ..Default::default()
        };
        let i = inputs(
            vec![pv("pv-1", P1)],
            vec![vm(P1, status)],
            DriverCache::NotServed,
        );
        let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
        assert!(!report.ready, "{phase:?}");
        assert_eq!(row.reason.as_deref(), Some(reason::NOT_REGISTERED_YET));
        assert_eq!(row.message, format!("phase {}", phase.as_str()));
        assert_eq!(report.totals.by_phase.get(phase.as_str()), Some(&1));
    }
    // no status at all
    let mut bare = vm(P1, VolumeMigrationStatus::default());
    bare.status = None;
    let i = inputs(vec![pv("pv-1", P1)], vec![bare], DriverCache::NotServed);
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(!report.ready);
    assert_eq!(row.message, "phase <none>");
    assert_eq!(report.totals.by_phase.get(NO_PHASE), Some(&1));
}

#[test]
fn registered_without_id_or_being_deleted_is_not_ready() {
    let status = VolumeMigrationStatus {
        phase: Some(Phase::Registered),
        ..Default::default()
    };
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, status)],
        DriverCache::NotServed,
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(!row.ready);
    assert_eq!(row.reason.as_deref(), Some(reason::NOT_REGISTERED_YET));
    assert!(row.message.contains("no volume ID"));

    let mut deleting = vm(P1, registered("id-1"));
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![deleting],
        DriverCache::Served(vec![object("id-1", P1, "id-1")]),
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(!row.ready);
    assert_eq!(row.driver_object, Some(true));
    assert!(row.message.contains("being deleted"), "{}", row.message);
}

#[test]
fn duplicates_are_reported_but_do_not_block_a_published_registration() {
    let mut status = registered("id-1");
    status.duplicate_volume_ids = Some(vec!["id-9".into(), "id-8".into()]);
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, status.clone())],
        DriverCache::Served(vec![object("id-1", P1, "id-1")]),
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(report.ready);
    assert_eq!(row.reason.as_deref(), Some(reason::DUPLICATE_VOLUMES));
    assert_eq!(row.message, "other CNS volumes for this disk: id-9, id-8");
    assert_eq!(report.advice[0].count, 1);
    assert_eq!(report.advice[0].blocking, 0);
    assert!(report.advice[0].action.contains("docs/operations.md"));

    // not published: the blocking reason wins
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, status)],
        DriverCache::Served(vec![]),
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert_eq!(row.reason.as_deref(), Some(reason::NOT_PUBLISHED));

    // empty list: no reason
    let mut status = registered("id-1");
    status.duplicate_volume_ids = Some(vec![]);
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, status)],
        DriverCache::NotServed,
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert_eq!(row.reason, None);
}

#[test]
fn a_leftover_error_on_a_registered_path_is_shown_but_does_not_block() {
    let mut status = registered("id-1");
    status.last_error = failed("BackendUnavailable", "earlier hiccup").last_error;
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, status)],
        DriverCache::NotServed,
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(report.ready);
    assert_eq!(row.reason.as_deref(), Some("BackendUnavailable"));
    assert_eq!(report.advice[0].blocking, 0);
}

#[test]
fn totals_counts_and_order_over_a_mixed_cluster() {
    let i = Inputs {
        pvs: vec![
            pv("pv-c", P2),
            pv("pv-a", P1),
            pv("pv-b", P1),
            pv("pv-d", "[ds] no-vmdk.txt"),
            pv("pv-e", "[LocalDS_0] kubevols/disk-5.vmdk"),
        ],
        other_pvs: 3,
        migrations: vec![
            vm(P1, registered("id-1")),
            vm(P2, failed("DiskNotFound", "gone")),
            // a migration no PV uses any longer does not make a row
            vm("[ds] orphan.vmdk", registered("id-7")),
        ],
        driver: DriverCache::Served(vec![object("id-1", P1, "id-1")]),
        inline: InlineVolumes::NotChecked,
    };
    let report = build(&i, DriverCacheRequirement::Auto);
    let names: Vec<&str> = report.rows.iter().map(|r| r.pv.as_str()).collect();
    assert_eq!(names, ["pv-a", "pv-b", "pv-c", "pv-d", "pv-e"]);
    assert_eq!(
        report.persistent_volumes,
        PvCounts {
            total: 8,
            in_tree: 5,
            ignored: 3
        }
    );
    assert_eq!(report.volume_migrations, 3);
    assert_eq!(report.not_ready, 3);
    assert!(!report.ready);
    let by_phase: Vec<(&str, usize)> = report
        .totals
        .by_phase
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(by_phase, [("<none>", 2), ("Failed", 1), ("Registered", 2)]);
    let by_reason: Vec<(&str, usize)> = report
        .totals
        .by_reason
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        by_reason,
        [
            ("DiskNotFound", 1),
            ("InvalidVolumePath", 1),
            ("NoVolumeMigration", 1)
        ]
    );
    let advised: Vec<&str> = report.advice.iter().map(|a| a.reason.as_str()).collect();
    assert_eq!(
        advised,
        ["DiskNotFound", "InvalidVolumePath", "NoVolumeMigration"]
    );
    // two PVs on one path: both rows carry the same registration
    assert_eq!(report.rows[0].volume_id, report.rows[1].volume_id);
    assert!(report.rows[0].ready && report.rows[1].ready);
}

#[test]
fn an_empty_cluster_is_ready() {
    let report = build(
        &Inputs {
            pvs: vec![],
            other_pvs: 4,
            migrations: vec![],
            driver: DriverCache::NotServed,
            inline: InlineVolumes::NotChecked,
        },
        DriverCacheRequirement::On,
    );
    assert!(report.ready);
    assert_eq!(report.persistent_volumes.ignored, 4);
    assert!(report.rows.is_empty());
}

#[test]
fn every_derived_reason_has_its_own_advice() {
    let generic = action("no such reason");
    for r in [
        reason::INVALID_VOLUME_PATH,
        reason::NO_VOLUME_MIGRATION,
        reason::NAME_COLLISION,
        reason::NOT_PUBLISHED,
        reason::DUPLICATE_VOLUMES,
        reason::NOT_REGISTERED_YET,
        "DiskNotFound",
        "InvalidLogin",
    ] {
        assert_ne!(action(r), generic, "{r}");
    }
    assert!(action("DiskNotFound").contains("delete the PV"));
    assert!(action("InvalidLogin").contains("fix the vCenter credentials"));
}

#[test]
fn a_hundred_thousand_pvs_join_in_one_pass() {
    const N: usize = 100_000;
    let path = |i: usize| format!("[ds{}] kubevols/disk-{i}.vmdk", i % 7);
    let pvs: Vec<InTreePv> = (0..N)
        .map(|i| pv(&format!("pv-{i:06}"), &path(i)))
        .collect();
    // every third path is Registered and published, every other Registered only, the
    // rest have no VolumeMigration
    let mut migrations = Vec::new();
    let mut objects = Vec::new();
    for i in 0..N {
        if i % 3 == 0 {
            migrations.push(vm(&path(i), registered(&format!("id-{i}"))));
            objects.push(object(&format!("id-{i}"), &path(i), &format!("id-{i}")));
        } else if i % 3 == 1 {
            migrations.push(vm(&path(i), registered(&format!("id-{i}"))));
        }
    }
    let i = inputs(pvs, migrations, DriverCache::Served(objects));
    let report = build(&i, DriverCacheRequirement::Auto);
    assert_eq!(report.rows.len(), N);
    let ready = N.div_ceil(3);
    assert_eq!(report.rows.iter().filter(|r| r.ready).count(), ready);
    assert_eq!(report.not_ready, N - ready);
    assert_eq!(report.totals.by_reason[reason::NOT_PUBLISHED], N / 3);
    assert_eq!(
        report.totals.by_reason[reason::NO_VOLUME_MIGRATION],
        N - ready - N / 3
    );
    assert_eq!(report.rows[0].pv, "pv-000000");
    assert_eq!(report.rows[N - 1].pv, format!("pv-{:06}", N - 1));
}

/// docs/design.md §8.9: a pod's inline volume is a row like a PV's, counts in the verdict,
/// and is ready only when its path is Registered (and published when required).
#[test]
fn inline_pod_volumes_are_rows_that_count_in_the_verdict() {
    let inline = |volumes| Inputs {
        pvs: vec![pv("pv-a", P1)],
        other_pvs: 0,
        migrations: vec![vm(P1, registered("id-1")), vm(P2, registered("id-2"))],
        driver: DriverCache::Served(vec![object("id-1", P1, "id-1")]),
        inline: volumes,
    };
    let read = inline(InlineVolumes::Read(vec![
        pv("pod/apps/web-0/data", P2),
        pv("pod/apps/web-0/logs", "[ds] no-vmdk.txt"),
    ]));
    let report = build(&read, DriverCacheRequirement::Auto);
    let rows: Vec<(&str, bool, Option<&str>)> = report
        .rows
        .iter()
        .map(|r| (r.pv.as_str(), r.ready, r.reason.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            ("pod/apps/web-0/data", false, Some(reason::NOT_PUBLISHED)),
            (
                "pod/apps/web-0/logs",
                false,
                Some(reason::INVALID_VOLUME_PATH)
            ),
            ("pv-a", true, None),
        ]
    );
    assert_eq!(
        (
            report.inline_pod_volumes.count,
            report.not_ready,
            report.ready
        ),
        (2, 2, false)
    );
    assert_eq!(report.persistent_volumes.in_tree, 1, "PVs count apart");

    let unreadable = inline(InlineVolumes::Unreadable("forbidden".into()));
    let report = build(&unreadable, DriverCacheRequirement::Auto);
    assert_eq!(report.rows.len(), 1);
    assert!(report.ready, "unread pods are said, not guessed");
    assert_eq!(
        report.inline_pod_volumes.unreadable.as_deref(),
        Some("forbidden")
    );
}

/// docs/design.md §8.1: the driver's stale clean-up keeps an object only when its name is a
/// volume ID or a PV spells its path. A pod-only spelling on any other object is deleted
/// every cycle: the report says so, without holding up the verdict (it is published now).
#[test]
fn a_pod_only_spelling_the_drivers_clean_up_deletes_is_named() {
    let alias = "[/DC0/datastore/LocalDS_0] kubevols//disk-1.vmdk";
    let on_id = |carrier: &str| Inputs {
        pvs: vec![pv("pv-a", P1)],
        other_pvs: 0,
        migrations: vec![vm(P1, registered("id-1"))],
        driver: DriverCache::Served(vec![
            object(carrier, alias, "id-1"),
            object("id-1-9d5e1c2a", P1, "id-1"),
        ]),
        inline: InlineVolumes::Read(vec![pv("pod/apps/web-0/data", alias)]),
    };
    let kept = build(&on_id("id-1"), DriverCacheRequirement::Auto);
    assert!(kept.ready);
    assert!(kept.rows.iter().all(|r| r.reason.is_none()), "{kept:?}");

    let deleted = build(&on_id("id-1-15032eb6"), DriverCacheRequirement::Auto);
    let row = deleted
        .rows
        .iter()
        .find(|r| r.pv == "pod/apps/web-0/data")
        .expect("the pod's row");
    assert_eq!(row.reason.as_deref(), Some(reason::CLEANED_UP_BY_DRIVER));
    assert!(row.ready, "published now");
    let pv_row = deleted.rows.iter().find(|r| r.pv == "pv-a").expect("pv-a");
    assert_eq!(pv_row.reason, None, "a PV spells P1: its object is kept");
    assert!(
        deleted
            .advice
            .iter()
            .any(|a| a.reason == reason::CLEANED_UP_BY_DRIVER && a.blocking == 0)
    );
}

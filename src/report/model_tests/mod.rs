use super::*;
use crate::volume_migration::{LastError, VolumeMigrationSpec, VolumeMigrationStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const P1: &str = "[LocalDS_0] kubevols/disk-1.vmdk";
const P2: &str = "[LocalDS_0] kubevols/disk-2.vmdk";

fn pv(name: &str, raw: &str) -> InTreePv {
    InTreePv {
        name: name.into(),
        volume_path: raw.into(),
    }
}

fn object_name(raw: &str) -> String {
    VolumePath::parse(raw).unwrap().object_name()
}

/// A VolumeMigration named after `raw`'s canonical path whose spec says `spec_path`.
fn vm_named(raw: &str, spec_path: &str, status: VolumeMigrationStatus) -> VolumeMigration {
    let mut vm = VolumeMigration::new(
        &object_name(raw),
        VolumeMigrationSpec {
            volume_path: spec_path.into(),
            storage_policy_name: None,
        },
    );
    vm.status = Some(status);
    vm
}

fn vm(raw: &str, status: VolumeMigrationStatus) -> VolumeMigration {
    let canonical = VolumePath::parse(raw).unwrap().canonical();
    vm_named(raw, &canonical, status)
}

fn registered(id: &str) -> VolumeMigrationStatus {
    VolumeMigrationStatus {
        phase: Some(Phase::Registered),
        volume_id: Some(id.into()),
        ..Default::default()
    }
}

fn failed(reason: &str, message: &str) -> VolumeMigrationStatus {
    VolumeMigrationStatus {
        phase: Some(Phase::Failed),
        attempts: Some(1),
        last_error: Some(LastError {
            reason: reason.into(),
            message: message.into(),
            time: Time(jiff::Timestamp::UNIX_EPOCH),
        }),
        ..Default::default()
    }
}

fn object(name: &str, raw: &str, id: &str) -> DriverObject {
    DriverObject {
        name: name.into(),
        volume_path: raw.into(),
        volume_id: id.into(),
    }
}

fn inputs(pvs: Vec<InTreePv>, migrations: Vec<VolumeMigration>, driver: DriverCache) -> Inputs {
    Inputs {
        pvs,
        other_pvs: 0,
        migrations,
        driver,
        inline: InlineVolumes::NotChecked,
    }
}

fn one_row(inputs: &Inputs, requirement: DriverCacheRequirement) -> (Report, Row) {
    let report = build(inputs, requirement);
    assert_eq!(report.rows.len(), 1);
    let row = report.rows[0].clone();
    (report, row)
}

#[test]
fn registered_and_published_is_ready() {
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, registered("id-1"))],
        DriverCache::Served(vec![object("id-1", P1, "id-1")]),
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(report.ready);
    assert_eq!(report.not_ready, 0);
    assert!(report.driver_cache.required);
    assert_eq!(report.driver_cache.served, Some(true));
    assert_eq!(report.driver_cache.objects, 1);
    assert_eq!(
        row,
        Row {
            pv: "pv-1".into(),
            volume_path: P1.into(),
            canonical_path: Some(P1.into()),
            path_error: None,
            volume_migration: Some(object_name(P1)),
            phase: Some(Phase::Registered),
            volume_id: Some("id-1".into()),
            driver_object: Some(true),
            reason: None,
            message: String::new(),
            ready: true,
        }
    );
    assert!(report.advice.is_empty());
    assert!(report.totals.by_reason.is_empty());
}

#[test]
fn registered_without_driver_object_is_not_published_when_the_crd_is_served() {
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, registered("id-1"))],
        DriverCache::Served(vec![object("id-2", P2, "id-2")]),
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(!report.ready);
    assert!(!row.ready);
    assert_eq!(row.driver_object, Some(false));
    assert_eq!(row.reason.as_deref(), Some(reason::NOT_PUBLISHED));
    assert!(
        row.message.contains("no CnsVSphereVolumeMigration"),
        "{}",
        row.message
    );
    assert!(
        row.message.contains(P1) && row.message.contains("id-1"),
        "{}",
        row.message
    );
    assert_eq!(report.advice.len(), 1);
    assert_eq!(report.advice[0].reason, reason::NOT_PUBLISHED);
    assert_eq!(report.advice[0].blocking, 1);
    assert!(report.advice[0].action.contains("--publish-driver-cache"));
}

#[test]
fn a_driver_object_with_another_id_does_not_count() {
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, registered("id-1"))],
        DriverCache::Served(vec![object("id-other", P1, "id-other")]),
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert_eq!(row.driver_object, Some(false));
    assert_eq!(row.reason.as_deref(), Some(reason::NOT_PUBLISHED));
    assert!(
        row.message.contains("id-other holds id-other"),
        "{}",
        row.message
    );
    assert!(row.message.contains("not id-1"), "{}", row.message);
}

#[test]
fn the_driver_object_must_match_the_raw_spelling_not_the_canonical_one() {
    let raw = "[/DC0/datastore/LocalDS_0] kubevols//disk-1.vmdk";
    let i = inputs(
        vec![pv("pv-raw", raw)],
        vec![vm(P1, registered("id-1"))],
        DriverCache::Served(vec![object("id-1", P1, "id-1")]),
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert_eq!(row.canonical_path.as_deref(), Some(P1));
    assert_eq!(row.phase, Some(Phase::Registered));
    assert_eq!(row.driver_object, Some(false));
    assert!(!row.ready);

    let i = inputs(
        vec![pv("pv-raw", raw)],
        vec![vm(P1, registered("id-1"))],
        DriverCache::Served(vec![
            object("id-1", P1, "id-1"),
            object("id-1-0a1b2c3d", raw, "id-1"),
        ]),
    );
    let (_, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert_eq!(row.driver_object, Some(true));
    assert!(row.ready);
}

#[test]
fn without_the_crd_auto_does_not_require_publication_but_on_does() {
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, registered("id-1"))],
        DriverCache::NotServed,
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Auto);
    assert!(report.ready);
    assert!(!report.driver_cache.required);
    assert_eq!(report.driver_cache.served, Some(false));
    assert_eq!(row.driver_object, None);
    assert_eq!(row.reason, None);

    let (report, row) = one_row(&i, DriverCacheRequirement::On);
    assert!(!report.ready);
    assert!(report.driver_cache.required);
    assert_eq!(row.reason.as_deref(), Some(reason::NOT_PUBLISHED));
    assert!(row.message.contains("not served"), "{}", row.message);
}

#[test]
fn off_never_requires_publication() {
    for driver in [
        DriverCache::NotChecked,
        DriverCache::NotServed,
        DriverCache::Served(vec![]),
    ] {
        let i = inputs(
            vec![pv("pv-1", P1)],
            vec![vm(P1, registered("id-1"))],
            driver.clone(),
        );
        let (report, row) = one_row(&i, DriverCacheRequirement::Off);
        assert!(report.ready, "{driver:?}");
        assert!(!report.driver_cache.required);
        assert_eq!(row.reason, None, "{driver:?}");
    }
    let i = inputs(
        vec![pv("pv-1", P1)],
        vec![vm(P1, registered("id-1"))],
        DriverCache::NotChecked,
    );
    let (report, row) = one_row(&i, DriverCacheRequirement::Off);
    assert_eq!(report.driver_cache.served, None);
    assert_eq!(row.driver_object, None);
}

mod reasons;

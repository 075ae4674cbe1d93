use super::*;
use crate::volume_migration::{LastError, VolumeMigrationSpec, VolumeMigrationStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const PATH: &str = "[ds] k/disk.vmdk";

fn now() -> jiff::Timestamp {
    "2026-12-02T10:00:00Z".parse().unwrap()
}

fn vm(status: VolumeMigrationStatus, finalizer: bool, deleting: bool) -> VolumeMigration {
    let name = VolumePath::parse(PATH).unwrap().object_name();
    let mut vm = VolumeMigration::new(
        &name,
        VolumeMigrationSpec {
            volume_path: PATH.into(),
            storage_policy_name: None,
        },
    );
    if finalizer {
        vm.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    if deleting {
        vm.metadata.deletion_timestamp = Some(Time(now()));
    }
    vm.status = Some(status);
    vm
}

fn status(phase: Option<Phase>, id: Option<&str>, pvs: &[&str]) -> VolumeMigrationStatus {
    VolumeMigrationStatus {
        phase,
        volume_id: id.map(Into::into),
        persistent_volumes: (!pvs.is_empty()).then(|| pvs.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn failed(reason: &str, next: Option<&str>) -> VolumeMigrationStatus {
    VolumeMigrationStatus {
        phase: Some(Phase::Failed),
        persistent_volumes: Some(vec!["pv-1".into()]),
        last_error: Some(LastError {
            reason: reason.into(),
            message: "m".into(),
            time: Time(now()),
        }),
        next_retry_time: next.map(|t| Time(t.parse().unwrap())),
        ..Default::default()
    }
}

fn plan(vm: &VolumeMigration, pvs: &[&str], policy: PvDeletePolicy) -> Decision {
    let pvs: Vec<String> = pvs.iter().map(|s| s.to_string()).collect();
    decide(&Observed {
        migration: vm,
        pvs: &pvs,
        now: now(),
        on_pv_delete: policy,
    })
}

fn path() -> VolumePath {
    VolumePath::parse(PATH).unwrap()
}

#[test]
fn new_object_gets_finalizer_pvs_and_registration() {
    let p = plan(
        &vm(status(None, None, &[]), false, false),
        &["pv-1"],
        PvDeletePolicy::Unregister,
    );
    assert!(p.add_finalizer);
    assert_eq!(p.set_pvs, Some(vec!["pv-1".to_string()]));
    assert_eq!(p.step, Step::Register(path()));
}

#[test]
fn registered_and_in_sync_is_idle_with_no_writes() {
    let s = status(Some(Phase::Registered), Some("v1"), &["pv-1"]);
    let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(
        p,
        Decision {
            add_finalizer: false,
            set_pvs: None,
            step: Step::Idle,
            publish: Some(Publish {
                path: path(),
                volume_id: crate::backend::VolumeId::from("v1"),
                protected: false,
            }),
        },
        "idle, and the mapping is kept published (a no-op when in sync)"
    );
}

#[test]
fn only_registered_mappings_are_published() {
    for phase in [
        None,
        Some(Phase::Pending),
        Some(Phase::Registering),
        Some(Phase::Failed),
    ] {
        let s = status(phase, None, &["pv-1"]);
        let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
        assert_eq!(p.publish, None, "{phase:?}");
    }
    let mut s = status(Some(Phase::Registered), Some("v1"), &["pv-1"]);
    s.protected_from_vm_delete = Some(true);
    let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
    assert!(p.publish.is_some_and(|p| p.protected));
}

#[test]
fn registered_without_id_registers_again() {
    let s = status(Some(Phase::Registered), None, &["pv-1"]);
    let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::Register(path()));
}

#[test]
fn every_unfinished_phase_registers() {
    for phase in [
        None,
        Some(Phase::Pending),
        Some(Phase::Registering),
        Some(Phase::Unregistering),
    ] {
        let s = status(phase, None, &["pv-1"]);
        let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
        assert_eq!(p.step, Step::Register(path()), "{phase:?}");
        assert_eq!(p.set_pvs, None);
    }
}

#[test]
fn pv_list_change_is_written() {
    let s = status(Some(Phase::Registered), Some("v1"), &["pv-1"]);
    let p = plan(
        &vm(s, true, false),
        &["pv-1", "pv-2"],
        PvDeletePolicy::Unregister,
    );
    assert_eq!(
        p.set_pvs,
        Some(vec!["pv-1".to_string(), "pv-2".to_string()])
    );
    assert_eq!(p.step, Step::Idle);
    let s = status(Some(Phase::Registered), Some("v1"), &["pv-1"]);
    let p = plan(&vm(s, true, false), &[], PvDeletePolicy::Unregister);
    assert_eq!(p.set_pvs, Some(vec![]));
    assert_eq!(p.step, Step::Idle, "unused paths are left to full sync");
}

#[test]
fn unused_path_is_not_registered() {
    let p = plan(
        &vm(status(None, None, &[]), true, false),
        &[],
        PvDeletePolicy::Unregister,
    );
    assert_eq!(p.step, Step::Idle);
    assert_eq!(p.set_pvs, None);
}

#[test]
fn failed_transient_waits_until_due_then_registers() {
    let s = failed(reason::TRANSIENT, Some("2026-12-02T10:00:30Z"));
    let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::RetryAfter(Duration::from_secs(30)));
    let s = failed(reason::TRANSIENT, Some("2026-12-02T09:59:00Z"));
    let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::Register(path()));
    let s = failed(reason::NOT_AUTHENTICATED, None);
    let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::Register(path()));
}

#[test]
fn failed_permanent_waits_for_full_sync() {
    for r in [
        reason::DISK_NOT_FOUND,
        reason::PERMANENT,
        reason::INVALID_PATH,
    ] {
        let s = failed(r, None);
        let p = plan(&vm(s, true, false), &["pv-1"], PvDeletePolicy::Unregister);
        assert_eq!(p.step, Step::Idle, "{r}");
    }
}

#[test]
fn invalid_spec_path_is_recorded_once() {
    let mut v = vm(status(None, None, &[]), true, false);
    v.spec.volume_path = "no-brackets.vmdk".into();
    let p = plan(&v, &[], PvDeletePolicy::Unregister);
    assert!(matches!(p.step, Step::RecordInvalidPath(ref m) if m.contains("datastore")));
    v.status = Some(failed(reason::INVALID_PATH, None));
    v.status.as_mut().unwrap().persistent_volumes = None;
    let p = plan(&v, &[], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::Idle);
}

#[test]
fn deletion_without_pvs_unregisters_per_policy() {
    let s = status(Some(Phase::Registered), Some("v1"), &[]);
    let p = plan(&vm(s.clone(), true, true), &[], PvDeletePolicy::Unregister);
    assert_eq!(
        p.step,
        Step::Finalize {
            unregister: Some(path()),
            recreate: None
        }
    );
    let p = plan(&vm(s, true, true), &[], PvDeletePolicy::Keep);
    assert_eq!(
        p.step,
        Step::Finalize {
            unregister: None,
            recreate: None
        }
    );
}

#[test]
fn deletion_by_hand_while_used_keeps_volume_and_recreates() {
    let s = status(Some(Phase::Registered), Some("v1"), &["pv-1"]);
    let p = plan(&vm(s, true, true), &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(
        p.step,
        Step::Finalize {
            unregister: None,
            recreate: Some(path())
        }
    );
    assert!(!p.add_finalizer);
}

#[test]
fn deletion_of_never_registered_object_just_releases() {
    let p = plan(
        &vm(status(None, None, &[]), true, true),
        &[],
        PvDeletePolicy::Unregister,
    );
    assert_eq!(
        p.step,
        Step::Finalize {
            unregister: None,
            recreate: None
        }
    );
    let p = plan(
        &vm(status(None, None, &[]), false, true),
        &[],
        PvDeletePolicy::Unregister,
    );
    assert_eq!(p.step, Step::Idle, "not ours to finalize");
}

/// docs/design.md §5.4: an object deleted while `Registering` waited for the registrar
/// forever (retried every 5 s, and no registrar ran for it). Now the create in flight is
/// resolved: the unregistration waits for it and releases what landed, or it is settled
/// (recorded or released) before the finalizer goes.
#[test]
fn deletion_resolves_a_create_that_may_be_in_flight() {
    let s = status(Some(Phase::Registering), None, &["pv-1"]);
    let deleting = vm(s, true, true);
    let p = plan(&deleting, &[], PvDeletePolicy::Unregister);
    assert_eq!(
        p.step,
        Step::Finalize {
            unregister: Some(path()),
            recreate: None
        }
    );
    let p = plan(&deleting, &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::Settle(path()), "still used: recorded first");
    let p = plan(&deleting, &[], PvDeletePolicy::Keep);
    assert_eq!(p.step, Step::Settle(path()), "kept: recorded first");
}

#[test]
fn an_object_named_after_another_path_is_a_collision_recorded_once() {
    let s = status(Some(Phase::Registered), Some("v-other"), &[]);
    let mut squatter = vm(s, true, false);
    squatter.metadata.name = Some("disk-0000000000000000".into());
    let p = plan(&squatter, &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::RecordNameCollision(path()));
    assert_eq!(p.set_pvs, None, "nothing is written for the other path");
    assert!(!p.add_finalizer);
    squatter.status = Some(failed(reason::NAME_COLLISION, None));
    let p = plan(&squatter, &["pv-1"], PvDeletePolicy::Unregister);
    assert_eq!(p.step, Step::Idle);
    squatter.metadata.deletion_timestamp = Some(Time(now()));
    let p = plan(&squatter, &[], PvDeletePolicy::Unregister);
    assert_eq!(
        p.step,
        Step::Finalize {
            unregister: None,
            recreate: None
        },
        "released without touching CNS"
    );
}

#[test]
fn a_pv_list_longer_than_the_cap_is_cut_and_counted() {
    use crate::volume_migration::MAX_STATUS_PVS;
    let names: Vec<String> = (0..MAX_STATUS_PVS + 5)
        .map(|i| format!("pv-{i:05}"))
        .collect();
    let cut = VolumeMigrationStatus {
        persistent_volumes: Some(names[..MAX_STATUS_PVS].to_vec()),
        persistent_volume_count: Some(names.len() as u64),
        ..Default::default()
    };
    assert!(!pv_list_stale(&cut, &names), "cut list and count agree");
    assert!(
        pv_list_stale(&cut, &names[..names.len() - 1]),
        "a PV beyond the listed ones went away: the count changes"
    );
    let uncounted = VolumeMigrationStatus {
        persistent_volume_count: None,
        ..cut.clone()
    };
    assert!(pv_list_stale(&uncounted, &names));
    // A complete list needs no count (objects written before the count are not rewritten).
    let short: Vec<String> = names[..3].to_vec();
    let complete = VolumeMigrationStatus {
        persistent_volumes: Some(short.clone()),
        ..Default::default()
    };
    assert!(!pv_list_stale(&complete, &short));
    assert!(pv_list_stale(&cut, &short), "shrunk below the cap");
}

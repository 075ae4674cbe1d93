use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::backend::{BackendError, ErrorClass, op};

/// The value of the sample whose name-and-labels part is exactly `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (head, value) = line.rsplit_once(' ')?;
        (head == series).then(|| value.parse().ok())?
    })
}

fn must(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

/// The process families (OpenMetrics names) the collector adds on Linux.
#[cfg(target_os = "linux")]
const PROCESS_FAMILIES: &[&str] = &[
    "process_cpu_seconds",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];
#[cfg(not(target_os = "linux"))]
const PROCESS_FAMILIES: &[&str] = &[];

#[test]
fn closed_label_sets_start_at_zero() {
    let m = Metrics::new();
    let text = m.encode();
    for r in RegistrationResult::ALL {
        let series = format!("volmig_registrations_total{{result=\"{}\"}}", r.as_str());
        assert_eq!(must(&text, &series), 0.0);
        assert_eq!(m.registrations(*r), 0);
    }
    for a in SyncAction::ALL {
        let series = format!(
            "volmig_full_sync_actions_total{{action=\"{}\"}}",
            a.as_str()
        );
        assert_eq!(must(&text, &series), 0.0);
    }
    for p in PHASES {
        assert_eq!(
            must(
                &text,
                &format!("volmig_volumes{{phase=\"{}\"}}", p.as_str())
            ),
            0.0
        );
    }
    assert_eq!(
        must(&text, "volmig_full_sync_passes_total{result=\"ok\"}"),
        0.0
    );
    assert_eq!(
        must(&text, "volmig_full_sync_passes_total{result=\"failed\"}"),
        0.0
    );
    assert_eq!(must(&text, "volmig_leader"), 0.0);
    assert!(!m.is_leader());
}

#[test]
fn every_family_has_help_and_type() {
    let m = Metrics::new();
    m.backend_request(op::CREATE, BackendResult::Ok, Duration::from_millis(5));
    m.reconcile_failure("BackendUnavailable");
    let text = m.encode();
    let typed: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let helped: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let expected: BTreeSet<&str> = [
        "volmig_registrations",
        "volmig_registration_duration_seconds",
        "volmig_registration_stage_seconds",
        "volmig_volumes",
        "volmig_full_sync_duration_seconds",
        "volmig_full_sync_actions",
        "volmig_full_sync_passes",
        "volmig_duplicate_volumes",
        "volmig_orphan_volumes",
        "volmig_backend_requests",
        "volmig_backend_request_duration_seconds",
        "volmig_leader",
        "volmig_registrar_mode",
        "volmig_pvs_tracked",
        "volmig_name_collisions",
        "volmig_build_info",
        "volmig_full_sync_last_success_timestamp_seconds",
        "volmig_driver_objects_missing",
        "volmig_reconcile_failures",
    ]
    .into_iter()
    .chain(PROCESS_FAMILIES.iter().copied())
    .collect();
    assert_eq!(typed, expected);
    assert_eq!(helped, expected);
    for line in text.lines().filter(|l| l.starts_with("# HELP ")) {
        assert!(line.split(' ').count() > 4, "help text too short: {line}");
    }
}

#[test]
fn registration_counts_by_result_and_observes_latency() {
    let m = Metrics::new();
    m.registration(RegistrationResult::Created, Duration::from_millis(300));
    m.registration(RegistrationResult::Created, Duration::from_secs(3));
    m.registration(RegistrationResult::DiskNotFound, Duration::from_millis(20));
    assert_eq!(m.registrations(RegistrationResult::Created), 2);
    assert_eq!(m.registrations(RegistrationResult::DiskNotFound), 1);
    assert_eq!(m.registrations(RegistrationResult::Adopted), 0);
    let text = m.encode();
    let h = "volmig_registration_duration_seconds";
    assert_eq!(must(&text, &format!("{h}_count")), 3.0);
    assert!((must(&text, &format!("{h}_sum")) - 3.32).abs() < 1e-9);
    assert_eq!(must(&text, &format!("{h}_bucket{{le=\"0.01\"}}")), 0.0);
    assert_eq!(must(&text, &format!("{h}_bucket{{le=\"0.025\"}}")), 1.0);
    assert_eq!(must(&text, &format!("{h}_bucket{{le=\"0.25\"}}")), 1.0);
    assert_eq!(must(&text, &format!("{h}_bucket{{le=\"0.5\"}}")), 2.0);
    assert_eq!(must(&text, &format!("{h}_bucket{{le=\"120.0\"}}")), 3.0);
    assert_eq!(must(&text, &format!("{h}_bucket{{le=\"+Inf\"}}")), 3.0);
}

#[test]
fn volumes_by_phase_is_a_snapshot() {
    let m = Metrics::new();
    m.set_volumes_by_phase(&[(Phase::Registered, 7), (Phase::Failed, 2)]);
    assert_eq!(m.volumes(Phase::Registered), 7);
    assert_eq!(m.volumes(Phase::Failed), 2);
    m.set_volumes_by_phase(&[(Phase::Registered, 9), (Phase::Pending, 1)]);
    assert_eq!(m.volumes(Phase::Registered), 9);
    assert_eq!(m.volumes(Phase::Pending), 1);
    assert_eq!(m.volumes(Phase::Failed), 0, "absent phases reset to zero");
    let text = m.encode();
    assert_eq!(must(&text, "volmig_volumes{phase=\"Registered\"}"), 9.0);
    assert_eq!(must(&text, "volmig_volumes{phase=\"Failed\"}"), 0.0);
}

#[test]
fn full_sync_passes_and_actions() {
    let m = Metrics::new();
    m.full_sync_pass(Duration::from_secs(2), true);
    m.full_sync_pass(Duration::from_secs(4), true);
    m.full_sync_pass(Duration::from_millis(50), false);
    m.full_sync_action(SyncAction::CreateMigration, 3);
    m.full_sync_action(SyncAction::CreateMigration, 2);
    m.full_sync_action(SyncAction::Orphan, 1);
    assert_eq!(m.full_sync_passes(true), 2);
    assert_eq!(m.full_sync_passes(false), 1);
    assert_eq!(m.full_sync_actions(SyncAction::CreateMigration), 5);
    assert_eq!(m.full_sync_actions(SyncAction::Orphan), 1);
    assert_eq!(m.full_sync_actions(SyncAction::GcOrphan), 0);
    let text = m.encode();
    assert_eq!(must(&text, "volmig_full_sync_duration_seconds_count"), 3.0);
    assert_eq!(
        must(
            &text,
            "volmig_full_sync_duration_seconds_bucket{le=\"0.1\"}"
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            "volmig_full_sync_duration_seconds_bucket{le=\"2.5\"}"
        ),
        2.0
    );
    assert_eq!(
        must(
            &text,
            "volmig_full_sync_actions_total{action=\"create_migration\"}"
        ),
        5.0
    );
}

#[test]
fn duplicate_orphan_and_pv_gauges_are_set_not_added() {
    let m = Metrics::new();
    m.set_duplicate_volumes(4);
    m.set_orphan_volumes(2);
    m.set_pvs_tracked(100_000);
    m.set_duplicate_volumes(1);
    assert_eq!(m.duplicate_volumes(), 1);
    assert_eq!(m.orphan_volumes(), 2);
    assert_eq!(m.pvs_tracked(), 100_000);
    let text = m.encode();
    assert_eq!(must(&text, "volmig_duplicate_volumes"), 1.0);
    assert_eq!(must(&text, "volmig_orphan_volumes"), 2.0);
    assert_eq!(must(&text, "volmig_pvs_tracked"), 100_000.0);
}

#[test]
fn backend_requests_by_operation_and_result() {
    let m = Metrics::new();
    m.backend_request(op::CREATE, BackendResult::Ok, Duration::from_millis(40));
    m.backend_request(
        op::CREATE,
        BackendResult::Transient,
        Duration::from_millis(7),
    );
    m.backend_request(op::LIST, BackendResult::Ok, Duration::from_millis(1));
    assert_eq!(m.backend_requests(op::CREATE, BackendResult::Ok), 1);
    assert_eq!(m.backend_requests(op::CREATE, BackendResult::Transient), 1);
    assert_eq!(m.backend_requests(op::CREATE, BackendResult::NotFound), 0);
    assert_eq!(m.backend_requests_total(op::CREATE), 2);
    assert_eq!(m.backend_requests_total(op::DELETE), 0);
    let text = m.encode();
    let c = "volmig_backend_requests_total";
    assert_eq!(
        must(
            &text,
            &format!("{c}{{operation=\"CnsCreateVolume\",result=\"transient\"}}")
        ),
        1.0
    );
    let h = "volmig_backend_request_duration_seconds";
    assert_eq!(
        must(
            &text,
            &format!("{h}_count{{operation=\"CnsCreateVolume\"}}")
        ),
        2.0
    );
    assert_eq!(
        must(
            &text,
            &format!("{h}_count{{operation=\"CnsQueryAllVolume\"}}")
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            &format!("{h}_bucket{{le=\"0.01\",operation=\"CnsCreateVolume\"}}")
        ),
        1.0
    );
}

#[test]
fn backend_result_follows_the_error_class() {
    let err = |class| Err::<(), _>(BackendError::new(class, op::FIND, "F", "m"));
    assert_eq!(
        BackendResult::of(&Ok::<_, BackendError>(1)),
        BackendResult::Ok
    );
    assert_eq!(
        BackendResult::of(&err(ErrorClass::Transient)),
        BackendResult::Transient
    );
    assert_eq!(
        BackendResult::of(&err(ErrorClass::Permanent)),
        BackendResult::Permanent
    );
    assert_eq!(
        BackendResult::of(&err(ErrorClass::NotAuthenticated)),
        BackendResult::NotAuthenticated
    );
    assert_eq!(
        BackendResult::of(&err(ErrorClass::NotFound)),
        BackendResult::NotFound
    );
}

#[test]
fn leader_gauge_toggles() {
    let m = Metrics::new();
    m.set_leader(true);
    assert!(m.is_leader());
    assert_eq!(must(&m.encode(), "volmig_leader"), 1.0);
    m.set_leader(false);
    assert!(!m.is_leader());
    assert_eq!(must(&m.encode(), "volmig_leader"), 0.0);
}

#[test]
fn clones_share_state_across_threads() {
    let m = Metrics::new();
    std::thread::scope(|s| {
        for _ in 0..8 {
            let m = m.clone();
            s.spawn(move || {
                for _ in 0..250 {
                    m.registration(RegistrationResult::Adopted, Duration::from_millis(1));
                    m.backend_request(op::FIND, BackendResult::Ok, Duration::ZERO);
                }
            });
        }
    });
    assert_eq!(m.registrations(RegistrationResult::Adopted), 2000);
    assert_eq!(m.backend_requests(op::FIND, BackendResult::Ok), 2000);
    assert_eq!(
        must(&m.encode(), "volmig_registration_duration_seconds_count"),
        2000.0
    );
}

#[test]
fn the_two_text_formats_differ_where_the_specs_do() {
    let m = Metrics::new();
    m.registration(RegistrationResult::Created, Duration::from_secs(1));
    let om = m.encode();
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE volmig_registrations counter\n"));
    assert!(om.contains("# UNIT volmig_registration_duration_seconds seconds\n"));
    let text = m.encode_prometheus_text();
    assert!(!text.contains("# EOF"));
    assert!(text.contains("# TYPE volmig_registrations_total counter\n"));
    assert_eq!(
        must(&text, "volmig_registrations_total{result=\"created\"}"),
        1.0
    );
}

#[test]
fn label_values_are_unique_snake_case() {
    let values: Vec<&str> = RegistrationResult::ALL
        .iter()
        .map(|r| r.as_str())
        .chain(SyncAction::ALL.iter().map(|a| a.as_str()))
        .chain(BackendResult::ALL.iter().map(|b| b.as_str()))
        .chain(RegistrationStage::ALL.iter().map(|s| s.as_str()))
        .collect();
    for v in &values {
        assert!(v.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{v}");
    }
    let registration: BTreeSet<_> = RegistrationResult::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(registration.len(), 5);
    let actions: BTreeSet<_> = SyncAction::ALL.iter().map(|a| a.as_str()).collect();
    assert_eq!(actions.len(), 9);
    let backend: BTreeSet<_> = BackendResult::ALL.iter().map(|b| b.as_str()).collect();
    assert_eq!(backend.len(), 5);
}

#[test]
fn build_info_names_the_version() {
    let m = Metrics::new();
    let series = format!(
        "volmig_build_info{{version=\"{}\",os=\"{}\",arch=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    for text in [m.encode(), m.encode_prometheus_text()] {
        assert_eq!(must(&text, &series), 1.0, "{text}");
    }
    assert!(
        m.encode_prometheus_text()
            .contains("# TYPE volmig_build_info gauge\n")
    );
}

#[test]
fn full_sync_last_success_moves_on_completed_passes_only() {
    let m = Metrics::new();
    let series = "volmig_full_sync_last_success_timestamp_seconds";
    assert_eq!(must(&m.encode(), series), 0.0, "0 before the first pass");
    m.full_sync_pass(Duration::from_secs(1), false);
    assert_eq!(
        m.full_sync_last_success(),
        0.0,
        "a failed pass is no success"
    );
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    m.full_sync_pass(Duration::from_secs(1), true);
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    let stamp = m.full_sync_last_success();
    assert!(
        before <= stamp && stamp <= after,
        "{before} <= {stamp} <= {after}"
    );
    let text = m.encode_prometheus_text();
    assert!(text.contains(&format!("# TYPE {series} gauge\n")), "{text}");
    assert!((must(&text, series) - stamp).abs() < 1e-3);
    m.full_sync_pass(Duration::from_secs(1), false);
    assert_eq!(
        m.full_sync_last_success(),
        stamp,
        "kept across a failed pass"
    );
}

#[test]
fn driver_objects_missing_is_set() {
    let m = Metrics::new();
    assert_eq!(must(&m.encode(), "volmig_driver_objects_missing"), 0.0);
    m.set_driver_objects_missing(12);
    m.set_driver_objects_missing(3);
    assert_eq!(m.driver_objects_missing(), 3);
    assert_eq!(
        must(&m.encode_prometheus_text(), "volmig_driver_objects_missing"),
        3.0
    );
}

#[test]
fn reconcile_failures_count_by_reason() {
    let ours: Vec<&str> = ReconcileFailure::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        ours,
        crate::controller::Error::METRIC_LABELS,
        "one list of reasons"
    );
    let m = Metrics::new();
    for label in crate::controller::Error::METRIC_LABELS {
        assert_eq!(
            must(
                &m.encode_prometheus_text(),
                &format!("volmig_reconcile_failures_total{{reason=\"{label}\"}}")
            ),
            0.0,
            "every action the controller can fail at starts at zero"
        );
    }
    m.reconcile_failure("BackendUnavailable");
    m.reconcile_failure("BackendUnavailable");
    m.reconcile_failure("Conflict");
    assert_eq!(m.reconcile_failures("BackendUnavailable"), 2);
    assert_eq!(m.reconcile_failures("Conflict"), 1);
    assert_eq!(m.reconcile_failures("NotAuthenticated"), 0);
    let text = m.encode_prometheus_text();
    assert!(text.contains("# TYPE volmig_reconcile_failures_total counter\n"));
    assert_eq!(
        must(
            &text,
            "volmig_reconcile_failures_total{reason=\"BackendUnavailable\"}"
        ),
        2.0
    );
    let om = m.encode();
    assert!(om.contains("# TYPE volmig_reconcile_failures counter\n"));
    assert_eq!(
        must(&om, "volmig_reconcile_failures_total{reason=\"Conflict\"}"),
        1.0
    );
}

#[cfg(target_os = "linux")]
mod process_tests;

#[test]
fn the_registrar_mode_names_one_mode_at_a_time() {
    let m = Metrics::new();
    assert_eq!(m.registrar_mode(), None, "every mode starts at 0");
    for mode in ["unknown", "follow", "own"] {
        m.set_registrar_mode(mode);
        assert_eq!(m.registrar_mode(), Some(mode));
        let text = m.encode();
        for other in ["unknown", "follow", "own"] {
            let sample = format!(
                "volmig_registrar_mode{{mode=\"{other}\"}} {}",
                i32::from(other == mode)
            );
            assert!(text.contains(&sample), "{sample} missing:\n{text}");
        }
    }
}

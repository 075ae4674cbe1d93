use jiff::{SignedDuration, Timestamp};

use super::*;

fn config() -> SyncerLeaseConfig {
    SyncerLeaseConfig::default()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

const RENEWED: &str = "2026-12-07T01:02:03Z";

fn held(holder: &str, renewed: Option<&str>, duration: Option<i32>) -> SyncerLeaseRead {
    SyncerLeaseRead::Found(SyncerLease {
        holder_identity: Some(holder.to_owned()),
        renew_time: renewed.map(at),
        lease_duration_seconds: duration,
    })
}

fn after(seconds: i64) -> Timestamp {
    at(RENEWED) + SignedDuration::from_secs(seconds)
}

#[test]
fn a_fresh_lease_of_another_identity_is_followed() {
    let read = held("vsphere-csi-controller-x", Some(RENEWED), Some(30));
    let registrar = decide(&config(), &read, after(29));
    assert_eq!(registrar.mode, Mode::Follow);
    assert_eq!(
        registrar.holder.as_deref(),
        Some("vsphere-csi-controller-x")
    );
    assert_eq!(registrar.renew_time, Some(at(RENEWED)));
    assert_eq!(registrar.lease_duration_seconds, Some(30));
    assert_eq!(
        registrar.lease.as_deref(),
        Some("vmware-system-csi/vsphere-syncer")
    );
    assert_eq!(
        registrar.line(),
        "Registrar: follow — the CSI driver's syncer vsphere-csi-controller-x (Lease \
         vmware-system-csi/vsphere-syncer, renewed 2026-12-07T01:02:03Z, 30 s) registers \
         in-tree vmdks; volmig adopts its volumes (as of the Lease's renewTime; the daemon \
         decides on its own clock)"
    );
    // a renewTime ahead of this clock (skew) is fresh too
    assert_eq!(decide(&config(), &read, after(-5)).mode, Mode::Follow);
}

#[test]
fn a_stale_lease_leaves_volmig_the_registrar() {
    let read = held("vsphere-csi-controller-x", Some(RENEWED), Some(30));
    for seconds in [30, 31, 86_400] {
        let registrar = decide(&config(), &read, after(seconds));
        assert_eq!(registrar.mode, Mode::Own, "{seconds} s after the renewal");
        assert_eq!(
            registrar.holder.as_deref(),
            Some("vsphere-csi-controller-x")
        );
        assert_eq!(registrar.lease_duration_seconds, Some(30));
    }
    assert_eq!(
        decide(&config(), &read, after(31)).line(),
        "Registrar: own — the CSI driver's syncer Lease vmware-system-csi/vsphere-syncer \
         expired at 2026-12-07T01:02:33Z (held by vsphere-csi-controller-x, renewed \
         2026-12-07T01:02:03Z, 30 s): volmig registers, once it holds this Lease itself (one in-flight grace after the last \
         renewal it saw)"
    );
}

#[test]
fn a_lease_held_by_volmig_is_hold_mode_until_it_expires() {
    let read = held("volmig/replica-0", Some(RENEWED), Some(690));
    let registrar = decide(&config(), &read, after(1));
    assert_eq!(registrar.mode, Mode::Hold);
    assert_eq!(registrar.holder.as_deref(), Some("volmig/replica-0"));
    assert!(
        registrar.why.contains("--hold-driver-syncer")
            && registrar.why.contains("volmig registers"),
        "{}",
        registrar.why
    );
    let expired = decide(&config(), &read, after(690));
    assert_eq!(expired.mode, Mode::Own);
    assert!(expired.why.contains("held by volmig"), "{}", expired.why);
    // Without a renewTime volmig's own hold says nothing about the driver.
    let unrenewed = decide(
        &config(),
        &held("volmig/replica-0", None, Some(30)),
        after(1),
    );
    assert_eq!(unrenewed.mode, Mode::Own);
    assert!(
        unrenewed
            .why
            .contains("volmig's own identity volmig/replica-0"),
        "{}",
        unrenewed.why
    );
}

#[test]
fn a_syncer_without_leader_election_is_followed_whatever_the_lease_says() {
    let unelected = "deployment/vsphere-csi-controller (no --leader-election)".to_owned();
    for read in [
        SyncerLeaseRead::Absent,
        held("volmig/replica-0", Some(RENEWED), Some(690)),
    ] {
        let registrar = with_deployment(
            decide(&config(), &read, after(1)),
            Some(DriverPresence::Unelected(unelected.clone())),
        );
        assert_eq!(registrar.mode, Mode::Follow, "{read:?}");
        assert_eq!(registrar.holder.as_deref(), Some(unelected.as_str()));
        assert!(registrar.why.contains("volmig adopts"), "{}", registrar.why);
    }
    let plain = decide(&config(), &SyncerLeaseRead::Absent, after(1));
    assert_eq!(with_deployment(plain.clone(), None), plain);
    assert_eq!(
        with_deployment(plain.clone(), Some(DriverPresence::Absent)),
        plain
    );
}

#[test]
fn a_lapsed_lease_beside_a_standing_deployment_makes_nobody_the_registrar() {
    let stock = DriverPresence::Elected {
        name: "vsphere-csi-controller".into(),
        replicas: 3,
    };
    for read in [
        SyncerLeaseRead::Absent,
        held("vsphere-csi-controller-0", Some(RENEWED), Some(30)),
    ] {
        let registrar = with_deployment(decide(&config(), &read, after(3600)), Some(stock.clone()));
        assert_eq!(registrar.mode, Mode::Follow, "{read:?}");
        assert!(
            registrar
                .why
                .contains("deployment/vsphere-csi-controller stands with 3")
                && registrar.why.contains("volmig creates nothing"),
            "{}",
            registrar.why
        );
    }
    // Scaled to 0, or a Lease volmig holds: the Deployment changes nothing.
    let scaled = DriverPresence::Elected {
        name: "vsphere-csi-controller".into(),
        replicas: 0,
    };
    let absent = decide(&config(), &SyncerLeaseRead::Absent, after(1));
    assert_eq!(with_deployment(absent.clone(), Some(scaled)), absent);
    let held_by_volmig = decide(
        &config(),
        &held("volmig/replica-0", Some(RENEWED), Some(690)),
        after(1),
    );
    assert_eq!(
        with_deployment(held_by_volmig.clone(), Some(stock)),
        held_by_volmig
    );
}

#[test]
fn a_lease_without_a_holder_leaves_volmig_the_registrar() {
    for holder in [None, Some(String::new())] {
        let read = SyncerLeaseRead::Found(SyncerLease {
            holder_identity: holder.clone(),
            renew_time: Some(at(RENEWED)),
            lease_duration_seconds: Some(30),
        });
        let registrar = decide(&config(), &read, after(1));
        assert_eq!(registrar.mode, Mode::Own, "{holder:?}");
        assert_eq!(registrar.holder, None);
        assert_eq!(
            registrar.line(),
            "Registrar: own — the CSI driver's syncer Lease vmware-system-csi/vsphere-syncer \
             has no holder: volmig registers, once it holds this Lease itself (one in-flight grace after the last \
             renewal it saw)"
        );
    }
}

#[test]
fn no_lease_leaves_volmig_the_registrar() {
    let registrar = decide(&config(), &SyncerLeaseRead::Absent, after(1));
    assert_eq!(registrar.mode, Mode::Own);
    assert_eq!(
        (
            &registrar.holder,
            &registrar.renew_time,
            registrar.lease_duration_seconds
        ),
        (&None, &None, None)
    );
    assert_eq!(
        registrar.line(),
        "Registrar: own — no CSI driver syncer Lease (vmware-system-csi/vsphere-syncer not \
         found): volmig registers, once it holds this Lease itself (one in-flight grace after the last \
         renewal it saw)"
    );
    let named_elsewhere = SyncerLeaseConfig {
        namespace: "csi".into(),
        lease_name: "syncer".into(),
        deployment: String::new(),
    };
    let registrar = decide(&named_elsewhere, &SyncerLeaseRead::Absent, after(1));
    assert_eq!(registrar.lease.as_deref(), Some("csi/syncer"));
    assert!(registrar.why.contains("(csi/syncer not found)"));
}

#[test]
fn a_missing_or_nonpositive_duration_is_thirty_seconds() {
    for duration in [None, Some(0), Some(-5)] {
        let read = held("vsphere-csi-controller-x", Some(RENEWED), duration);
        let fresh = decide(&config(), &read, after(29));
        assert_eq!(fresh.mode, Mode::Follow, "{duration:?}");
        assert_eq!(fresh.lease_duration_seconds, Some(30));
        assert!(fresh.why.contains(", 30 s)"), "{}", fresh.why);
        assert_eq!(
            decide(&config(), &read, after(30)).mode,
            Mode::Own,
            "{duration:?}"
        );
    }
    // a longer duration keeps it fresh longer
    let read = held("vsphere-csi-controller-x", Some(RENEWED), Some(120));
    assert_eq!(decide(&config(), &read, after(100)).mode, Mode::Follow);
    assert_eq!(decide(&config(), &read, after(120)).mode, Mode::Own);
}

#[test]
fn a_held_lease_without_renew_time_is_unknown() {
    let read = held("vsphere-csi-controller-x", None, Some(30));
    let registrar = decide(&config(), &read, after(1));
    assert_eq!(registrar.mode, Mode::Unknown);
    assert_eq!(
        registrar.holder.as_deref(),
        Some("vsphere-csi-controller-x")
    );
    assert!(registrar.why.contains("no renewTime"), "{}", registrar.why);
}

#[test]
fn an_unreadable_lease_is_unknown_and_says_why() {
    let forbidden = SyncerLeaseRead::Unreadable {
        code: Some(403),
        message: "leases.coordination.k8s.io \"vsphere-syncer\" is forbidden".into(),
    };
    let registrar = decide(&config(), &forbidden, after(1));
    assert_eq!(registrar.mode, Mode::Unknown);
    assert_eq!(
        registrar.line(),
        "Registrar: unknown — cannot read the CSI driver's syncer Lease \
         vmware-system-csi/vsphere-syncer: leases.coordination.k8s.io \"vsphere-syncer\" is \
         forbidden (HTTP 403); the report needs get on that Lease"
    );
    let failed = SyncerLeaseRead::Unreadable {
        code: None,
        message: "connection reset".into(),
    };
    assert_eq!(
        decide(&config(), &failed, after(1)).why,
        "cannot read the CSI driver's syncer Lease vmware-system-csi/vsphere-syncer: \
         connection reset"
    );
}

#[test]
fn an_empty_lease_name_follows_nobody() {
    let config = SyncerLeaseConfig {
        namespace: "vmware-system-csi".into(),
        lease_name: String::new(),
        deployment: String::new(),
    };
    let registrar = decide(&config, &SyncerLeaseRead::NotNamed, after(1));
    assert_eq!(registrar.mode, Mode::Own);
    assert_eq!(registrar.lease, None);
    assert!(
        registrar.why.contains("--driver-syncer-lease is empty"),
        "{}",
        registrar.why
    );
}

#[test]
fn json_has_the_documented_fields() {
    let read = held("vsphere-csi-controller-x", Some(RENEWED), None);
    let value = serde_json::to_value(decide(&config(), &read, after(1))).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "mode": "follow",
            "lease": "vmware-system-csi/vsphere-syncer",
            "holder": "vsphere-csi-controller-x",
            "renewTime": RENEWED,
            "leaseDurationSeconds": 30,
            "why": value["why"],
        })
    );
    let value =
        serde_json::to_value(decide(&config(), &SyncerLeaseRead::Absent, after(1))).unwrap();
    assert_eq!(value["mode"], "own");
    assert_eq!(value["holder"], serde_json::Value::Null);
    assert_eq!(value["renewTime"], serde_json::Value::Null);
    assert_eq!(value["leaseDurationSeconds"], serde_json::Value::Null);
}

#[test]
fn the_lease_spec_fields_are_taken_as_read() {
    let spec: k8s_openapi::api::coordination::v1::LeaseSpec =
        serde_json::from_value(serde_json::json!({
            "holderIdentity": "vsphere-csi-controller-x",
            "renewTime": "2026-12-07T01:02:03.250000Z",
            "leaseDurationSeconds": 15,
        }))
        .unwrap();
    let lease = SyncerLease::from(&spec);
    assert_eq!(
        lease,
        SyncerLease {
            holder_identity: Some("vsphere-csi-controller-x".into()),
            renew_time: Some(at("2026-12-07T01:02:03.25Z")),
            lease_duration_seconds: Some(15),
        }
    );
    // the line shows whole seconds, the JSON the time as read
    let registrar = decide(&config(), &SyncerLeaseRead::Found(lease), after(1));
    assert!(
        registrar.why.contains("renewed 2026-12-07T01:02:03Z, 15 s"),
        "{}",
        registrar.why
    );
    assert_eq!(
        serde_json::to_value(&registrar).unwrap()["renewTime"],
        "2026-12-07T01:02:03.25Z"
    );
}

#[test]
fn volmigs_hold_without_the_hold_flag_is_own_mode() {
    let read = held("volmig/replica-0", Some(RENEWED), Some(690));
    let held = decide(&config(), &read, after(1));
    assert_eq!(with_hold_flag(held.clone(), true), held);
    let own = with_hold_flag(held, false);
    assert_eq!(own.mode, Mode::Own);
    assert!(own.why.contains("holds it for good"), "{}", own.why);
    let follow = decide(&config(), &held_by_driver_for_test(), after(1));
    assert_eq!(with_hold_flag(follow.clone(), false), follow);
}

fn held_by_driver_for_test() -> SyncerLeaseRead {
    held("vsphere-csi-controller-x", Some(RENEWED), Some(30))
}

use jiff::Timestamp;

use super::*;
use crate::report::registrar::{SyncerLease, SyncerLeaseRead, decide};
use crate::syncer_lease::SyncerLeaseConfig;
use crate::vcenter_config::ClusterIdSource;

const NS: &str = "vmware-system-csi";

fn flag(id: &str) -> ConfiguredClusterId {
    ConfiguredClusterId {
        id: id.to_owned(),
        source: ClusterIdSource::Flag,
    }
}

#[test]
fn the_cluster_id_passes_when_it_agrees_or_only_one_side_has_one() {
    assert!(cluster_id_check(Some(&flag("a")), &Ok(Some("a".to_owned())), NS).ok);
    assert!(cluster_id_check(Some(&flag("a")), &Ok(None), NS).ok);
    assert!(cluster_id_check(None, &Ok(Some("d".to_owned())), NS).ok);
}

#[test]
fn the_cluster_id_fails_on_a_mismatch_naming_both_and_on_none() {
    let mismatch = cluster_id_check(Some(&flag("a")), &Ok(Some("other".to_owned())), NS);
    assert!(!mismatch.ok);
    assert!(mismatch.detail.contains("mismatch"), "{}", mismatch.detail);
    assert!(mismatch.detail.contains("\"other\""), "{}", mismatch.detail);
    assert!(mismatch.fix.contains("\"other\""), "{}", mismatch.fix);
    let none = cluster_id_check(None, &Ok(None), NS);
    assert!(!none.ok);
    assert!(none.fix.contains("--cluster-id"));
    let unreadable = cluster_id_check(
        Some(&flag("a")),
        &Err(crate::daemon::cluster_id::ClusterIdError(
            "forbidden".to_owned(),
        )),
        NS,
    );
    assert!(!unreadable.ok);
}

#[test]
fn the_driver_crd_warns_when_not_installed() {
    assert!(driver_crd_check(&Ok(true)).ok);
    let absent = driver_crd_check(&Ok(false));
    assert!(absent.ok && absent.warning);
    assert!(
        absent
            .detail
            .contains("not installed: volmig publishes once it is")
    );
    assert!(!driver_crd_check(&Err("boom".to_owned())).ok);
}

#[test]
fn the_syncer_line_follows_the_reports_decision() {
    let config = SyncerLeaseConfig::default();
    let now = Timestamp::now();
    let own = syncer_check(&decide(&config, &SyncerLeaseRead::Absent, now));
    assert!(own.ok && !own.warning);
    assert!(own.detail.starts_with("own"), "{}", own.detail);
    let held = SyncerLeaseRead::Found(SyncerLease {
        holder_identity: Some("csi-controller-0".to_owned()),
        renew_time: Some(now),
        lease_duration_seconds: Some(30),
    });
    let follow = syncer_check(&decide(&config, &held, now));
    assert!(follow.ok);
    assert!(
        follow
            .detail
            .starts_with("follow (held by csi-controller-0)"),
        "{}",
        follow.detail
    );
    let forbidden = SyncerLeaseRead::Unreadable {
        code: Some(403),
        message: "forbidden".to_owned(),
    };
    let unknown = syncer_check(&decide(&config, &forbidden, now));
    assert!(unknown.ok && unknown.warning);
}

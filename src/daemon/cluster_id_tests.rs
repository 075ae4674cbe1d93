//! The cluster-ID decision, every combination of volmig's own ID and the driver's.

use std::path::PathBuf;

use super::*;
use crate::vcenter_config::ClusterIdSource;

const NAMESPACE: &str = "vmware-system-csi";

fn flag(id: &str) -> ConfiguredClusterId {
    ConfiguredClusterId {
        id: id.to_owned(),
        source: ClusterIdSource::Flag,
    }
}

fn conf(id: &str) -> ConfiguredClusterId {
    ConfiguredClusterId {
        id: id.to_owned(),
        source: ClusterIdSource::CsiConfig(PathBuf::from("/etc/csi/csi-vsphere.conf")),
    }
}

#[test]
fn every_combination_of_own_and_driver_id() {
    let own = [
        None,
        Some(flag("c-1")),
        Some(flag("c-2")),
        Some(conf("c-1")),
        Some(conf("c-2")),
    ];
    let driver = [None, Some("c-1"), Some("c-2")];
    for configured in &own {
        for from_driver in driver {
            let got = decide(configured.as_ref(), from_driver, NAMESPACE);
            let want = match (configured, from_driver) {
                (None, None) => None,
                (None, Some(d)) => Some(d.to_owned()),
                (Some(c), None) => Some(c.id.clone()),
                (Some(c), Some(d)) if c.id == d => Some(d.to_owned()),
                (Some(_), Some(_)) => None,
            };
            assert_eq!(
                got.as_ref().ok().map(|c| c.id.clone()),
                want,
                "{configured:?} / {from_driver:?}: {got:?}"
            );
        }
    }
}

#[test]
fn neither_says_where_to_set_one() {
    let e = decide(None, None, NAMESPACE).unwrap_err();
    assert_eq!(
        e.0,
        "no cluster ID: set --cluster-id, [Global] cluster-id in --csi-config, or let the \
         driver create ConfigMap vmware-system-csi/vsphere-csi-cluster-id"
    );
    let e = decide(None, None, "csi").unwrap_err();
    assert!(e.0.contains("ConfigMap csi/vsphere-csi-cluster-id"), "{e}");
}

#[test]
fn only_the_drivers_id_is_taken() {
    let got = decide(None, Some("driver-id"), NAMESPACE).unwrap();
    assert_eq!(got.id, "driver-id");
    assert!(
        got.from
            .contains("ConfigMap vmware-system-csi/vsphere-csi-cluster-id"),
        "{got:?}"
    );
}

#[test]
fn only_volmigs_id_is_taken() {
    for own in [flag("own"), conf("own")] {
        let got = decide(Some(&own), None, NAMESPACE).unwrap();
        assert_eq!(got.id, "own");
        assert!(got.from.starts_with(&own.source.to_string()), "{got:?}");
    }
}

#[test]
fn equal_ids_are_used() {
    for own in [flag("same"), conf("same")] {
        let got = decide(Some(&own), Some("same"), NAMESPACE).unwrap();
        assert_eq!(got.id, "same");
        assert!(got.from.contains("agrees"), "{got:?}");
    }
}

#[test]
fn different_ids_are_refused_naming_both_and_their_sources() {
    let e = decide(Some(&flag("mine")), Some("theirs"), NAMESPACE).unwrap_err();
    for needle in [
        "cluster ID mismatch",
        "--cluster-id is \"mine\"",
        "ConfigMap vmware-system-csi/vsphere-csi-cluster-id (key clusterID) is \"theirs\"",
        "set --cluster-id to \"theirs\"",
    ] {
        assert!(e.0.contains(needle), "{needle:?} missing in {e}");
    }
    let e = decide(Some(&conf("mine")), Some("theirs"), "csi").unwrap_err();
    for needle in [
        "[Global] cluster-id of --csi-config /etc/csi/csi-vsphere.conf is \"mine\"",
        "ConfigMap csi/vsphere-csi-cluster-id (key clusterID) is \"theirs\"",
    ] {
        assert!(e.0.contains(needle), "{needle:?} missing in {e}");
    }
    // Compared exactly, as the driver uses them: no trimming, no case folding.
    for theirs in ["Mine", "mine ", " mine"] {
        assert!(
            decide(Some(&flag("mine")), Some(theirs), NAMESPACE).is_err(),
            "{theirs:?}"
        );
    }
}

#[test]
fn a_config_map_without_an_id_is_no_id() {
    let config_map = |data: serde_json::Value| -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": data,
        }))
        .unwrap()
    };
    assert_eq!(
        driver_cluster_id(&config_map(serde_json::json!({"clusterID": "abc"}))),
        Some("abc".to_owned())
    );
    for empty in [
        serde_json::json!(null),
        serde_json::json!({}),
        serde_json::json!({"clusterId": "wrong-key"}),
        serde_json::json!({"clusterID": ""}),
        serde_json::json!({"clusterID": "  "}),
    ] {
        assert_eq!(
            driver_cluster_id(&config_map(empty.clone())),
            None,
            "{empty}"
        );
    }
}

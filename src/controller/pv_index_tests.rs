//! Unit tests of the PV index.

use super::*;

fn valid(p: &str) -> Option<PvVolume> {
    Some(PvVolume::Valid(VolumePath::parse(p).unwrap()))
}

fn pv(name: &str, raw: &str, created: i64) -> PersistentVolume {
    let mut pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"vsphereVolume": {"volumePath": raw}},
    }))
    .unwrap();
    pv.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(created).unwrap(),
    ));
    pv
}

#[test]
fn spellings_are_raw_oldest_first_and_leave_with_their_pv() {
    let index = PvIndex::default();
    index.upsert_pv(&pv("pv-new", "[/DC0/datastore/ds]  k//a.vmdk", 300));
    index.upsert_pv(&pv("pv-old", "[ds] k/a.vmdk", 100));
    index.upsert_pv(&pv("pv-mid", "[ds] k/a.vmdk", 200));
    let path = VolumePath::parse("[ds] k/a.vmdk").unwrap();
    assert_eq!(
        index.spellings_for(&path),
        vec![
            "[ds] k/a.vmdk".to_owned(),
            "[/DC0/datastore/ds]  k//a.vmdk".to_owned()
        ]
    );
    index.remove("pv-new");
    assert_eq!(index.spellings_for(&path), vec!["[ds] k/a.vmdk".to_owned()]);
    index.remove("pv-old");
    index.remove("pv-mid");
    assert!(index.spellings_for(&path).is_empty());
    assert!(index.lock().by_pv.is_empty(), "no spelling outlives its PV");
}

#[test]
fn two_pvs_share_one_path_and_leave_cleanly() {
    let index = PvIndex::default();
    let a = index.upsert("pv-a", valid("[ds] x.vmdk"));
    assert_eq!(a.touched.len(), 1);
    index.upsert("pv-b", valid("[/DC/datastore/ds] ./x.vmdk"));
    let path = VolumePath::parse("[ds] x.vmdk").unwrap();
    assert_eq!(index.pvs_for(&path), ["pv-a", "pv-b"]);
    assert!(
        index
            .upsert("pv-a", valid("[ds] x.vmdk"))
            .touched
            .is_empty(),
        "no-op"
    );
    index.remove("pv-a");
    assert_eq!(index.pvs_for(&path), ["pv-b"]);
    let gone = index.retain(&NameSet::default());
    assert_eq!(gone, std::slice::from_ref(&path));
    assert!(index.pvs_for(&path).is_empty());
    assert!(index.paths().is_empty());
    assert!(index.is_empty());
}

#[test]
fn paths_are_interned_and_every_handle_is_given_back() {
    let (x, y) = ("[pv-index-intern] x.vmdk", "[pv-index-intern] y.vmdk");
    let path = |raw| VolumePath::parse(raw).unwrap();
    let index = PvIndex::default();
    index.upsert("pv-a", valid(x));
    index.upsert("pv-b", valid(x));
    assert!(
        path_intern::is_interned(index.lock().by_path.handle(&path(x)).unwrap()),
        "the index holds the interned path"
    );
    index.upsert("pv-b", valid(y));
    index.remove("pv-a");
    assert!(
        !path_intern::contains(&path(x)),
        "moved and removed PVs release it"
    );
    index.upsert("pv-c", valid(y));
    index.retain(&NameSet::from_iter([CompactText::new("pv-c")]));
    assert!(path_intern::contains(&path(y)));
    drop(index);
    assert!(
        !path_intern::contains(&path(y)),
        "a dropped index releases it"
    );
}

#[test]
fn moving_a_pv_touches_both_paths() {
    let index = PvIndex::default();
    index.upsert("pv", valid("[ds] a.vmdk"));
    let change = index.upsert("pv", valid("[ds] b.vmdk"));
    assert_eq!(change.touched.len(), 2);
}

#[test]
fn invalid_paths_are_reported_once() {
    let index = PvIndex::default();
    let err = VolumePath::parse("nope").unwrap_err();
    index.upsert("pv", Some(PvVolume::Invalid(err.clone())));
    assert_eq!(
        index.take_unreported_invalid(),
        [("pv".to_string(), err.clone())]
    );
    index.upsert("pv", Some(PvVolume::Invalid(err.clone())));
    assert!(
        index.take_unreported_invalid().is_empty(),
        "unchanged: reported once"
    );
    let other = VolumePath::parse("[ds]").unwrap_err();
    index.upsert("pv", Some(PvVolume::Invalid(other.clone())));
    assert_eq!(index.take_unreported_invalid(), [("pv".to_string(), other)]);
    index.upsert("fixed", Some(PvVolume::Invalid(err)));
    index.upsert("fixed", valid("[ds] ok.vmdk"));
    assert!(
        index.take_unreported_invalid().is_empty(),
        "fixed before reporting"
    );
    assert_eq!(index.len(), 2);
    assert_eq!(index.paths().len(), 1, "only the fixed PV has a valid path");
}

#[test]
fn non_vsphere_pvs_are_ignored() {
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "nfs"},
        "spec": {"nfs": {"server": "s", "path": "/x"}, "capacity": {"storage": "1Gi"}}
    }))
    .unwrap();
    assert_eq!(pv_volume(&pv), None);
    let vs: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "v"},
        "spec": {"vsphereVolume": {"volumePath": "[ds] k/v.vmdk", "fsType": "ext4"}}
    }))
    .unwrap();
    assert_eq!(
        pv_volume(&vs).map(|(volume, _)| volume),
        valid("[ds] k/v.vmdk")
    );
}

#[test]
fn inline_pod_volumes_are_users_kept_apart_from_pvs() {
    let index = PvIndex::default();
    index.expect_pods();
    index.upsert("pv-a", valid("[ds] shared.vmdk"));
    index.set_synced();
    assert!(!index.is_synced(), "pods are watched and not listed yet");
    let change = index.upsert_pod_volume("pod/ns/web/data", "[/DC/datastore/ds] shared.vmdk", 50);
    assert_eq!(change.touched.len(), 1);
    index.upsert_pod_volume("pod/ns/web/only", "[ds] inline.vmdk", 50);
    index.upsert_pod_volume("pod/ns/bad/x", "not a path", 50);
    index.set_pods_synced();
    assert!(index.is_synced());
    let shared = VolumePath::parse("[ds] shared.vmdk").unwrap();
    let inline = VolumePath::parse("[ds] inline.vmdk").unwrap();
    assert_eq!(index.pvs_for(&shared), ["pod/ns/web/data", "pv-a"]);
    assert_eq!(
        index.spellings_for(&shared),
        vec![
            "[/DC/datastore/ds] shared.vmdk".to_owned(),
            "[ds] shared.vmdk".to_owned()
        ],
        "the pod's raw spelling is published too, and first: no PV spells it, so only the \
         object named by the volume ID survives the driver's clean-up with it"
    );
    // A PV that spells it too: back to age order.
    index.upsert_pv(&pv("pv-z", "[/DC/datastore/ds] shared.vmdk", 90));
    assert_eq!(
        index.spellings_for(&shared),
        vec![
            "[ds] shared.vmdk".to_owned(),
            "[/DC/datastore/ds] shared.vmdk".to_owned()
        ]
    );
    index.remove("pv-z");
    assert_eq!(index.len(), 1, "PVs only");
    assert_eq!(index.pod_volumes(), 3);
    assert!(
        index.take_unreported_invalid().is_empty(),
        "no PV Warning Event for a pod's path"
    );
    // A PV re-list keeps the pods; a pod re-list keeps the PVs.
    assert!(index.retain(&NameSet::default()).contains(&shared));
    assert_eq!(index.pvs_for(&shared), ["pod/ns/web/data"]);
    let keep = NameSet::from_iter([CompactText::new("pod/ns/web/only")]);
    let gone = index.retain_pod_volumes(&keep);
    assert_eq!(gone, std::slice::from_ref(&shared));
    assert_eq!(index.pvs_for(&inline), ["pod/ns/web/only"]);
    assert_eq!(index.pod_volumes(), 1);
    index.remove("pod/ns/web/only");
    assert_eq!(index.pod_volumes(), 0);
    assert!(index.paths().is_empty());
}

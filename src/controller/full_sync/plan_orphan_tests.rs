//! Orphans are this cluster's own: CNS volume names carry no cluster ID and the listing
//! holds every CNS volume of the vCenter, so a volmig-named volume that nothing here
//! references may be another cluster's live volume (docs/design.md §6.4).

use super::*;

/// A volmig-named volume of path `n`, whose metadata names `clusters`.
fn of_clusters(id: &str, n: u32, clusters: &[&str]) -> CnsVolume {
    CnsVolume {
        cluster_ids: clusters.iter().map(|c| c.to_string()).collect(),
        ..volume(id, n, 1)
    }
}

fn pass(volumes: &[CnsVolume], gc_orphans: bool) -> PassPlan {
    plan(&PassInputs {
        pvs: &HashMap::new(),
        migrations: &[],
        volumes,
        absent_before: &HashSet::new(),
        gc_orphans,
        cluster_id: CLUSTER,
        driver_ids: &HashMap::new(),
        in_use: &HashSet::new(),
    })
}

#[test]
fn only_volumes_of_this_cluster_alone_are_its_orphans() {
    let volumes = [
        of_clusters("other", 1, &["other-cluster"]),
        of_clusters("none", 2, &[]),
        of_clusters("shared", 3, &[CLUSTER, "other-cluster"]),
        of_clusters("mine", 4, &[CLUSTER]),
    ];
    for gc_orphans in [false, true] {
        let out = pass(&volumes, gc_orphans);
        assert_eq!(
            out.repairs,
            [Repair::Orphan {
                id: "mine".into(),
                path: Some(p(4)),
                collect: gc_orphans,
            }],
            "gc_orphans = {gc_orphans}"
        );
        assert_eq!(out.orphans, 1, "the orphan count is this cluster's only");
    }
}

#[test]
fn another_clusters_volume_is_never_unregistered_whatever_its_name() {
    // Cluster B registered the same vmdk path under volmig's name (names carry no
    // cluster ID): cluster A has no PV for it, and still leaves it alone.
    let out = pass(&[of_clusters("b-live", 9, &["cluster-b"])], true);
    assert_eq!(out, PassPlan::default());
}

/// A volmig volume that a CSI PV or VolumeAttachment uses after cut-over is in use, not
/// an orphan, whatever `--gc-orphans` says (docs/design.md §5.1).
#[test]
fn a_volume_the_csi_driver_uses_is_no_orphan() {
    let volumes = [of_clusters("mine", 4, &[CLUSTER])];
    let in_use = HashSet::from(["mine".to_owned()]);
    let out = plan(&PassInputs {
        pvs: &HashMap::new(),
        migrations: &[],
        volumes: &volumes,
        absent_before: &HashSet::new(),
        gc_orphans: true,
        cluster_id: CLUSTER,
        driver_ids: &HashMap::new(),
        in_use: &in_use,
    });
    assert_eq!(out.repairs, []);
    assert_eq!(out.orphans, 0);
}

//! Heap bytes that a running volmig keeps per tracked volume, part by part: the PV index
//! entry, the VolumeMigration in the controller's cache (the compact record `volmig run`
//! keeps) and the CSI driver's cache index entry. The objects are built as
//! a real API server returns them (`managedFields`, labels, a full status).
//!
//! Both indexes take their paths from `volmig::path_intern`, as in a running volmig where
//! they index the same volumes: they are filled here for the same paths, the PV index
//! first, so it pays for each path once (text, `Arc` and the interner's table slot), and
//! the driver index is measured while the PV index still holds them, so it counts no path.
//!
//! A regression guard for memory per tracked volume (docs/operations.md, "Sizing memory"): the
//! bounds are generous (about 1.3 × what was measured when they were set); the resident-memory
//! figures at 100,000 volumes come from `make bench` (bench/report.md), not from here.

#![allow(clippy::expect_used, reason = "test code: a failure should panic")]

use std::sync::Arc;

use cap::Cap;
use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::json;
use volmig::controller::{MigrationCache, PvIndex};
use volmig::k8s::driver_cache::{CnsVSphereVolumeMigrationSpec, DriverIndex};
use volmig::path_intern;
use volmig::volume_migration::VolumeMigration;

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

const VOLUMES: usize = 10_000;

/// A disk UUID as vCenter's `QueryVirtualDiskUuid` spells it.
fn disk_uuid(i: usize) -> String {
    let [a, b, c, d] = (i as u32).to_be_bytes();
    format!("60 00 C2 90 00 00 00 00-00 00 00 00 {a:02x} {b:02x} {c:02x} {d:02x}")
}

fn uuid(i: usize, tag: u32) -> String {
    format!("{tag:08x}-0000-4000-8000-{i:012x}")
}

fn pv_name(i: usize) -> String {
    format!("pvc-{}", uuid(i, 0xa))
}

fn path(i: usize) -> String {
    format!(
        "[vsanDatastore] kubevols/kubernetes-dynamic-pvc-{}.vmdk",
        uuid(i, 0xa)
    )
}

fn pv(i: usize) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {
            "name": pv_name(i), "uid": uuid(i, 0xb), "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "annotations": {"pv.kubernetes.io/provisioned-by": "kubernetes.io/vsphere-volume"},
            "finalizers": ["kubernetes.io/pv-protection"],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {
            "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "thin",
            "vsphereVolume": {"volumePath": path(i), "fsType": "ext4"},
        },
        "status": {"phase": "Bound"},
    }))
    .expect("PV")
}

fn migration(i: usize) -> VolumeMigration {
    let name = volmig::VolumePath::parse(&path(i))
        .expect("path")
        .object_name();
    serde_json::from_value(json!({
        "apiVersion": "volmig.io/v1alpha1", "kind": "VolumeMigration",
        "metadata": {
            "name": name, "uid": uuid(i, 0xc), "resourceVersion": format!("{}", 2000 + i),
            "generation": 1, "creationTimestamp": "2025-01-01T00:00:00Z",
            "finalizers": ["volmig.io/registration"],
            "labels": {"app.kubernetes.io/managed-by": "volmig"},
            "managedFields": [{"manager": "volmig", "operation": "Update", "apiVersion":
                "volmig.io/v1alpha1", "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:phase": {}, "f:volumeID": {}}}}],
        },
        "spec": {"volumePath": path(i)},
        "status": {
            "phase": "Registered", "volumeID": uuid(i, 0xd), "diskUUID": disk_uuid(i),
            "persistentVolumes": [pv_name(i)], "persistentVolumeCount": 1, "attempts": 1,
            "registeredTime": "2025-01-01T00:00:00Z", "protectedFromVmDelete": true,
            "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Registered",
                "message": "registered", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
        },
    }))
    .expect("VolumeMigration")
}

/// Live heap bytes per volume that `fill` leaves behind (what it returns is kept alive
/// while measuring; everything else it allocated is freed).
fn per_volume<T>(fill: impl FnOnce() -> T) -> (f64, T) {
    let before = ALLOCATOR.allocated();
    let kept = fill();
    let after = ALLOCATOR.allocated();
    (after.saturating_sub(before) as f64 / VOLUMES as f64, kept)
}

#[test]
fn each_part_of_a_tracked_volume_stays_within_its_heap_budget() {
    let interned_before = path_intern::len();
    let (pv_bytes, index) = per_volume(|| {
        let index = PvIndex::default();
        for i in 0..VOLUMES {
            index.upsert_pv(&pv(i));
        }
        index
    });
    let (vm_bytes, cache) = per_volume(|| {
        // As the watcher fills it at start-up: one list (which ends by fitting the storage).
        let cache = MigrationCache::default();
        cache.begin_list();
        for i in 0..VOLUMES {
            cache.apply(&migration(i));
        }
        cache.end_list();
        cache
    });
    let (driver_bytes, driver) = per_volume(|| {
        let driver = Arc::new(DriverIndex::default());
        for i in 0..VOLUMES {
            let spec = CnsVSphereVolumeMigrationSpec {
                volumepath: path(i),
                volumeid: uuid(i, 0xd),
                protectvolumefromvmdelete: true,
            };
            driver.upsert(&uuid(i, 0xd), &spec, true);
        }
        driver
    });
    assert_eq!(index.len(), VOLUMES);
    assert_eq!(cache.len(), VOLUMES);
    assert_eq!(driver.len(), VOLUMES);
    assert_eq!(
        path_intern::len() - interned_before,
        VOLUMES,
        "the two indexes hold one shared copy of each path"
    );
    let total = pv_bytes + vm_bytes + driver_bytes;
    eprintln!(
        "heap bytes per volume: PV index {pv_bytes:.0}, VolumeMigration cache {vm_bytes:.0}, \
         driver index {driver_bytes:.0}, total {total:.0}"
    );
    for (part, bytes, bound) in [
        ("PV index", pv_bytes, PV_INDEX_BOUND),
        ("VolumeMigration cache", vm_bytes, MIGRATION_CACHE_BOUND),
        ("driver index", driver_bytes, DRIVER_INDEX_BOUND),
    ] {
        assert!(
            bytes <= bound,
            "{part}: {bytes:.0} heap bytes per volume, more than the {bound} allowed"
        );
    }
}

/// Bounds, bytes per volume (see the module doc).
/// Measured 304: the path (89 bytes of text, 40 of `Arc`) and its interner slot (~15)
/// counted here, names as 16-byte values (`pvc-<uuid>`), a path's one PV kept inline.
const PV_INDEX_BOUND: f64 = 400.0;
/// Measured 223: the compact record (identifiers and the PV name as 16-byte values, counts
/// as 4 bytes, the path shared with the indexes, the name not stored for objects named
/// after their path). kube-runtime's reflector store of stripped objects took 1,393.
const MIGRATION_CACHE_BOUND: f64 = 290.0;
/// Measured 134: the canonical path is the PV index's (interned), so none is counted here;
/// an object named after its ID stores its name in 16 bytes and no ID. A driver object that
/// kept its own copy of the path would add ~130.
const DRIVER_INDEX_BOUND: f64 = 175.0;

//! Publishing Registered mappings into the CSI driver's cache (`CnsVSphereVolumeMigration`
//! objects, docs/design.md §8.1), so the driver never misses and never registers by itself.
//! Compared against an in-memory index of the driver's objects: a mapping in sync costs
//! no API call.

use std::sync::Arc;

use kube::api::Api;
use tracing::{info, warn};

use super::{Context, PvIndex};
use crate::backend::VolumeId;
use crate::k8s::driver_cache::{
    CnsVSphereVolumeMigration, DriverChange, DriverIndex, apply_changes, desired_objects,
    plan_changes,
};
use crate::volume_path::VolumePath;

/// The driver's objects as volmig reads and (when publishing) writes them.
pub struct DriverCache {
    /// `cnsvspherevolumemigrations.cns.vmware.com`, cluster-wide.
    pub api: Api<CnsVSphereVolumeMigration>,
    /// What exists now (kept by a watch).
    pub index: Arc<DriverIndex>,
    /// Whether volmig writes objects (`--publish-driver-cache`); reading for adoption
    /// happens whenever the CRD is served.
    pub publish: bool,
}

/// Makes the driver's objects of `id` match the PVs of `path` now; returns how many
/// objects changed (0 when in sync: no API call).
pub async fn publish(
    ctx: &Context,
    path: &VolumePath,
    id: &VolumeId,
    protected: bool,
) -> kube::Result<usize> {
    let Some(driver) = ctx.driver.as_ref().filter(|d| d.publish) else {
        return Ok(0);
    };
    if let Some(other) = foreign_disk(&driver.index, path, id) {
        warn!(%path, volume_id = %id, other_disk = %other,
            "not publishing: the CSI driver's cache maps this volume ID to another disk (a hand-edited or wrong status ID; full sync repairs it)");
        return Ok(0);
    }
    let changes = publish_changes(&driver.index, &ctx.index, path, id, protected);
    apply(driver, id, &changes).await
}

/// The other disk the driver's cache maps `id` to, if any. Publishing or unpublishing
/// `id` for `path` then would re-point or remove that disk's entry: a pod of the other
/// disk would get this path's mapping, or a cache miss.
pub fn foreign_disk(driver: &DriverIndex, path: &VolumePath, id: &VolumeId) -> Option<VolumePath> {
    driver
        .objects_of(id)
        .values()
        .filter_map(|spec| VolumePath::parse(&spec.volumepath).ok())
        .find(|disk| disk != path)
}

/// What [`publish`] would change (pure over the two indexes): the driver's objects of
/// `id` made to match the spellings of `path` by its PVs now.
pub fn publish_changes(
    driver: &DriverIndex,
    pvs: &PvIndex,
    path: &VolumePath,
    id: &VolumeId,
    protected: bool,
) -> Vec<DriverChange> {
    let spellings = pvs.spellings_for(path);
    if spellings.is_empty() || foreign_disk(driver, path, id).is_some() {
        // No PV spells the path (now): the objects go only with the registration
        // (`unpublish`), never because a PV list was briefly empty — a removed object is
        // a cache miss, and on a miss the driver registers by itself.
        return Vec::new();
    }
    let desired = desired_objects(id, &spellings, protected);
    let mut changes = plan_changes(id, &desired, &driver.objects_of(id));
    // volmig's own objects that map this path to another ID (the mapping changed, e.g.
    // the driver's ID won) would give the driver two answers for one path.
    changes.extend(
        driver
            .stale_ours(path, id)
            .into_iter()
            .map(DriverChange::Delete),
    );
    changes
}

/// Removes the driver's objects of `id` for `path` (the registration is gone). Objects
/// that map `id` to another disk are that disk's and stay.
pub async fn unpublish(ctx: &Context, path: &VolumePath, id: &VolumeId) -> kube::Result<usize> {
    let Some(driver) = ctx.driver.as_ref().filter(|d| d.publish) else {
        return Ok(0);
    };
    if let Some(other) = foreign_disk(&driver.index, path, id) {
        warn!(%path, volume_id = %id, other_disk = %other,
            "not removing the CSI driver's objects of this volume ID: they map it to another disk");
        return Ok(0);
    }
    sync(driver, id, &Default::default()).await
}

async fn sync(
    driver: &DriverCache,
    id: &VolumeId,
    desired: &std::collections::BTreeMap<
        String,
        crate::k8s::driver_cache::CnsVSphereVolumeMigrationSpec,
    >,
) -> kube::Result<usize> {
    let changes = plan_changes(id, desired, &driver.index.objects_of(id));
    apply(driver, id, &changes).await
}

async fn apply(
    driver: &DriverCache,
    id: &VolumeId,
    changes: &[DriverChange],
) -> kube::Result<usize> {
    if changes.is_empty() {
        return Ok(0);
    }
    apply_changes(&driver.api, changes).await?;
    // The watch confirms later; recording now keeps a second look from writing again.
    for change in changes {
        match change {
            DriverChange::Create(name, spec) => driver.index.record_written(name, spec, true),
            DriverChange::Update(name, spec) => driver.index.record_written(name, spec, false),
            DriverChange::Delete(name) => driver.index.remove(name),
        }
    }
    info!(volume_id = %id, changes = changes.len(), "driver cache objects updated");
    Ok(changes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::driver_cache::CnsVSphereVolumeMigrationSpec;

    #[test]
    fn an_id_the_driver_maps_to_another_disk_is_neither_published_nor_removed() {
        let (p, q) = (
            VolumePath::parse("[ds] kubevols/p.vmdk").unwrap(),
            VolumePath::parse("[ds] kubevols/q.vmdk").unwrap(),
        );
        let q_id = VolumeId::from("vol-q");
        let driver = DriverIndex::default();
        let spec = |raw: &str, id: &VolumeId| CnsVSphereVolumeMigrationSpec {
            volumepath: raw.to_owned(),
            volumeid: id.0.clone(),
            protectvolumefromvmdelete: true,
        };
        driver.upsert("vol-q", &spec("[ds] kubevols/q.vmdk", &q_id), false);
        let pvs = PvIndex::default();
        pvs.upsert(
            "pv-p",
            Some(crate::controller::pv_index::PvVolume::Valid(p.clone())),
        );

        // p's status names q's volume (edited by hand): nothing to write for p.
        assert_eq!(foreign_disk(&driver, &p, &q_id), Some(q.clone()));
        assert!(publish_changes(&driver, &pvs, &p, &q_id, true).is_empty());
        // For q itself the ID is its own.
        assert_eq!(foreign_disk(&driver, &q, &q_id), None);
        // An ID of p (another spelling of p's disk) is not foreign.
        let p_id = VolumeId::from("vol-p");
        driver.upsert("vol-p", &spec("[ds] kubevols//p.vmdk", &p_id), false);
        assert_eq!(foreign_disk(&driver, &p, &p_id), None);
        assert!(!publish_changes(&driver, &pvs, &p, &p_id, true).is_empty());
    }
}

//! Publishing Registered mappings into the CSI driver's cache (`CnsVSphereVolumeMigration`
//! objects, docs/design.md §8.1), so the driver never misses and never registers by itself.
//! Compared against an in-memory index of the driver's objects: a mapping in sync costs
//! no API call. The driver sees only Add and Delete events, so objects are added and
//! deleted, never changed in place ([`plan_publish`]).

use std::sync::Arc;

use kube::api::Api;
use tracing::{info, warn};

use super::{Context, PvIndex};
use crate::backend::VolumeId;
use crate::k8s::driver_cache::{
    CnsVSphereVolumeMigration, DriverChange, DriverIndex, PublishPlan, apply_changes, plan_publish,
    plan_unpublish,
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
    let Some(driver) = ctx
        .cluster
        .driver
        .as_ref()
        .filter(|d| d.publish && d.index.is_served())
    else {
        return Ok(0);
    };
    if let Some(other) = foreign_disk(&driver.index, path, id) {
        warn!(%path, volume_id = %id, other_disk = %other,
            "not publishing: the CSI driver's cache maps this volume ID to another disk (a hand-edited or wrong status ID; full sync repairs it)");
        return Ok(0);
    }
    let plan = publish_plan(&driver.index, &ctx.index, path, id, protected);
    let creates = plan
        .changes
        .iter()
        .any(|c| matches!(c, DriverChange::Create(..)));
    // An ID the driver's cache does not hold yet is confirmed in CNS first: a status
    // restored from a backup or edited by hand may hold a dead ID or another disk's
    // (docs/design.md §8.1). Full sync repairs such a status.
    if creates {
        match ctx.registrar.confirm(path, id).await {
            Ok(true) => {}
            Ok(false) => {
                warn!(%path, volume_id = %id,
                    "not publishing: CNS has no volume with this ID for this disk (a restored or hand-edited status; full sync repairs it)");
                return Ok(0);
            }
            Err(e) => {
                warn!(%path, volume_id = %id, error = %crate::error_chain(&e),
                    "not publishing until CNS confirms the volume ID");
                return Ok(0);
            }
        }
    }
    for conflict in &plan.conflicts {
        warn!(%path, volume_id = %id, spelling = %conflict.spelling, object = %conflict.name,
            other_volume_id = %conflict.volume_id,
            "not publishing this spelling: an object volmig leaves alone holds it (full sync decides the path's ID)");
    }
    apply(driver, id, &plan.changes).await
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

/// What [`publish`] would change (pure over the two indexes): the driver's cache made to
/// map every spelling of `path` by its PVs now to `id`.
pub fn publish_changes(
    driver: &DriverIndex,
    pvs: &PvIndex,
    path: &VolumePath,
    id: &VolumeId,
    protected: bool,
) -> Vec<DriverChange> {
    publish_plan(driver, pvs, path, id, protected).changes
}

/// [`publish_changes`], with the spellings left alone ([`plan_publish`]).
pub fn publish_plan(
    driver: &DriverIndex,
    pvs: &PvIndex,
    path: &VolumePath,
    id: &VolumeId,
    protected: bool,
) -> PublishPlan {
    let spellings = pvs.spellings_for(path);
    if spellings.is_empty() || foreign_disk(driver, path, id).is_some() {
        // No PV spells the path (now): the objects go only with the registration
        // (`unpublish`), never because a PV list was briefly empty — a removed object is
        // a cache miss, and on a miss the driver registers by itself.
        return PublishPlan::default();
    }
    let existing = driver.objects_for(path, id);
    plan_publish(
        id,
        &spellings,
        protected,
        &existing,
        &driver.lost_among(&existing),
    )
}

/// What [`unpublish`] would change (pure over the index): every object of `id` for `path`
/// goes; another object carrying one of their raw paths is created again after.
pub fn unpublish_changes(
    driver: &DriverIndex,
    path: &VolumePath,
    id: &VolumeId,
) -> Vec<DriverChange> {
    if foreign_disk(driver, path, id).is_some() {
        return Vec::new();
    }
    let existing = driver.objects_for(path, id);
    plan_unpublish(id, &existing, &driver.lost_among(&existing))
}

/// Removes the driver's objects of `id` for `path` (the registration is gone). Objects
/// that map `id` to another disk are that disk's and stay.
pub async fn unpublish(ctx: &Context, path: &VolumePath, id: &VolumeId) -> kube::Result<usize> {
    let Some(driver) = ctx
        .cluster
        .driver
        .as_ref()
        .filter(|d| d.publish && d.index.is_served())
    else {
        return Ok(0);
    };
    if let Some(other) = foreign_disk(&driver.index, path, id) {
        warn!(%path, volume_id = %id, other_disk = %other,
            "not removing the CSI driver's objects of this volume ID: they map it to another disk");
        return Ok(0);
    }
    let changes = unpublish_changes(&driver.index, path, id);
    apply(driver, id, &changes).await
}

/// Executes `changes` (deletes first, then creates; the index records each as it lands).
async fn apply(
    driver: &DriverCache,
    id: &VolumeId,
    changes: &[DriverChange],
) -> kube::Result<usize> {
    if changes.is_empty() {
        return Ok(0);
    }
    let done = apply_changes(&driver.api, &driver.index, changes).await?;
    info!(volume_id = %id, changes = changes.len(), done, "driver cache objects updated");
    Ok(done)
}

#[cfg(test)]
#[path = "publish_tests.rs"]
mod tests;

//! Full-sync repairs of what the CSI driver's cache says about a path (docs/design.md §8.3,
//! §8.7): a volume ID CNS no longer holds is withdrawn so the driver registers again; an
//! ID of another disk's volume is reported, never adopted.

use tracing::warn;

use super::FullSync;
use super::repair::RepairError;
use crate::backend::VolumeId;
use crate::k8s::events::{EventType, reason as event_reason};
use crate::k8s::status::StatusChange;
use crate::metrics::SyncAction;
use crate::volume_path::VolumePath;

impl FullSync {
    /// The CSI driver leads and the CNS volume `missing` behind the path's status ID is gone
    /// (its PV deletion unregisters a vmdk another PV still uses, docs/design.md §8.3). The
    /// driver's cache objects for that ID keep its cache hitting a dead ID, so it would
    /// never register the path again, and the status would keep publishing it. Once CNS
    /// confirms the ID is gone: the status drops it (conditional on the version this pass
    /// read, so it is written first and nothing publishes it again), then every object of
    /// that ID for the path goes (any owner; other carriers of the same raw paths are
    /// created again after). The driver misses and registers; volmig adopts its ID.
    pub(super) async fn withdraw_dead_id(
        &self,
        path: &VolumePath,
        missing: &VolumeId,
    ) -> Result<(), RepairError> {
        let name = path.object_name();
        let Some(vm) = self.cached(&name) else {
            return Ok(());
        };
        let live = self
            .ctx
            .registrar
            .backend()
            .volumes_by_id(std::slice::from_ref(missing))
            .await
            .map_err(|source| RepairError::Lookup {
                path: path.clone(),
                source,
            })?;
        if !live.is_empty() {
            return Ok(());
        }
        let change = StatusChange::VolumeGone {
            gone: missing.0.clone(),
        };
        self.ctx
            .cluster
            .status
            .write(&name, &change, vm.metadata.resource_version.as_deref())
            .await
            .map_err(RepairError::WriteStatus)?;
        let removed = crate::controller::publish::unpublish(&self.ctx, path, missing)
            .await
            .map_err(RepairError::Publish)?;
        let note = format!(
            "CNS volume {missing} of {path} no longer exists (the CSI driver unregistered it?): \
             the ID is withdrawn and {removed} of the driver's cache objects for it removed, so \
             the driver registers the path again; volmig adopts that volume"
        );
        warn!(%path, gone = %missing, removed, "withdrew a volume ID CNS no longer holds");
        self.ctx
            .cluster
            .events
            .on_migration(&vm, EventType::Warning, event_reason::VOLUME_GONE, note)
            .await;
        Ok(())
    }

    /// The driver's cache maps `path` to `driver_id`, the live volume of `other_disk`: a
    /// hand-made or stale object. volmig never adopts it (the path would flip to another
    /// disk's volume); a Warning Event on the path's VolumeMigration and the
    /// `foreign_driver_id` full-sync action say so, every pass until it is fixed.
    pub(super) async fn report_foreign_driver_id(
        &self,
        path: &VolumePath,
        driver_id: &str,
        other_disk: &VolumePath,
    ) {
        self.ctx
            .metrics
            .full_sync_action(SyncAction::ForeignDriverId, 1);
        warn!(%path, %driver_id, %other_disk,
            "the CSI driver's cache maps this path to the CNS volume of another disk: not adopted; fix or delete that CnsVSphereVolumeMigration");
        if let Some(vm) = self.cached(&path.object_name()) {
            let note = format!(
                "a CnsVSphereVolumeMigration maps {path} to CNS volume {driver_id}, which backs \
                 {other_disk}: not adopted (a pod of this path would get another disk); fix or \
                 delete that object"
            );
            self.ctx
                .cluster
                .events
                .on_migration(
                    &vm,
                    EventType::Warning,
                    event_reason::DRIVER_ID_OF_ANOTHER_DISK,
                    note,
                )
                .await;
        }
    }
}

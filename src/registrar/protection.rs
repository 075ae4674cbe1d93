//! Protection from VM deletion and the CSI driver's ID (docs/design.md §8.3, §8.2):
//! keeping the disk of a registered volume when its VM is deleted, and taking over the ID
//! the driver's cache holds.

use tracing::{instrument, warn};

use super::{HeldSlot, Lane, RegisterError, Registrar, StatusUpdate, StoreErrorKind};
use crate::backend::VolumeId;
use crate::volume_path::VolumePath;

impl Registrar {
    /// Keeps the disk of `volume_id` when its VM is deleted (docs/design.md §8.3), under the
    /// slot in `held` if there is one; true when it is known to be protected. A failure
    /// is logged; full sync tries again.
    pub(super) async fn try_protect(
        &self,
        path: &VolumePath,
        volume_id: &VolumeId,
        held: &mut HeldSlot,
    ) -> bool {
        if self.fence(path).is_err() {
            return false;
        }
        match self
            .call_held(path, held, Lane::Started, || {
                self.backend.protect_from_vm_delete(volume_id)
            })
            .await
        {
            Ok(protection) => protection.is_protected(),
            Err(e) => {
                warn!(%path, %volume_id, error = %crate::error_chain(&e),
                    "could not protect the disk from VM deletion; full sync tries again");
                false
            }
        }
    }

    /// Protects the disk of the stored volume `volume_id` of `path` from VM deletion and
    /// records it (full sync's repair of volumes registered without the flag). Returns
    /// false when the stored ID changed meanwhile or protecting failed.
    #[instrument(skip(self), fields(%path, %volume_id))]
    pub async fn protect(
        &self,
        path: &VolumePath,
        volume_id: &VolumeId,
    ) -> Result<bool, RegisterError> {
        let _key = self.locks.lock(path).await;
        let Some(state) = self.load(path).await? else {
            return Ok(false);
        };
        if state.registered_id() != Some(volume_id)
            || !self
                .try_protect(path, volume_id, &mut HeldSlot::none())
                .await
        {
            return Ok(false);
        }
        match self
            .store
            .save(path, &StatusUpdate::Protected, state.version.as_ref())
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind == StoreErrorKind::Conflict => Ok(false),
            Err(source) => Err(RegisterError::Store {
                path: path.clone(),
                source,
            }),
        }
    }

    /// Replaces the stored ID `replaced` by `driver_id`, the ID the CSI driver's cache
    /// holds (docs/design.md §8.2: pods may be attached with it). Conditional on the stored ID
    /// still being `replaced`; returns false when it changed meanwhile.
    #[instrument(skip(self), fields(%path, %driver_id, %replaced))]
    pub async fn adopt_driver_id(
        &self,
        path: &VolumePath,
        driver_id: &VolumeId,
        replaced: &VolumeId,
    ) -> Result<bool, RegisterError> {
        let _key = self.locks.lock(path).await;
        let Some(state) = self.load(path).await? else {
            return Ok(false);
        };
        if state.registered_id() != Some(replaced) {
            return Ok(false);
        }
        self.fence(path)?;
        let protected = self
            .try_protect(path, driver_id, &mut HeldSlot::none())
            .await;
        let update = StatusUpdate::Registered {
            volume_id: driver_id.clone(),
            disk_uuid: None,
            adopted: true,
            attempts: state.attempts,
            protected,
        };
        match self.store.save(path, &update, state.version.as_ref()).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind == StoreErrorKind::Conflict => Ok(false),
            Err(source) => Err(RegisterError::Store {
                path: path.clone(),
                source,
            }),
        }
    }
}

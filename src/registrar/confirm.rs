//! Confirming a stored volume ID in CNS before this process first publishes it to the CSI
//! driver's cache (docs/design.md §8.1): a status restored from a backup or edited by hand
//! may hold a dead ID or another disk's.

use tracing::instrument;

use super::{Lane, RegisterError, Registrar};
use crate::backend::VolumeId;
use crate::volume_path::VolumePath;

impl Registrar {
    /// Whether CNS has volume `id` and does not show it backing another disk than `path`
    /// (one call, under the call gate).
    #[instrument(skip(self), fields(%path, %id))]
    pub async fn confirm(&self, path: &VolumePath, id: &VolumeId) -> Result<bool, RegisterError> {
        let live = self
            .call(path, Lane::New, || {
                self.backend.volumes_by_id(std::slice::from_ref(id))
            })
            .await?;
        Ok(live
            .iter()
            .any(|v| v.id == *id && v.backing_path.as_ref().is_none_or(|b| b == path)))
    }
}

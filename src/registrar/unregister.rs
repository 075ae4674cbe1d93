//! `unregister` and `collect_orphan`: the operations that remove CNS registrations (the
//! vmdk always stays). Each runs under the path's key and re-reads the stored state first.

use std::collections::BTreeSet;

use tokio::time::Instant;
use tracing::{info, instrument, warn};

use super::{Lane, RegisterError, Registrar, StatusUpdate};
use crate::api::Phase;
use crate::backend::{CnsVolume, ErrorClass, VolumeId};
use crate::volume_path::CNS_NAME_PREFIX;
use crate::volume_path::VolumePath;

impl Registrar {
    /// Removes volmig's CNS registration of `path` (the vmdk stays) and clears the status.
    /// Waits out a create that may still be in flight first, so it cannot complete after
    /// the unregistration. Unregistering a path that is not registered succeeds.
    #[instrument(skip(self), fields(%path))]
    pub async fn unregister(&self, path: &VolumePath) -> Result<(), RegisterError> {
        let _key = self.locks.lock(path).await;
        let state = self.load(path).await?;
        if let Some(token) = state
            .as_ref()
            .filter(|s| s.phase == Some(Phase::Registering))
            .and_then(|s| s.marker.as_ref())
        {
            let deadline = self
                .in_flight
                .deadline(path, token, self.config.in_flight_grace);
            if Instant::now() < deadline {
                info!(%path, "a create may still be in flight; unregistering after its grace");
                tokio::time::sleep_until(deadline).await;
            }
        }
        let name = path.cns_volume_name();
        let mut ids: BTreeSet<VolumeId> = BTreeSet::new();
        ids.extend(state.as_ref().and_then(|s| s.volume_id.clone()));
        ids.extend(self.unsaved_map().get(path).cloned());
        let found = self
            .call(path, Lane::New, || self.backend.find_volumes(&name, path))
            .await?;
        let known: BTreeSet<VolumeId> = found.iter().map(|v| v.id.clone()).collect();
        // A stored ID that CNS says backs another disk (a hand-edited status) is that
        // disk's volume: never unregister it (docs/security.md).
        let unverified: Vec<VolumeId> = ids.difference(&known).cloned().collect();
        if !unverified.is_empty() {
            let live = self
                .call(path, Lane::Started, || {
                    self.backend.volumes_by_id(&unverified)
                })
                .await?;
            for volume in live.iter().filter(|v| backs_another_disk(v, path)) {
                warn!(%path, volume_id = %volume.id, other = ?volume.backing_path, name = %volume.name,
                    "not unregistering: this CNS volume belongs to another disk");
                ids.remove(&volume.id);
            }
        }
        ids.extend(found.into_iter().filter(|v| v.name == name).map(|v| v.id));

        if state.is_some() {
            self.save_plain(path, &StatusUpdate::Unregistering).await?;
        }
        for id in &ids {
            self.delete(path, id).await?;
        }
        self.unsaved_map().remove(path);
        self.in_flight.forget(path);
        if state.is_some() {
            self.save_plain(path, &StatusUpdate::Unregistered).await?;
        }
        Ok(())
    }

    /// Unregisters the orphaned volmig volume `id` of `path`, unless the path is tracked
    /// again by now (a new PV may have adopted it since the full-sync pass planned this).
    /// Returns false when it was kept.
    #[instrument(skip(self), fields(%path, %id))]
    pub async fn collect_orphan(
        &self,
        path: &VolumePath,
        id: &VolumeId,
    ) -> Result<bool, RegisterError> {
        let _key = self.locks.lock(path).await;
        if self.load(path).await?.is_some() || self.unsaved_map().contains_key(path) {
            info!(%path, %id, "orphan is tracked again; kept");
            return Ok(false);
        }
        self.delete(path, id).await?;
        Ok(true)
    }

    /// Unregisters one volume (fenced: only a current leader deletes).
    ///
    /// Callers have checked that `id` is `path`'s.
    async fn delete(&self, path: &VolumePath, id: &VolumeId) -> Result<(), RegisterError> {
        self.fence(path)?;
        match self
            .call(path, Lane::Started, || self.backend.delete_volume(id))
            .await
        {
            Ok(()) => {
                info!(%path, volume_id = %id, "unregistered (disk kept)");
                Ok(())
            }
            Err(RegisterError::Backend { source, .. }) if source.class == ErrorClass::NotFound => {
                Ok(())
            }
            Err(other) => Err(other),
        }
    }

    /// Saves an update that carries no volume ID, retrying retryable store errors.
    async fn save_plain(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
    ) -> Result<(), RegisterError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.store.save(path, update, None).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_retryable() && attempt < self.config.retry.attempts_per_call => {
                    tokio::time::sleep(self.config.retry.delay(attempt)).await;
                }
                Err(source) => {
                    return Err(RegisterError::Store {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
    }
}

/// Whether CNS says `volume` is another disk's: its backing path, or volmig's name of
/// another path. A volume with neither (a foreign name, no backing path) gets the benefit
/// of the doubt, as in full sync.
fn backs_another_disk(volume: &CnsVolume, path: &VolumePath) -> bool {
    volume.backing_path.as_ref().is_some_and(|b| b != path)
        || (volume.name.starts_with(CNS_NAME_PREFIX) && volume.name != path.cns_volume_name())
}

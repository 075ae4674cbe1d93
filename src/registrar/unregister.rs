//! `unregister` and `collect_orphan`: the operations that remove CNS registrations (the
//! vmdk always stays). Each runs under the path's key and re-reads the stored state first.

use std::collections::BTreeSet;

use tokio::time::Instant;
use tracing::{info, instrument, warn};

use super::{Lane, RegisterError, Registrar, StatusUpdate, StoreErrorKind, Version};
use crate::backend::{CnsVolume, ErrorClass, TaskState, VolumeId};
use crate::volume_migration::Phase;
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
            // A create whose task still runs may land after the grace: not before it ended
            // (docs/design.md §4.4); a task that ended left its volume to be found below.
            if let Some(task) = self.marker_task(path, &state, token) {
                let running = self
                    .call(path, Lane::New, || self.backend.create_task_state(&task))
                    .await?;
                if running == TaskState::Running {
                    info!(%path, %task, "the create's task still runs; unregistering after it ended");
                    return Err(RegisterError::OutcomeUnknown {
                        path: path.clone(),
                        retry_after: self.config.adoption_poll,
                    });
                }
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
            for volume in live.iter().filter(|v| !proven_of(v, path)) {
                warn!(%path, volume_id = %volume.id, other = ?volume.backing_path, name = %volume.name,
                    "not unregistering: CNS does not say this volume backs this disk");
                ids.remove(&volume.id);
            }
        }
        ids.extend(found.into_iter().filter(|v| v.name == name).map(|v| v.id));
        // A volume the CSI driver's PVs or attachments use after cut-over stays
        // registered (docs/design.md §5.1).
        ids.retain(|id| {
            let users = self.users_of(id);
            if !users.is_empty() {
                warn!(%path, volume_id = %id, ?users,
                    "not unregistering: the CSI driver's objects use this volume");
            }
            users.is_empty()
        });

        // Both status writes are leader-fenced and conditional on the state this decision
        // was made on (docs/design.md §4.9): an object recreated and registered anew
        // meanwhile is never cleared by this replica.
        let mut version = state.as_ref().and_then(|s| s.version.clone());
        if state.is_some() {
            version = Some(
                self.save_fenced(path, &StatusUpdate::Unregistering, version.as_ref())
                    .await?,
            );
        }
        for id in &ids {
            self.delete(path, id).await?;
        }
        self.unsaved_map().remove(path);
        self.in_flight.forget(path);
        if state.is_some() {
            self.save_fenced(path, &StatusUpdate::Unregistered, version.as_ref())
                .await?;
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
        let users = self.users_of(id);
        if !users.is_empty() {
            info!(%path, %id, ?users, "orphan is used by the CSI driver's objects; kept");
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

    /// Saves an update that carries no volume ID, only as the leader and only over
    /// `expect`; retries an unavailable store, never a conflict (the state changed: the
    /// caller decides again from a fresh read).
    pub(super) async fn save_fenced(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, RegisterError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.fence(path)?;
            match self.store.save(path, update, expect).await {
                Ok(version) => return Ok(version),
                Err(e)
                    if e.kind == StoreErrorKind::Unavailable
                        && attempt < self.config.retry.attempts_per_call =>
                {
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

/// Whether CNS says `volume` backs `path`: its backing path is `path`, or it has no
/// backing path and volmig's name of `path`. Anything else is in doubt, and a volume in
/// doubt is never unregistered (docs/design.md §5.1).
fn proven_of(volume: &CnsVolume, path: &VolumePath) -> bool {
    match &volume.backing_path {
        Some(backing) => backing == path,
        None => volume.name == path.cns_volume_name(),
    }
}

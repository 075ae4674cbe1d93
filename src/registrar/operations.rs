//! `register` and `unregister`: the two operations that change CNS.

use std::collections::BTreeSet;
use std::time::Duration;

use tracing::{info, warn};

use super::{RegisterError, Registrar, Registration, StatusUpdate, choose_adoptee, create_request};
use crate::api::Phase;
use crate::backend::{ErrorClass, VolumeId};
use crate::volume_path::VolumePath;

impl Registrar {
    /// Registers `path` once: returns the stored ID, adopts an existing CNS volume, or
    /// creates one. Concurrent calls for one path end with the same ID and one volume.
    pub async fn register(&self, path: &VolumePath) -> Result<Registration, RegisterError> {
        let _key = self.locks.lock(path).await;

        // An ID from an earlier call whose status write failed is stored before anything else.
        let pending = self.unsaved_map().get(path).cloned();
        let state = self.load(path).await?;
        if let Some(volume_id) = pending {
            let attempts = state.as_ref().map_or(1, |s| s.attempts.max(1));
            self.store_id(path, volume_id.clone(), None, true, attempts)
                .await?;
            return Ok(Registration {
                volume_id,
                adopted: true,
                unchanged: false,
            });
        }
        if let Some(state) = &state
            && state.phase == Some(Phase::Registered)
            && let Some(volume_id) = &state.volume_id
        {
            return Ok(Registration {
                volume_id: volume_id.clone(),
                adopted: true,
                unchanged: true,
            });
        }

        self.register_and_record(path, state).await
    }

    /// Registers `path` again because its stored ID `missing` no longer exists in CNS.
    /// Adopts a volume that exists after all (the listing may have been stale) and does
    /// nothing when the stored ID changed meanwhile.
    pub async fn reregister(
        &self,
        path: &VolumePath,
        missing: &VolumeId,
    ) -> Result<Registration, RegisterError> {
        let _key = self.locks.lock(path).await;
        let state = self.load(path).await?;
        if let Some(state) = &state
            && state.phase == Some(Phase::Registered)
            && let Some(volume_id) = &state.volume_id
            && volume_id != missing
        {
            return Ok(Registration {
                volume_id: volume_id.clone(),
                adopted: true,
                unchanged: true,
            });
        }
        self.register_and_record(path, state).await
    }

    async fn register_and_record(
        &self,
        path: &VolumePath,
        state: Option<super::StoredState>,
    ) -> Result<Registration, RegisterError> {
        let attempts = state.as_ref().map_or(0, |s| s.attempts) + 1;
        let in_flight_since = state
            .filter(|s| s.phase == Some(Phase::Registering))
            .and_then(|s| s.registering_since);
        match self.register_locked(path, attempts, in_flight_since).await {
            Ok(registration) => Ok(registration),
            Err(error) => {
                self.record_failure(path, &error, attempts).await;
                Err(error)
            }
        }
    }

    async fn register_locked(
        &self,
        path: &VolumePath,
        attempts: u32,
        mut in_flight_since: Option<jiff::Timestamp>,
    ) -> Result<Registration, RegisterError> {
        let disk_uuid = match self.call(path, || self.backend.disk_uuid(path)).await {
            Ok(uuid) => uuid,
            Err(RegisterError::Backend { source, .. }) if source.class == ErrorClass::NotFound => {
                return Err(RegisterError::DiskNotFound {
                    path: path.clone(),
                    message: source.message,
                });
            }
            Err(other) => return Err(other),
        };

        let request = create_request(&self.config, path);
        let mut create_attempt = 0;
        loop {
            create_attempt += 1;
            // Adopt before create: a create that succeeded on the server but not for us
            // (crash, cancellation, lost response) is found here by its name.
            let existing = self
                .call(path, || self.backend.find_volumes(&request.name, path))
                .await?;
            if let Some(volume) = choose_adoptee(&existing, &request.name) {
                let volume_id = volume.id.clone();
                self.store_id(path, volume_id.clone(), Some(disk_uuid), true, attempts)
                    .await?;
                return Ok(Registration {
                    volume_id,
                    adopted: true,
                    unchanged: false,
                });
            }

            // A process that died after its write-ahead may have a create still running in
            // vCenter: give it the grace to finish, then look again before creating.
            if let Some(since) = in_flight_since.take() {
                let age = jiff::Timestamp::now().duration_since(since);
                let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
                if let Some(wait) = self.config.in_flight_grace.checked_sub(age)
                    && !wait.is_zero()
                {
                    info!(%path, ?wait, "an earlier create may still be in flight; waiting before creating");
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }

            let permit = self.enter(path).await?;
            // Write-ahead right before the create is sent (after waiting for a slot), so
            // its time bounds when the create can have started: a restarted registrar's
            // in-flight grace counts from it. Refreshed before every create attempt.
            self.write_ahead(path, attempts).await?;
            let created = self.backend.create_volume(&request).await;
            drop(permit);
            match created {
                Ok(volume_id) => {
                    self.store_id(path, volume_id.clone(), Some(disk_uuid), false, attempts)
                        .await?;
                    return Ok(Registration {
                        volume_id,
                        adopted: false,
                        unchanged: false,
                    });
                }
                // Never retry a create blindly: loop back to the adoption check first.
                Err(e)
                    if e.class.is_retryable()
                        && create_attempt < self.config.retry.attempts_per_call =>
                {
                    let delay = self.config.retry.delay(create_attempt);
                    warn!(%path, error = %e, ?delay, "create failed, checking for adoption before retrying");
                    tokio::time::sleep(delay).await;
                }
                Err(source) => {
                    return Err(RegisterError::Backend {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
    }

    /// Stores `Registering` dated now. A write that took long to land (API retries) is
    /// made again, so the create always follows its recorded time by well under the grace.
    async fn write_ahead(&self, path: &VolumePath, attempts: u32) -> Result<(), RegisterError> {
        let limit = self.config.in_flight_grace / 4;
        for _ in 0..5 {
            let since = jiff::Timestamp::now();
            self.save(path, StatusUpdate::Registering { attempts, since })
                .await?;
            let took = Duration::try_from(jiff::Timestamp::now().duration_since(since))
                .unwrap_or(Duration::MAX);
            if took <= limit {
                return Ok(());
            }
            warn!(%path, ?took, "the write-ahead took longer than a quarter of the in-flight grace; writing it again");
        }
        Err(RegisterError::Store {
            path: path.clone(),
            source: super::StoreError {
                path: path.to_string(),
                message: "the status writes are too slow to date a create safely".into(),
                retryable: true,
            },
        })
    }

    /// Keeps `volume_id` in memory, stores it, and forgets it only once stored.
    async fn store_id(
        &self,
        path: &VolumePath,
        volume_id: VolumeId,
        disk_uuid: Option<String>,
        adopted: bool,
        attempts: u32,
    ) -> Result<(), RegisterError> {
        self.unsaved_map().insert(path.clone(), volume_id.clone());
        let update = StatusUpdate::Registered {
            volume_id: volume_id.clone(),
            disk_uuid,
            adopted,
            attempts,
        };
        self.save(path, update).await?;
        self.unsaved_map().remove(path);
        Self::log_registered(path, &volume_id, adopted);
        Ok(())
    }

    async fn record_failure(&self, path: &VolumePath, error: &RegisterError, attempts: u32) {
        if matches!(
            error,
            RegisterError::NotLeader { .. } | RegisterError::Store { .. }
        ) {
            // Not leader: another replica owns the status. Store failing: nothing to write to.
            return;
        }
        let retry_after = error
            .is_retryable()
            .then(|| self.config.retry.delay(attempts));
        let update = StatusUpdate::Failed {
            reason: error.reason().to_owned(),
            message: error.to_string(),
            attempts,
            retry_after,
        };
        if let Err(e) = self.save(path, update).await {
            warn!(%path, error = %e, "could not record the failure in the status");
        }
    }

    /// Removes volmig's CNS registration of `path` (the vmdk stays) and clears the status.
    /// Unregistering a path that is not registered succeeds.
    pub async fn unregister(&self, path: &VolumePath) -> Result<(), RegisterError> {
        let _key = self.locks.lock(path).await;
        let state = self.load(path).await?;
        let name = path.cns_volume_name();

        let mut ids: BTreeSet<VolumeId> = BTreeSet::new();
        ids.extend(state.as_ref().and_then(|s| s.volume_id.clone()));
        ids.extend(self.unsaved_map().get(path).cloned());
        let found = self
            .call(path, || self.backend.find_volumes(&name, path))
            .await?;
        ids.extend(found.into_iter().filter(|v| v.name == name).map(|v| v.id));

        if state.is_some() {
            self.save(path, StatusUpdate::Unregistering).await?;
        }
        for id in &ids {
            match self.call(path, || self.backend.delete_volume(id)).await {
                Ok(()) => info!(%path, volume_id = %id, "unregistered (disk kept)"),
                Err(RegisterError::Backend { source, .. })
                    if source.class == ErrorClass::NotFound => {}
                Err(other) => return Err(other),
            }
        }
        self.unsaved_map().remove(path);
        if state.is_some() {
            self.save(path, StatusUpdate::Unregistered).await?;
        }
        Ok(())
    }

    async fn load(&self, path: &VolumePath) -> Result<Option<super::StoredState>, RegisterError> {
        self.store
            .load(path)
            .await
            .map_err(|source| RegisterError::Store {
                path: path.clone(),
                source,
            })
    }
}

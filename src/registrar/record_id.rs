//! Recording a volume ID in the status: adoption, the conditional ID write and its refusals
//! (docs/design.md §4.4, §4.9).

use rand::Rng;
use tracing::{info, warn};

use super::create::{Attempt, Found};
use super::{
    HeldSlot, RegisterError, Registrar, Registration, StatusUpdate, StoreError, StoreErrorKind,
    StoredState, Version, stages,
};
use crate::backend::VolumeId;
use crate::metrics::RegistrationStage;
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

impl Registrar {
    /// Records an existing CNS volume as the registration of `path` (adoption).
    pub(super) async fn adopt(
        &self,
        path: &VolumePath,
        id: VolumeId,
        disk_uuid: &str,
        attempts: u32,
        version: Option<Version>,
        held: &mut HeldSlot,
    ) -> Result<Attempt, RegisterError> {
        let found = Found {
            volume_id: id,
            disk_uuid: Some(disk_uuid.to_owned()),
            adopted: true,
        };
        self.record_id(path, found, attempts, version, held)
            .await
            .map(Attempt::Done)
    }

    pub(super) fn new_token(&self) -> String {
        format!(
            "{}/{:016x}",
            self.config.instance,
            rand::rng().random::<u64>()
        )
    }

    /// The error of an ID write refused because the path is being unregistered: the ID
    /// stays in memory, where the unregistration finds it (docs/design.md §4.9).
    pub(super) fn unregistration_in_progress(&self, path: &VolumePath) -> RegisterError {
        warn!(%path, "the path is being unregistered; the volume ID stays in memory for it");
        RegisterError::Store {
            path: path.clone(),
            source: StoreError::new(
                path,
                StoreErrorKind::Conflict,
                "the status is Unregistering: the volume ID is not written over it",
            ),
        }
    }

    /// Stores `volume_id` conditionally on `version` (the state it was decided on). Keeps it
    /// in memory until stored; never replaces another stored ID (rule 9): a write that
    /// loses its condition re-reads and yields to an ID stored meanwhile, and writes again
    /// only as the leader and never over `Unregistering`. Protection is
    /// the last backend call (under `held`'s slot); the slot is freed before the write.
    pub(super) async fn record_id(
        &self,
        path: &VolumePath,
        found: Found,
        attempts: u32,
        mut version: Option<Version>,
        held: &mut HeldSlot,
    ) -> Result<Registration, RegisterError> {
        let Found {
            volume_id,
            disk_uuid,
            adopted,
        } = found;
        self.unsaved_map().insert(path.clone(), volume_id.clone());
        let protected = self.try_protect(path, &volume_id, held).await;
        held.release();
        let update = StatusUpdate::Registered {
            volume_id: volume_id.clone(),
            disk_uuid,
            adopted,
            attempts,
            protected,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = stages::timed(
                RegistrationStage::StatusWriteResult,
                self.store.save(path, &update, version.as_ref()),
            )
            .await;
            match result {
                Ok(_) => {
                    self.unsaved_map().remove(path);
                    self.in_flight.forget(path);
                    info!(%path, %volume_id, adopted, "registered");
                    return Ok(Registration {
                        volume_id,
                        adopted,
                        unchanged: false,
                    });
                }
                Err(e) if e.kind == StoreErrorKind::Conflict => {
                    let fresh = self.load(path).await?;
                    if let Some(stored) = fresh.as_ref().and_then(StoredState::registered_id) {
                        self.unsaved_map().remove(path);
                        self.in_flight.forget(path);
                        if *stored != volume_id {
                            warn!(%path, kept = %stored, duplicate = %volume_id,
                                "another ID was stored meanwhile; keeping it (full sync reports the duplicate)");
                        }
                        return Ok(Registration {
                            volume_id: stored.clone(),
                            adopted: true,
                            unchanged: false,
                        });
                    }
                    // What changed may be another leader's work: write again only as the
                    // leader, and never over an unregistration (docs/design.md §4.9).
                    if unregistering(fresh.as_ref()) {
                        return Err(self.unregistration_in_progress(path));
                    }
                    self.fence(path)?;
                    version = fresh.and_then(|s| s.version);
                }
                Err(e) if e.is_retryable() && attempt < self.config.retry.attempts_per_call => {
                    let delay = self.config.retry.delay(attempt);
                    warn!(%path, error = %e, ?delay, "status write failed, retrying");
                    tokio::time::sleep(delay).await;
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

/// Whether `state` is an unregistration in progress, which no ID write may replace.
pub(super) fn unregistering(state: Option<&StoredState>) -> bool {
    state.is_some_and(|s| s.phase == Some(Phase::Unregistering))
}

//! `register` and `reregister`: the operations that create CNS registrations. Each runs
//! under the path's key and re-reads the stored state first (rule 1).

use std::future::Future;

use tokio::time::Instant;
use tracing::{info, instrument, warn};

use super::create::{Attempt, CreateStep, Found};
use super::record_id::unregistering;
use super::{
    HeldSlot, KeyGuard, Lane, RegisterError, Registrar, Registration, StatusUpdate, StoreErrorKind,
    StoredState, Version, choose_adoptee, create_request, stages,
};
use crate::backend::selection::date_volumes_of_one_disk;
use crate::backend::{CnsVolume, ErrorClass, VolumeId};
use crate::metrics::RegistrationStage;
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

/// Creates one `register` call may send at most; each after the grace of the one before.
const MAX_CREATES_PER_CALL: u32 = 2;

impl Registrar {
    /// Registers `path` once: returns the stored ID, adopts an existing CNS volume, or
    /// creates one. Concurrent calls for one path end with the same ID and one volume.
    #[instrument(skip(self), fields(%path))]
    pub async fn register(&self, path: &VolumePath) -> Result<Registration, RegisterError> {
        self.measured(async {
            let _key = self.lock_path(path).await;
            let state = self.load(path).await?;
            if let Some(registration) = self.store_unsaved(path, &state).await? {
                return Ok(registration);
            }
            if let Some(volume_id) = state.as_ref().and_then(StoredState::registered_id) {
                return Ok(Registration::already_stored(volume_id));
            }
            self.register_and_record(path, state).await
        })
        .await
    }

    /// Registers `path` again because its stored ID `missing` no longer exists in CNS.
    /// Adopts a volume that exists after all (the listing may have been stale) and does
    /// nothing when the stored ID changed meanwhile.
    #[instrument(skip(self), fields(%path, %missing))]
    pub async fn reregister(
        &self,
        path: &VolumePath,
        missing: &VolumeId,
    ) -> Result<Registration, RegisterError> {
        self.measured(async {
            let _key = self.lock_path(path).await;
            let state = self.load(path).await?;
            if let Some(volume_id) = state.as_ref().and_then(StoredState::registered_id)
                && volume_id != missing
            {
                return Ok(Registration::already_stored(volume_id));
            }
            self.register_and_record(path, state).await
        })
        .await
    }

    /// Runs one registration under a fresh stage clock and records its stages
    /// (`volmig_registration_stage_seconds`) unless nothing was done (the status already
    /// held the ID).
    async fn measured(
        &self,
        registration: impl Future<Output = Result<Registration, RegisterError>>,
    ) -> Result<Registration, RegisterError> {
        let counts = |outcome: &Result<Registration, RegisterError>| !matches!(outcome, Ok(registration) if registration.unchanged);
        stages::measured(self.config.metrics.as_ref(), counts, registration).await
    }

    /// Waits for the path's key (another operation on the same vmdk may hold it).
    async fn lock_path(&self, path: &VolumePath) -> KeyGuard<VolumePath> {
        stages::timed(RegistrationStage::PathLockWait, self.locks.lock(path)).await
    }

    /// An ID from an earlier call whose status write failed is stored before anything
    /// else — but only if CNS still has it and the stored status holds no other ID
    /// (leadership may have moved meanwhile, rule 9).
    async fn store_unsaved(
        &self,
        path: &VolumePath,
        state: &Option<StoredState>,
    ) -> Result<Option<Registration>, RegisterError> {
        let Some(volume_id) = self.unsaved_map().get(path).cloned() else {
            return Ok(None);
        };
        if unregistering(state.as_ref()) {
            return Err(self.unregistration_in_progress(path));
        }
        if let Some(stored) = state.as_ref().and_then(StoredState::registered_id) {
            if *stored != volume_id {
                warn!(%path, kept = %stored, dropped = %volume_id,
                    "the status holds another ID than the one kept in memory; keeping the stored one");
            }
            self.unsaved_map().remove(path);
            return Ok(None);
        }
        let name = path.cns_volume_name();
        let mut held = HeldSlot::none();
        let live = self
            .call_held(path, &mut held, Lane::New, || {
                self.backend.find_volumes(&name, path)
            })
            .await?;
        if !live.iter().any(|v| v.id == volume_id) {
            warn!(%path, %volume_id, "the ID kept in memory is gone from CNS; registering afresh");
            self.unsaved_map().remove(path);
            return Ok(None);
        }
        let attempts = state.as_ref().map_or(1, |s| s.attempts.max(1));
        let version = state.as_ref().and_then(|s| s.version.clone());
        let found = Found {
            volume_id,
            disk_uuid: None,
            adopted: true,
        };
        self.record_id(path, found, attempts, version, &mut held)
            .await
            .map(Some)
    }

    async fn register_and_record(
        &self,
        path: &VolumePath,
        state: Option<StoredState>,
    ) -> Result<Registration, RegisterError> {
        let attempts = state.as_ref().map_or(0, |s| s.attempts) + 1;
        match self.register_locked(path, attempts, state).await {
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
        mut state: Option<StoredState>,
    ) -> Result<Registration, RegisterError> {
        // One slot from the first call to the last (released while waiting otherwise).
        let mut held = HeldSlot::none();
        let disk_uuid = match self
            .call_held(path, &mut held, Lane::New, || self.backend.disk_uuid(path))
            .await
        {
            Ok(uuid) => uuid,
            Err(RegisterError::Backend { source, .. }) if source.class == ErrorClass::NotFound => {
                return Err(RegisterError::DiskNotFound {
                    path: path.clone(),
                    message: source.message,
                });
            }
            Err(other) => return Err(other),
        };
        let mut creates = 0;
        loop {
            match self
                .attempt(path, attempts, &disk_uuid, &state, &mut creates, &mut held)
                .await?
            {
                Attempt::Done(registration) => return Ok(registration),
                Attempt::Reread(fresh) => {
                    if let Some(volume_id) = fresh.as_ref().and_then(StoredState::registered_id) {
                        return Ok(Registration {
                            volume_id: volume_id.clone(),
                            adopted: true,
                            unchanged: false,
                        });
                    }
                    state = fresh;
                }
            }
        }
    }

    /// One look at CNS, then (if nothing can be adopted and no create is in flight) one
    /// write-ahead and one create, under the slot in `held` while they follow each other.
    async fn attempt(
        &self,
        path: &VolumePath,
        attempts: u32,
        disk_uuid: &str,
        state: &Option<StoredState>,
        creates: &mut u32,
        held: &mut HeldSlot,
    ) -> Result<Attempt, RegisterError> {
        let policy = state.as_ref().and_then(|s| s.storage_policy.clone());
        let request = create_request(&self.config, path, policy);
        let grace = self.config.in_flight_grace;
        let version = state.as_ref().and_then(|s| s.version.clone());
        // A create of this process still in doubt is a marker too, whatever the status
        // says now (another writer may have replaced the stored one).
        let marker = state
            .as_ref()
            .filter(|s| s.phase == Some(Phase::Registering))
            .and_then(|s| s.marker.clone())
            .or_else(|| self.in_flight.pending(path, grace));
        // The CSI driver's own cache is the first adoption source (docs/design.md §8.2): pods may
        // already be attached with the ID it holds.
        if let Some(lookup) = &self.config.driver_ids {
            let ids = lookup(path);
            if !ids.is_empty() {
                let mut live = self
                    .call_held(path, held, Lane::Started, || async {
                        let mut live = self.backend.volumes_by_id(&ids).await?;
                        date_volumes_of_one_disk(self.backend.as_ref(), &mut live).await;
                        Ok(live)
                    })
                    .await?;
                // An ID is adopted only when CNS says it backs this vmdk (docs/design.md
                // §4.3): a stale or hand-made object may map the path to another disk.
                live.retain(|volume| match &volume.backing_path {
                    Some(backing) if backing != path => {
                        warn!(%path, volume_id = %volume.id, backs = %backing,
                            "not adopting the ID the CSI driver's cache holds: CNS says it backs another disk");
                        false
                    }
                    _ => true,
                });
                if let Some(volume) = crate::backend::selection::oldest(&live) {
                    info!(%path, volume_id = %volume.id, "adopting the ID the CSI driver's cache holds");
                    return self
                        .adopt(path, volume.id.clone(), disk_uuid, attempts, version, held)
                        .await;
                }
            }
        }
        let step = CreateStep {
            path,
            attempts,
            disk_uuid,
            request: &request,
        };
        let Some(token) = &marker else {
            if *creates >= MAX_CREATES_PER_CALL {
                held.release();
                return Err(self.outcome_unknown(path, *creates));
            }
            if let Err(not_registrar) = self.may_create(path) {
                // The driver's syncer registers: look, adopt what it made, write nothing
                // ahead (docs/design.md §8.2).
                return self.look_only(&step, version, held, not_registrar).await;
            }
            return self.look_and_create(&step, version, creates, held).await;
        };
        // A create whose task is known is followed to its end first (docs/design.md §4.4).
        if let Some(task) = self.marker_task(path, state, token)
            && let Some(id) = self.follow_task(path, token, &task, held).await?
            && let Some(id) = self.proven_result(path, &task, id, held).await?
        {
            return self
                .adopt(path, id, disk_uuid, attempts, version, held)
                .await;
        }
        loop {
            // Adopt before create: a create that succeeded on the server but not for us
            // (crash, cancellation, lost response, late task) is found here.
            let existing = self.look(path, &request.name, held).await?;
            if let Some(volume) = choose_adoptee(&existing, &request.name) {
                return self
                    .adopt(path, volume.id.clone(), disk_uuid, attempts, version, held)
                    .await;
            }
            // A create under this marker may still run in vCenter: only look until its
            // grace is over (rule 8).
            let deadline = self.in_flight.deadline(path, token, grace);
            let now = Instant::now();
            if now >= deadline {
                info!(%path, "the in-flight grace is over and no volume appeared; creating");
                break;
            }
            let wait = (deadline - now).min(self.config.adoption_poll);
            info!(%path, ?wait, "a create may still be in flight; looking again before creating");
            held.release();
            tokio::time::sleep(wait).await;
        }
        if *creates >= MAX_CREATES_PER_CALL {
            held.release();
            return Err(self.outcome_unknown(path, *creates));
        }
        if let Err(not_registrar) = self.may_create(path) {
            held.release();
            return Err(not_registrar);
        }

        // The marker is written under the create's slot: it dates a create that can start
        // right after it, not one still queued for a slot.
        let permit = self.enter_held(path, held, Lane::Started).await?;
        let token = self.new_token();
        let write_ahead = StatusUpdate::Registering {
            attempts,
            token: token.clone(),
        };
        let saved = stages::timed(
            RegistrationStage::StatusWriteAhead,
            self.store.save(path, &write_ahead, version.as_ref()),
        )
        .await;
        match saved {
            Ok(version) => {
                self.create(&step, permit, &token, version, creates, held)
                    .await
            }
            Err(e) if e.kind == StoreErrorKind::Conflict => {
                drop(permit);
                Ok(Attempt::Reread(self.load(path).await?))
            }
            Err(source) => Err(RegisterError::Store {
                path: path.clone(),
                source,
            }),
        }
    }

    /// The volumes of `path` under volmig's `name` or its backing disk, duplicates dated
    /// (the look before every create, docs/design.md §4.3), under the slot in `held`.
    pub(super) async fn look(
        &self,
        path: &VolumePath,
        name: &str,
        held: &mut HeldSlot,
    ) -> Result<Vec<CnsVolume>, RegisterError> {
        self.call_held(path, held, Lane::Started, || async {
            let mut found = self.backend.find_volumes(name, path).await?;
            date_volumes_of_one_disk(self.backend.as_ref(), &mut found).await;
            Ok(found)
        })
        .await
    }

    /// One look at CNS without a write-ahead: adopts a volume of the path if there is one,
    /// else fails with `not_registrar` (volmig may not create now).
    async fn look_only(
        &self,
        step: &CreateStep<'_>,
        version: Option<Version>,
        held: &mut HeldSlot,
        not_registrar: RegisterError,
    ) -> Result<Attempt, RegisterError> {
        let path = step.path;
        let existing = self.look(path, &step.request.name, held).await?;
        match choose_adoptee(&existing, &step.request.name) {
            Some(volume) => {
                info!(%path, volume_id = %volume.id, "adopting the volume the CSI driver registered");
                self.adopt(
                    path,
                    volume.id.clone(),
                    step.disk_uuid,
                    step.attempts,
                    version,
                    held,
                )
                .await
            }
            None => {
                held.release();
                Err(not_registrar)
            }
        }
    }

    fn outcome_unknown(&self, path: &VolumePath, creates: u32) -> RegisterError {
        RegisterError::OutcomeUnknown {
            path: path.clone(),
            retry_after: self.config.retry.delay(creates),
        }
    }
}

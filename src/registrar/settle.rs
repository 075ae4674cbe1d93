//! `settle`: resolving the create in flight of an object being deleted (docs/design.md
//! §5.4) without ever creating: the volume that lands is recorded, and a marker under which
//! nothing can land any more is released, so the finalizer can go.

use tokio::time::Instant;
use tracing::{info, instrument};

use super::create::Found;
use super::{HeldSlot, RegisterError, Registrar, StatusUpdate, choose_adoptee, reason};
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

impl Registrar {
    /// Resolves the `Registering` marker of `path`, if there is one: follows its create's
    /// task or waits out its grace (looking every `adoption_poll`), then records the volume
    /// that landed (adopted), or, when none did, records that no create is in flight any
    /// more (`Failed`, reason `CreateOutcomeUnknown`, no retry). Never creates. A task
    /// still running past the grace ends with [`RegisterError::OutcomeUnknown`].
    #[instrument(skip(self), fields(%path))]
    pub async fn settle(&self, path: &VolumePath) -> Result<(), RegisterError> {
        let _key = self.locks.lock(path).await;
        let state = self.load(path).await?;
        let Some(token) = state
            .as_ref()
            .filter(|s| s.phase == Some(Phase::Registering))
            .and_then(|s| s.marker.clone())
        else {
            return Ok(());
        };
        let attempts = state.as_ref().map_or(1, |s| s.attempts.max(1));
        let version = state.as_ref().and_then(|s| s.version.clone());
        let mut held = HeldSlot::none();
        let adopt = |volume_id| Found {
            volume_id,
            disk_uuid: None,
            adopted: true,
        };
        if let Some(task) = self.marker_task(path, &state, &token)
            && let Some(id) = self.follow_task(path, &token, &task, &mut held).await?
            && let Some(id) = self.proven_result(path, &task, id, &mut held).await?
        {
            self.record_id(path, adopt(id), attempts, version, &mut held)
                .await?;
            return Ok(());
        }
        let name = path.cns_volume_name();
        loop {
            let found = self.look(path, &name, &mut held).await?;
            if let Some(volume) = choose_adoptee(&found, &name) {
                let id = volume.id.clone();
                self.record_id(path, adopt(id), attempts, version, &mut held)
                    .await?;
                return Ok(());
            }
            let deadline = self
                .in_flight
                .deadline(path, &token, self.config.in_flight_grace);
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            held.release();
            tokio::time::sleep((deadline - now).min(self.config.adoption_poll)).await;
        }
        held.release();
        // The grace is over and a look after it found nothing: no create can land under
        // the marker any more (docs/design.md §4.8).
        info!(%path, "no volume landed under the marker of the object being deleted; releasing it");
        let failed = StatusUpdate::Failed {
            reason: reason::CREATE_OUTCOME_UNKNOWN.to_owned(),
            message: "the object is being deleted and no volume landed under its create's marker"
                .to_owned(),
            attempts,
            retry_after: None,
        };
        self.save_fenced(path, &failed, version.as_ref()).await?;
        self.in_flight.forget(path);
        Ok(())
    }
}

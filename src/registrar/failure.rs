//! Recording a failed registration (docs/design.md §4.8): a `Registering` marker is cleared
//! only by proof that no create can still land under it.

use tracing::warn;

use super::{RegisterError, Registrar, StatusUpdate, StoredState, stages};
use crate::metrics::RegistrationStage;
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

impl Registrar {
    /// Records a failure in the status. A stored `Registering` marker is cleared only by
    /// proof that no create can still land under it (vCenter refused that create): any
    /// other failure is recorded beside the marker (`Stalled`), so the next attempt still
    /// waits for the create (docs/design.md §4.8). Leader-fenced and conditional on a fresh
    /// read (§4.9).
    pub(super) async fn record_failure(
        &self,
        path: &VolumePath,
        error: &RegisterError,
        attempts: u32,
    ) {
        if matches!(
            error,
            RegisterError::NotLeader { .. }
                | RegisterError::NotRegistrar { .. }
                | RegisterError::Store { .. }
                | RegisterError::OutcomeUnknown { .. }
        ) {
            return;
        }
        // Conditional on a fresh read: a failure never hides an ID stored meanwhile.
        let current =
            match stages::timed(RegistrationStage::StatusRead, self.store.load(path)).await {
                Ok(Some(state)) if state.registered_id().is_some() => return,
                Ok(state) => state.unwrap_or_default(),
                Err(e) => {
                    warn!(%path, error = %e, "could not record the failure in the status");
                    return;
                }
            };
        let update = match decide_failure_record(
            &current,
            |token| self.in_flight.is_ended(path, token),
            self.in_flight.in_doubt(path, self.config.in_flight_grace),
        ) {
            FailureRecord::Nothing => return,
            FailureRecord::BesideMarker => StatusUpdate::Stalled {
                reason: error.reason().to_owned(),
                message: crate::error_chain(error),
            },
            FailureRecord::Failed => StatusUpdate::Failed {
                reason: error.reason().to_owned(),
                message: crate::error_chain(error),
                attempts,
                retry_after: error
                    .is_retryable()
                    .then(|| self.config.retry.delay(attempts)),
            },
        };
        if self.fence(path).is_err() {
            return;
        }
        let saved = stages::timed(
            RegistrationStage::StatusWriteResult,
            self.store.save(path, &update, current.version.as_ref()),
        )
        .await;
        match saved {
            Ok(_) if matches!(update, StatusUpdate::Failed { .. }) => self.in_flight.forget(path),
            Ok(_) => {}
            Err(e) => warn!(%path, error = %e, "could not record the failure in the status"),
        }
    }
}

/// How a failed attempt may be recorded over the stored state.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FailureRecord {
    /// Write nothing: a create of this process may be in flight and no marker says so.
    Nothing,
    /// Record the error and keep phase and marker (`Stalled`).
    BesideMarker,
    /// `Failed`: no create can be in flight.
    Failed,
}

/// Pure: what a failure may write over `current`. `ended(token)` is true when vCenter
/// refused the create under that marker; `own_in_doubt` when this process has a create of
/// the path in doubt.
pub(super) fn decide_failure_record(
    current: &StoredState,
    ended: impl Fn(&str) -> bool,
    own_in_doubt: bool,
) -> FailureRecord {
    let marker = current
        .marker
        .as_deref()
        .filter(|_| current.phase == Some(Phase::Registering));
    match marker {
        Some(token) if ended(token) => FailureRecord::Failed,
        Some(_) => FailureRecord::BesideMarker,
        None if own_in_doubt => FailureRecord::Nothing,
        None => FailureRecord::Failed,
    }
}

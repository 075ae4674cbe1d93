//! Following the vCenter task of a create in flight (docs/design.md §4.4, §4.10): a marker
//! that carries the task of its create is never followed by another create while that
//! task is queued or running, however long it runs.

use tokio::time::Instant;
use tracing::{info, warn};

use super::{HeldSlot, Lane, RegisterError, Registrar, StoredState};
use crate::backend::{TaskState, VolumeId};
use crate::volume_path::VolumePath;

impl Registrar {
    /// The task of the create sent under the marker `token`: the one recorded beside the
    /// stored marker (any replica's), else the one this process heard of for its own.
    pub(super) fn marker_task(
        &self,
        path: &VolumePath,
        state: &Option<StoredState>,
        token: &str,
    ) -> Option<String> {
        state
            .as_ref()
            .filter(|s| s.marker.as_deref() == Some(token))
            .and_then(|s| s.task.clone())
            .or_else(|| self.in_flight.task(path, token))
    }

    /// `id`, the result of `task` followed for `path`, when CNS shows it to be this vmdk's
    /// volume: its backing path, or no backing path and volmig's name of the path. A
    /// hand-made or stale `registeringTask` may name another disk's create: its volume is
    /// reported and `None` returned, and the look goes on (docs/design.md §4.4).
    pub(super) async fn proven_result(
        &self,
        path: &VolumePath,
        task: &str,
        id: VolumeId,
        held: &mut HeldSlot,
    ) -> Result<Option<VolumeId>, RegisterError> {
        let live = self
            .call_held(path, held, Lane::Started, || {
                self.backend.volumes_by_id(std::slice::from_ref(&id))
            })
            .await?;
        let proven = live.iter().any(|v| {
            v.id == id
                && match &v.backing_path {
                    Some(backing) => backing == path,
                    None => v.name == path.cns_volume_name(),
                }
        });
        if !proven {
            warn!(%path, %task, volume_id = %id,
                "not adopting the result of the marker's task: CNS does not show it to be this disk's volume");
        }
        Ok(proven.then_some(id))
    }

    /// Follows `task`, the create of the marker `token`, under the slot in `held` (freed
    /// while waiting). `Some(id)`: it ended with a volume, to adopt. `None`: it ended in
    /// error (no create can land under the marker any more: the look then creates), or
    /// vCenter does not know it (the grace rule applies). Still running when the marker's
    /// grace is over: [`RegisterError::OutcomeUnknown`], to look again after the poll
    /// interval — never a create.
    pub(super) async fn follow_task(
        &self,
        path: &VolumePath,
        token: &str,
        task: &str,
        held: &mut HeldSlot,
    ) -> Result<Option<VolumeId>, RegisterError> {
        let grace = self.config.in_flight_grace;
        loop {
            let state = self
                .call_held(path, held, Lane::Started, || {
                    self.backend.create_task_state(task)
                })
                .await?;
            match state {
                TaskState::Succeeded(volume_id) => {
                    info!(%path, %task, %volume_id, "the create's task ended with a volume");
                    return Ok(Some(volume_id));
                }
                TaskState::Failed(error) => {
                    info!(%path, %task, %error, "the create's task failed: nothing can land under its marker");
                    self.in_flight.task_failed(path, token);
                    return Ok(None);
                }
                TaskState::Unknown => {
                    info!(%path, %task, "vCenter does not know the create's task; waiting out the in-flight grace");
                    self.in_flight.task_unknown(path, token);
                    return Ok(None);
                }
                TaskState::Running => {}
            }
            held.release();
            let deadline = self.in_flight.deadline(path, token, grace);
            let now = Instant::now();
            if now >= deadline {
                info!(%path, %task, "the create's task still runs; looking again later");
                return Err(RegisterError::OutcomeUnknown {
                    path: path.clone(),
                    retry_after: self.config.adoption_poll,
                });
            }
            let wait = (deadline - now).min(self.config.adoption_poll);
            info!(%path, %task, ?wait, "the create's task still runs in vCenter; following it");
            tokio::time::sleep(wait).await;
        }
    }
}

//! The create step of a registration: the write-ahead, the fence and the create itself,
//! and the first look at CNS, which the write-ahead overlaps when no create can be in
//! flight (docs/design.md §4.2). A create whose task runs longer than
//! [`TASK_RECORD_AFTER`] has that task recorded beside its marker (§4.4).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{
    HeldSlot, Lane, RegisterError, Registrar, Registration, Slot, StatusUpdate, StoreError,
    StoreErrorKind, StoredState, Version, choose_adoptee, stages,
};
use crate::backend::{BackendError, CnsVolume, CreateVolumeRequest, SendFence, VolumeId};
use crate::metrics::RegistrationStage;
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

/// How long a create may run before its vCenter task is recorded beside its marker
/// (`status.registeringTask`, docs/design.md §4.4): a create that ends sooner costs no
/// status write more; one that runs longer (or ends in doubt with its task known) is
/// followed to its end by whoever reads the marker next.
pub(super) const TASK_RECORD_AFTER: Duration = Duration::from_secs(1);

/// The volume a registration records: the one it created, or one it adopted.
pub(super) struct Found {
    pub volume_id: VolumeId,
    pub disk_uuid: Option<String>,
    pub adopted: bool,
}

/// The outcome of one pass of the create loop.
pub(super) enum Attempt {
    Done(Registration),
    /// The state changed under us (a conditional write lost): decide again from it.
    Reread(Option<StoredState>),
}

/// What one registration is creating: the path, its disk and the request.
pub(super) struct CreateStep<'a> {
    pub path: &'a VolumePath,
    pub attempts: u32,
    pub disk_uuid: &'a str,
    pub request: &'a CreateVolumeRequest,
}

impl Registrar {
    /// Looks for a volume to adopt while the write-ahead is stored, then creates if there
    /// is none. Only for a status without a marker: no create of this path can be in
    /// flight, so nothing the look finds can change what the write-ahead says, and the
    /// create that follows an empty look does not wait for one more status write.
    ///
    /// Both run under the slot in `held` (the look's): the marker still dates a create
    /// that starts right after it. A look that fails leaves the marker of a create that
    /// was never sent (recorded as such in [`super::InFlight`]); the failure recorded after
    /// it replaces the marker.
    pub(super) async fn look_and_create(
        &self,
        step: &CreateStep<'_>,
        version: Option<Version>,
        creates: &mut u32,
        held: &mut HeldSlot,
    ) -> Result<Attempt, RegisterError> {
        let path = step.path;
        let token = self.new_token();
        let write_ahead = StatusUpdate::Registering {
            attempts: step.attempts,
            token: token.clone(),
        };
        let look = async {
            let found = self.look(path, &step.request.name, held).await;
            (found, Instant::now())
        };
        let save = async {
            let saved = self.store.save(path, &write_ahead, version.as_ref()).await;
            (saved, Instant::now())
        };
        let ((found, looked_at), (saved, saved_at)) = tokio::join!(look, save);
        // The look is a vCenter call already; the write-ahead costs what it adds after it.
        stages::add(
            RegistrationStage::StatusWriteAhead,
            saved_at.saturating_duration_since(looked_at),
        );
        let found = match found {
            Ok(found) => found,
            Err(e) => {
                // No create was sent under this write-ahead: its marker proves nothing in
                // flight, and the failure recorded next may replace it.
                self.in_flight.not_sent(path, &token);
                return Err(e);
            }
        };
        match decide_first_look(found, saved, &step.request.name) {
            FirstLook::Adopt { id, version } => {
                self.adopt(path, id, step.disk_uuid, step.attempts, version, held)
                    .await
            }
            FirstLook::Create { version } => {
                let permit = self.enter_held(path, held, Lane::Started).await?;
                self.create(step, permit, &token, version, creates, held)
                    .await
            }
            FirstLook::Reread => {
                held.release();
                Ok(Attempt::Reread(self.load(path).await?))
            }
            FirstLook::StoreFailed(source) => Err(RegisterError::Store {
                path: path.clone(),
                source,
            }),
        }
    }

    /// Sends the create under `permit` after its write-ahead (`token`, stored as
    /// `version`) and records the ID it returns.
    pub(super) async fn create(
        &self,
        step: &CreateStep<'_>,
        permit: Slot,
        token: &str,
        version: Version,
        creates: &mut u32,
        held: &mut HeldSlot,
    ) -> Result<Attempt, RegisterError> {
        let path = step.path;
        // Fencing: the write-ahead may have taken long; only a current leader creates, and
        // only while the CSI driver's syncer does not (docs/design.md §8.2).
        self.fence(path)?;
        if let Err(not_registrar) = self.may_create(path) {
            // Nothing was sent under this marker.
            self.in_flight.not_sent(path, token);
            return Err(not_registrar);
        }
        // Both are asked again immediately before the request is written, and the grace
        // of this marker starts then (docs/design.md §4.9, §4.10).
        self.in_flight.started(path, token);
        let (task_tx, task_rx) = watch::channel(None);
        let request = self.fenced(step.request, path, token, task_tx);
        *creates += 1;
        let (created, recorded) = stages::timed(
            RegistrationStage::VcenterCall,
            self.send_create(path, token, &request, task_rx.clone(), &version),
        )
        .await;
        let task_recorded = recorded.is_some();
        let version = recorded.unwrap_or(version);
        match created {
            Err(e) if e.is_called_off() => {
                drop(permit);
                self.in_flight.not_sent(path, token);
                self.fence(path)?;
                self.may_create(path)?;
                // Both allowed it again by now: decide afresh.
                Ok(Attempt::Reread(self.load(path).await?))
            }
            Ok(id) => {
                held.0 = Some(permit);
                let found = Found {
                    volume_id: id,
                    disk_uuid: Some(step.disk_uuid.to_owned()),
                    adopted: false,
                };
                self.record_id(path, found, step.attempts, Some(version), held)
                    .await
                    .map(Attempt::Done)
            }
            Err(e) if e.may_still_complete() => {
                drop(permit);
                // Timeout, lost reply, any failure while following its task: the create
                // may still complete (docs/design.md §4.8). Its task, if vCenter named
                // one, is followed to its end from the marker (§4.4).
                let task = task_rx.borrow().clone();
                match task {
                    Some(task) => {
                        warn!(%path, error = %e, %task, "create outcome unknown; following its task");
                        if !task_recorded {
                            self.record_task(path, token, &task, &version).await;
                        }
                    }
                    None => {
                        warn!(%path, error = %e, "create outcome unknown; not creating again before its grace is over");
                    }
                }
                Ok(Attempt::Reread(self.load(path).await?))
            }
            Err(source) => {
                drop(permit);
                // vCenter refused the create: nothing is in flight under this marker.
                self.in_flight.ended(path, token);
                Err(RegisterError::Backend {
                    path: path.clone(),
                    source,
                })
            }
        }
    }
}

impl Registrar {
    /// `request` with a fence that asks leadership and the registrar mode right before it
    /// is sent, and restarts the marker's own grace at that moment; the task vCenter runs
    /// it as goes to this process's record of the marker and to `task`.
    fn fenced(
        &self,
        request: &CreateVolumeRequest,
        path: &VolumePath,
        token: &str,
        task: watch::Sender<Option<String>>,
    ) -> CreateVolumeRequest {
        let leader = self.config.leader.clone();
        let mode = self.config.mode.clone();
        let in_flight = self.in_flight.clone();
        let (path, token) = (path.clone(), token.to_owned());
        let (task_path, task_token, task_in_flight) =
            (path.clone(), token.clone(), in_flight.clone());
        let fence = SendFence::new(move || {
            if !leader.is_open() {
                return Err("not the leader any more".to_owned());
            }
            mode.may_create().map_err(|e| e.to_string())?;
            in_flight.started(&path, &token);
            Ok(())
        })
        .with_task_sink(move |moref| {
            task_in_flight.task_started(&task_path, &task_token, moref);
            task.send_replace(Some(moref.to_owned()));
        });
        CreateVolumeRequest {
            fence,
            ..request.clone()
        }
    }

    /// Sends the create; if it has not ended [`TASK_RECORD_AFTER`] after it started and
    /// vCenter named its task, records that task beside the marker while the create goes
    /// on (the version that write produced, if it succeeded, is returned beside the
    /// create's result).
    async fn send_create(
        &self,
        path: &VolumePath,
        token: &str,
        request: &CreateVolumeRequest,
        mut task: watch::Receiver<Option<String>>,
        version: &Version,
    ) -> (Result<VolumeId, BackendError>, Option<Version>) {
        let create = self.backend.create_volume(request);
        tokio::pin!(create);
        let due = async move {
            tokio::time::sleep(TASK_RECORD_AFTER).await;
            let named = task.wait_for(Option::is_some).await;
            named.ok().and_then(|t| t.clone())
        };
        tokio::select! {
            biased;
            created = &mut create => (created, None),
            Some(task) = due => {
                let record = self.record_task(path, token, &task, version);
                tokio::join!(create, record)
            }
        }
    }

    /// Records `task` beside the marker `token` (`TaskRecorded`), conditional on `version`,
    /// the write-ahead's (docs/design.md §4.4). Not leader-fenced: it only annotates this
    /// process's own marker, and a successor asks vCenter about the task it finds there. A
    /// write that loses its condition reads again and writes while the marker's token
    /// stands; a failed write changes nothing here (this process still follows the task).
    pub(super) async fn record_task(
        &self,
        path: &VolumePath,
        token: &str,
        task: &str,
        version: &Version,
    ) -> Option<Version> {
        let update = StatusUpdate::TaskRecorded {
            token: token.to_owned(),
            task: task.to_owned(),
        };
        let mut expect = version.clone();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match self.store.save(path, &update, Some(&expect)).await {
                Ok(version) => {
                    info!(%path, %task, "create task recorded beside its marker");
                    return Some(version);
                }
                Err(e) => e,
            };
            if attempt >= self.config.retry.attempts_per_call || !error.is_retryable() {
                warn!(%path, %task, error = %error, "could not record the create's task");
                return None;
            }
            if error.kind == StoreErrorKind::Conflict {
                let fresh = self.store.load(path).await.ok().flatten();
                let stands = fresh.as_ref().is_some_and(|s| {
                    s.phase == Some(Phase::Registering) && s.marker.as_deref() == Some(token)
                });
                match fresh.and_then(|s| s.version).filter(|_| stands) {
                    Some(fresh) => expect = fresh,
                    None => {
                        info!(%path, %task, "the marker was replaced; its task is not recorded");
                        return None;
                    }
                }
            } else {
                tokio::time::sleep(self.config.retry.delay(attempt)).await;
            }
        }
    }
}

/// What a first look and the write-ahead beside it lead to.
#[derive(Debug)]
enum FirstLook {
    /// A volume exists: record it, conditional on the write-ahead's version.
    Adopt {
        id: VolumeId,
        version: Option<Version>,
    },
    /// Nothing to adopt and the write-ahead stored: create under it.
    Create { version: Version },
    /// The status changed under us: decide again from a fresh read.
    Reread,
    /// The write-ahead failed for another reason.
    StoreFailed(StoreError),
}

/// Pure: the outcome of a successful look (`found`) and of the write-ahead (`saved`).
fn decide_first_look(
    found: Vec<CnsVolume>,
    saved: Result<Version, StoreError>,
    name: &str,
) -> FirstLook {
    match (choose_adoptee(&found, name), saved) {
        (_, Err(e)) if e.kind == StoreErrorKind::Conflict => FirstLook::Reread,
        (_, Err(e)) => FirstLook::StoreFailed(e),
        (Some(volume), Ok(version)) => FirstLook::Adopt {
            id: volume.id.clone(),
            version: Some(version),
        },
        (None, Ok(version)) => FirstLook::Create { version },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CnsVolume;

    fn volume(id: &str, name: &str) -> CnsVolume {
        CnsVolume {
            id: VolumeId::from(id),
            name: name.to_owned(),
            backing_path: None,
            created: None,
            cluster_ids: Vec::new(),
        }
    }

    fn stale() -> StoreError {
        StoreError::new(
            &VolumePath::parse("[ds] a.vmdk").unwrap(),
            StoreErrorKind::Conflict,
            "stale",
        )
    }

    #[test]
    fn an_empty_look_creates_under_the_stored_write_ahead() {
        let out = decide_first_look(vec![], Ok(Version("7".into())), "n");
        assert!(matches!(out, FirstLook::Create { version } if version.0 == "7"));
    }

    #[test]
    fn a_found_volume_is_adopted_on_the_write_aheads_version() {
        let out = decide_first_look(vec![volume("v-1", "n")], Ok(Version("7".into())), "n");
        assert!(
            matches!(&out, FirstLook::Adopt { id, version: Some(v) } if id.0 == "v-1" && v.0 == "7"),
            "{out:?}"
        );
    }

    #[test]
    fn a_lost_write_ahead_rereads_whatever_the_look_found() {
        for found in [vec![], vec![volume("v-1", "n")]] {
            let out = decide_first_look(found, Err(stale()), "n");
            assert!(matches!(out, FirstLook::Reread), "{out:?}");
        }
    }

    #[test]
    fn a_failed_write_ahead_is_an_error_whatever_the_look_found() {
        let unavailable = || {
            StoreError::new(
                &VolumePath::parse("[ds] a.vmdk").unwrap(),
                StoreErrorKind::Unavailable,
                "down",
            )
        };
        for found in [vec![], vec![volume("v-1", "n")]] {
            let out = decide_first_look(found, Err(unavailable()), "n");
            assert!(matches!(out, FirstLook::StoreFailed(_)), "{out:?}");
        }
    }
}

//! Where the registrar persists what it did: the status of a VolumeMigration in the
//! cluster ([`crate::k8s::status::KubeStatusStore`]), or an in-memory map in tests.
//!
//! Every write can be made conditional on the [`Version`] the registrar read or wrote last
//! (docs/design.md §4.9): a volume ID is only ever written over the state it was decided on.

use std::time::Duration;

use async_trait::async_trait;

use crate::backend::VolumeId;
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

/// An opaque version of a stored status (the object's `resourceVersion`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

/// The part of a stored status the registrar decides on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredState {
    /// The stored phase, if any.
    pub phase: Option<Phase>,
    /// The stored CNS volume ID, if any.
    pub volume_id: Option<VolumeId>,
    /// Attempts recorded so far.
    pub attempts: u32,
    /// The token of the stored `Registering` write-ahead: a create may be in flight in
    /// vCenter under it (only set while the phase is `Registering`).
    pub marker: Option<String>,
    /// The MoRef value of the vCenter task of the create sent under `marker`, once it was
    /// recorded (only set beside a marker; docs/design.md §4.4).
    pub task: Option<String>,
    /// The version this state was read at; writes conditional on it fail with
    /// [`StoreErrorKind::Conflict`] when anything changed since.
    pub version: Option<Version>,
    /// The storage policy the object asks for (`spec.storagePolicyName`), set on creates.
    pub storage_policy: Option<String>,
}

impl StoredState {
    /// The stored ID when the phase is `Registered`.
    pub fn registered_id(&self) -> Option<&VolumeId> {
        self.volume_id
            .as_ref()
            .filter(|_| self.phase == Some(Phase::Registered))
    }
}

/// One status transition the registrar records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusUpdate {
    /// Write-ahead before a CNS create: a create may be in flight under `token`.
    Registering {
        /// Attempt number, counting this one.
        attempts: u32,
        /// Unique per write-ahead; a reader measures the in-flight grace from the moment
        /// it first sees a token, on its own monotonic clock.
        token: String,
    },
    /// The create sent under the stored marker `token` runs as the vCenter task `task`
    /// (recorded when it did not finish quickly; docs/design.md §4.4). Phase and marker stay.
    TaskRecorded {
        /// The marker the create was sent under.
        token: String,
        /// The task's MoRef value, e.g. `task-123`.
        task: String,
    },
    /// The vmdk is registered (created now or adopted).
    Registered {
        /// The CNS volume ID.
        volume_id: VolumeId,
        /// The disk UUID from vCenter, when it was read in this run.
        disk_uuid: Option<String>,
        /// True when an existing CNS volume was adopted rather than created.
        adopted: bool,
        /// Attempt number of the run that succeeded.
        attempts: u32,
        /// True when the disk is known to be kept if its VM is deleted (`keepAfterDeleteVm`).
        protected: bool,
    },
    /// The disk of the stored volume is now protected from VM deletion.
    Protected,
    /// The attempt failed for certain (no create can be in flight).
    Failed {
        /// Machine-readable reason (`DiskNotFound`, `BackendUnavailable`, ...).
        reason: String,
        /// Human-readable message.
        message: String,
        /// Attempt number, counting this one.
        attempts: u32,
        /// When the next automatic retry is due; `None` waits for a change or full sync.
        retry_after: Option<Duration>,
    },
    /// The attempt failed while a create may still be in flight under the stored
    /// `Registering` marker: the error is recorded, phase and marker stay
    /// (docs/design.md §4.8).
    Stalled {
        /// Machine-readable reason (`BackendUnavailable`, ...).
        reason: String,
        /// Human-readable message.
        message: String,
    },
    /// Unregistration started.
    Unregistering,
    /// The CNS registration is gone; volume ID and phase are cleared.
    Unregistered,
}

/// What kind of store failure happened, which decides how the registrar reacts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// A conditional write found a newer version: re-read and decide again.
    Conflict,
    /// The object under the path's name tracks another path (docs/design.md §2.6).
    NameCollision {
        /// The `spec.volumePath` found in the object.
        found: String,
    },
    /// The object does not exist (any more).
    NotFound,
    /// The API could not be reached or failed transiently (timeout, 429, 5xx).
    Unavailable,
    /// The API refused the write for good (validation, permission).
    Rejected,
}

/// A failed status read or write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("status of {path}: {message}")]
pub struct StoreError {
    /// The volume path whose status was being read or written.
    pub path: String,
    /// What went wrong.
    pub message: String,
    /// How to react.
    pub kind: StoreErrorKind,
}

impl StoreError {
    /// A store error of `kind` on `path`.
    pub fn new(path: &VolumePath, kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            path: path.to_string(),
            message: message.into(),
            kind,
        }
    }

    /// True when retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            StoreErrorKind::Conflict | StoreErrorKind::Unavailable
        )
    }
}

/// Persists registration state per canonical path.
#[async_trait]
pub trait StatusStore: Send + Sync + 'static {
    /// Reads the current state; `None` when nothing is stored for the path. Fails with
    /// [`StoreErrorKind::NameCollision`] when the object found tracks another path.
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError>;

    /// Records one transition, only if the stored version is still `expect` (when given).
    /// Must be durable when it returns; returns the new version.
    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError>;

    /// Whether write-aheads, stored IDs and failures also record the path's PV list (so
    /// that a caller about to register need not write it first).
    fn records_pvs(&self) -> bool {
        false
    }
}

/// How an update changes the stored state (shared by the in-memory store and tests).
pub fn apply(state: &mut StoredState, update: &StatusUpdate) {
    if !matches!(
        update,
        StatusUpdate::Registering { .. }
            | StatusUpdate::TaskRecorded { .. }
            | StatusUpdate::Protected
            | StatusUpdate::Stalled { .. }
    ) {
        state.marker = None;
        state.task = None;
    }
    match update {
        StatusUpdate::Registering { attempts, token } => {
            state.phase = Some(Phase::Registering);
            state.attempts = *attempts;
            state.marker = Some(token.clone());
            state.task = None;
        }
        // A task belongs to the marker it was sent under (as the cluster's reader checks).
        StatusUpdate::TaskRecorded { token, task } => {
            if state.marker.as_ref() == Some(token) && state.phase == Some(Phase::Registering) {
                state.task = Some(task.clone());
            }
        }
        StatusUpdate::Registered {
            volume_id,
            attempts,
            ..
        } => {
            state.phase = Some(Phase::Registered);
            state.volume_id = Some(volume_id.clone());
            state.attempts = *attempts;
        }
        StatusUpdate::Failed { attempts, .. } => {
            state.phase = Some(Phase::Failed);
            state.attempts = *attempts;
        }
        StatusUpdate::Protected | StatusUpdate::Stalled { .. } => {}
        StatusUpdate::Unregistering => state.phase = Some(Phase::Unregistering),
        StatusUpdate::Unregistered => {
            let version = state.version.take();
            let storage_policy = state.storage_policy.take();
            *state = StoredState {
                version,
                storage_policy,
                ..StoredState::default()
            };
        }
    }
}

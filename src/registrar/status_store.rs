//! Where the registrar persists what it did: the status of a VolumeMigration in the
//! cluster, or an in-memory map in tests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Duration;

use async_trait::async_trait;

use crate::api::Phase;
use crate::backend::VolumeId;
use crate::volume_path::VolumePath;

/// The part of a stored status the registrar decides on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredState {
    /// The stored phase, if any.
    pub phase: Option<Phase>,
    /// The stored CNS volume ID, if any.
    pub volume_id: Option<VolumeId>,
    /// Attempts recorded so far.
    pub attempts: u32,
    /// When the stored `Registering` write-ahead was made (a create may still be in flight
    /// in vCenter if the process that made it died).
    pub registering_since: Option<jiff::Timestamp>,
}

/// One status transition the registrar records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusUpdate {
    /// Write-ahead before a CNS create: a create may be in flight.
    Registering {
        /// Attempt number, counting this one.
        attempts: u32,
        /// When the write-ahead was made; the create is sent only right after it.
        since: jiff::Timestamp,
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
    },
    /// The attempt failed.
    Failed {
        /// Machine-readable reason (`DiskNotFound`, `BackendError`, ...).
        reason: String,
        /// Human-readable message.
        message: String,
        /// Attempt number, counting this one.
        attempts: u32,
        /// When the next automatic retry is due; `None` waits for a change or full sync.
        retry_after: Option<Duration>,
    },
    /// Unregistration started.
    Unregistering,
    /// The CNS registration is gone; volume ID and phase are cleared.
    Unregistered,
}

/// A failed status read or write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("status of {path}: {message}")]
pub struct StoreError {
    /// The volume path whose status was being read or written.
    pub path: String,
    /// What went wrong.
    pub message: String,
    /// True when retrying may help (conflict, timeout, 5xx).
    pub retryable: bool,
}

/// Persists registration state per canonical path.
#[async_trait]
pub trait StatusStore: Send + Sync + 'static {
    /// Reads the current state; `None` when nothing is stored for the path.
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError>;
    /// Records one transition. Must be durable when it returns `Ok`.
    async fn save(&self, path: &VolumePath, update: StatusUpdate) -> Result<(), StoreError>;
}

/// A status store in memory, for tests: keeps every update and can be told to fail.
#[derive(Default)]
pub struct InMemoryStatusStore {
    inner: Mutex<MemoryState>,
}

#[derive(Default)]
struct MemoryState {
    states: HashMap<VolumePath, StoredState>,
    history: Vec<(VolumePath, StatusUpdate)>,
    fail_next_saves: usize,
}

impl InMemoryStatusStore {
    fn state(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next `n` saves fail with a retryable error (nothing is stored).
    pub fn fail_next_saves(&self, n: usize) {
        self.state().fail_next_saves = n;
    }

    /// The stored state of `path`.
    pub fn get(&self, path: &VolumePath) -> Option<StoredState> {
        self.state().states.get(path).cloned()
    }

    /// Every update saved so far, in order.
    pub fn history(&self) -> Vec<(VolumePath, StatusUpdate)> {
        self.state().history.clone()
    }
}

#[async_trait]
impl StatusStore for InMemoryStatusStore {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        Ok(self.get(path))
    }

    async fn save(&self, path: &VolumePath, update: StatusUpdate) -> Result<(), StoreError> {
        let mut inner = self.state();
        if inner.fail_next_saves > 0 {
            inner.fail_next_saves -= 1;
            return Err(StoreError {
                path: path.to_string(),
                message: "injected failure".into(),
                retryable: true,
            });
        }
        let entry = inner.states.entry(path.clone()).or_default();
        apply(entry, &update);
        inner.history.push((path.clone(), update));
        Ok(())
    }
}

/// How an update changes the stored state.
pub fn apply(state: &mut StoredState, update: &StatusUpdate) {
    if !matches!(update, StatusUpdate::Registering { .. }) {
        state.registering_since = None;
    }
    match update {
        StatusUpdate::Registering { attempts, since } => {
            state.phase = Some(Phase::Registering);
            state.attempts = *attempts;
            state.registering_since = Some(*since);
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
        StatusUpdate::Unregistering => state.phase = Some(Phase::Unregistering),
        StatusUpdate::Unregistered => *state = StoredState::default(),
    }
}

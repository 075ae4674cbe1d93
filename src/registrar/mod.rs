//! The registrar: the one component that registers vmdks as CNS volumes (DESIGN.md §4).
//!
//! Guarantees, per canonical path:
//! - operations are serialized by a keyed lock, and each holder re-reads the stored state
//!   before acting (rule 1);
//! - only the leader calls the backend (rule 2, through [`LeaderGate`]);
//! - an existing CNS volume with the deterministic name or the same backing disk is adopted
//!   instead of creating another (rule 3);
//! - `Registering` is stored before the create and the ID right after; an ID the backend
//!   returned stays in memory until it is stored (rule 4);
//! - a missing vmdk fails with `DiskNotFound` before CNS is called (rule 5);
//! - transient errors are retried with capped, jittered backoff (rule 6);
//! - backend calls are bounded in concurrency and rate (rule 7).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::api::Phase;
use crate::backend::{
    BackendError, CnsVolume, CreateVolumeRequest, ErrorClass, VolumeBackend, VolumeId,
};
use crate::volume_path::{PathError, VolumePath};

mod keyed_lock;
mod pressure;
mod retry;
mod status_store;

pub use keyed_lock::{KeyGuard, KeyedLock};
pub use pressure::{CallGate, LeaderCheck, LeaderGate, NotLeader};
pub use retry::RetryPolicy;
pub use status_store::{
    InMemoryStatusStore, StatusStore, StatusUpdate, StoreError, StoredState, apply,
};

/// Status reasons written to `status.lastError.reason`.
pub mod reason {
    /// The spec's volume path is not a valid in-tree path.
    pub const INVALID_PATH: &str = "InvalidPath";
    /// The vmdk does not exist.
    pub const DISK_NOT_FOUND: &str = "DiskNotFound";
    /// vCenter refused the call for good (permission, bad argument).
    pub const PERMANENT: &str = "BackendRejected";
    /// vCenter could not be reached or failed transiently.
    pub const TRANSIENT: &str = "BackendUnavailable";
    /// The credentials were rejected.
    pub const NOT_AUTHENTICATED: &str = "NotAuthenticated";
}

/// Tuning of a [`Registrar`].
#[derive(Debug, Clone)]
pub struct RegistrarConfig {
    /// CNS container-cluster ID written on registrations.
    pub cluster_id: String,
    /// Backend calls in flight at most.
    pub max_concurrent: usize,
    /// Backend calls started per second at most (`None` = unlimited).
    pub requests_per_second: Option<f64>,
    /// Backoff of transient failures.
    pub retry: RetryPolicy,
    /// Whether this replica may call the backend.
    pub leader: LeaderGate,
    /// How long a create started by a process that died may still complete in vCenter.
    /// A path found in `Registering` younger than this is re-checked for adoption after
    /// the grace has passed instead of being created again.
    pub in_flight_grace: Duration,
}

/// Default of [`RegistrarConfig::in_flight_grace`]: longer than a CNS create takes.
pub const DEFAULT_IN_FLIGHT_GRACE: Duration = Duration::from_secs(60);

impl RegistrarConfig {
    /// Defaults of the command line: 8 concurrent calls, 50 calls/s, always leader.
    pub fn new(cluster_id: impl Into<String>) -> Self {
        Self {
            cluster_id: cluster_id.into(),
            max_concurrent: 8,
            requests_per_second: Some(50.0),
            retry: RetryPolicy::default(),
            leader: LeaderGate::always(),
            in_flight_grace: DEFAULT_IN_FLIGHT_GRACE,
        }
    }

    /// Sets the in-flight grace.
    pub fn with_in_flight_grace(mut self, grace: Duration) -> Self {
        self.in_flight_grace = grace;
        self
    }

    /// Sets the concurrency limit.
    pub fn with_max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n;
        self
    }

    /// Sets the request rate limit.
    pub fn with_rate_limit(mut self, per_second: Option<f64>) -> Self {
        self.requests_per_second = per_second;
        self
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the leadership gate.
    pub fn with_leader(mut self, leader: LeaderGate) -> Self {
        self.leader = leader;
        self
    }
}

/// A successful registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The CNS volume ID.
    pub volume_id: VolumeId,
    /// True when the ID came from the stored status or an existing CNS volume.
    pub adopted: bool,
    /// True when the status already held the ID and nothing was done (no backend call,
    /// no write): callers report nothing new.
    pub unchanged: bool,
}

/// Why a registrar operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The path is not a valid in-tree volume path.
    #[error(transparent)]
    InvalidPath(#[from] PathError),
    /// The vmdk does not exist; nothing was registered.
    #[error("disk {path} not found: {message}")]
    DiskNotFound {
        /// The missing vmdk.
        path: VolumePath,
        /// What vCenter said.
        message: String,
    },
    /// vCenter failed or refused the call.
    #[error("registering {path}: {source}")]
    Backend {
        /// The vmdk concerned.
        path: VolumePath,
        /// The backend error, with its class.
        source: BackendError,
    },
    /// Reading or writing the status failed.
    #[error("registering {path}: {source}")]
    Store {
        /// The vmdk concerned.
        path: VolumePath,
        /// The store error.
        source: StoreError,
    },
    /// Not the leader: no backend call was made.
    #[error("{path}: {source}")]
    NotLeader {
        /// The vmdk concerned.
        path: VolumePath,
        /// Always [`NotLeader`].
        source: NotLeader,
    },
}

impl RegisterError {
    /// The `status.lastError.reason` for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            RegisterError::InvalidPath(_) => reason::INVALID_PATH,
            RegisterError::DiskNotFound { .. } => reason::DISK_NOT_FOUND,
            RegisterError::Backend { source, .. } => match source.class {
                ErrorClass::Permanent | ErrorClass::NotFound => reason::PERMANENT,
                ErrorClass::NotAuthenticated => reason::NOT_AUTHENTICATED,
                ErrorClass::Transient => reason::TRANSIENT,
            },
            RegisterError::Store { .. } | RegisterError::NotLeader { .. } => reason::TRANSIENT,
        }
    }

    /// True when retrying later without a change of input may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            RegisterError::InvalidPath(_) | RegisterError::DiskNotFound { .. } => false,
            RegisterError::Backend { source, .. } => source.class.is_retryable(),
            RegisterError::Store { source, .. } => source.retryable,
            RegisterError::NotLeader { .. } => true,
        }
    }
}

/// Returned by [`Registrar::lookup`] when the path has no stored volume ID.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// Not registered yet; a caller should retry later.
    #[error("{path} is not registered yet (phase {phase}), retry later")]
    NotRegisteredYet {
        /// The path asked for.
        path: VolumePath,
        /// The stored phase, or `None` when nothing is stored.
        phase: String,
    },
    /// The status could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Registers and unregisters vmdks; see the module documentation for its guarantees.
pub struct Registrar {
    backend: Arc<dyn VolumeBackend>,
    store: Arc<dyn StatusStore>,
    locks: KeyedLock<VolumePath>,
    gate: CallGate,
    /// IDs the backend returned that are not stored yet (rule 4).
    unsaved: Mutex<HashMap<VolumePath, VolumeId>>,
    config: RegistrarConfig,
}

mod operations;

impl Registrar {
    /// A registrar over `backend`, recording into `store`.
    pub fn new(
        backend: Arc<dyn VolumeBackend>,
        store: Arc<dyn StatusStore>,
        config: RegistrarConfig,
    ) -> Self {
        let gate = CallGate::new(
            config.max_concurrent,
            config.requests_per_second,
            config.leader.clone(),
        );
        Self {
            backend,
            store,
            locks: KeyedLock::default(),
            gate,
            unsaved: Mutex::new(HashMap::new()),
            config,
        }
    }

    /// The backend this registrar calls.
    pub fn backend(&self) -> &Arc<dyn VolumeBackend> {
        &self.backend
    }

    /// The retry policy (also used by callers to schedule requeues).
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.config.retry
    }

    /// Keys currently locked or awaited (0 when idle: entries never leak).
    pub fn locked_keys(&self) -> usize {
        self.locks.len()
    }

    /// Volume IDs held in memory because storing them failed so far.
    pub fn unsaved_ids(&self) -> usize {
        self.unsaved_map().len()
    }

    fn unsaved_map(&self) -> std::sync::MutexGuard<'_, HashMap<VolumePath, VolumeId>> {
        self.unsaved.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parses `raw` and registers it; an invalid path fails before any backend call.
    pub async fn register_raw(&self, raw: &str) -> Result<Registration, RegisterError> {
        let path = VolumePath::parse(raw)?;
        self.register(&path).await
    }

    /// The stored volume ID of `path`, never calling the backend.
    pub async fn lookup(&self, path: &VolumePath) -> Result<VolumeId, LookupError> {
        let state = self.store.load(path).await?;
        match state {
            Some(StoredState {
                phase: Some(Phase::Registered),
                volume_id: Some(id),
                ..
            }) => Ok(id),
            other => Err(LookupError::NotRegisteredYet {
                path: path.clone(),
                phase: other
                    .and_then(|s| s.phase)
                    .map_or("none", Phase::as_str)
                    .to_owned(),
            }),
        }
    }

    /// Waits for a backend slot (concurrency and rate limits), then checks leadership.
    async fn enter(
        &self,
        path: &VolumePath,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, RegisterError> {
        self.gate
            .enter()
            .await
            .map_err(|source| RegisterError::NotLeader {
                path: path.clone(),
                source,
            })
    }

    /// Runs one backend call under the concurrency/rate limits and the leader check,
    /// retrying transient failures per the retry policy.
    async fn call<T, F, Fut>(&self, path: &VolumePath, mut f: F) -> Result<T, RegisterError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let permit = self.enter(path).await?;
            let result = f().await;
            drop(permit);
            match result {
                Ok(value) => return Ok(value),
                Err(e)
                    if e.class.is_retryable() && attempt < self.config.retry.attempts_per_call =>
                {
                    let delay = self.config.retry.delay(attempt);
                    debug!(%path, error = %e, ?delay, "transient backend error, retrying");
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

    /// Saves a status update, retrying retryable store errors.
    async fn save(&self, path: &VolumePath, update: StatusUpdate) -> Result<(), RegisterError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.store.save(path, update.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if e.retryable && attempt < self.config.retry.attempts_per_call => {
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

    fn log_registered(path: &VolumePath, volume: &VolumeId, adopted: bool) {
        info!(%path, volume_id = %volume, adopted, "registered");
    }
}

/// Picks the volume to adopt among existing CNS volumes for one path: the one carrying
/// volmig's deterministic name, else the oldest (then the smallest ID, for determinism).
pub fn choose_adoptee<'a>(volumes: &'a [CnsVolume], name: &str) -> Option<&'a CnsVolume> {
    volumes.iter().min_by(|a, b| {
        let key = |v: &CnsVolume| (v.name != name, v.created.is_none(), v.created, v.id.clone());
        key(a).cmp(&key(b))
    })
}

fn create_request(config: &RegistrarConfig, path: &VolumePath) -> CreateVolumeRequest {
    CreateVolumeRequest {
        path: path.clone(),
        name: path.cns_volume_name(),
        cluster_id: config.cluster_id.clone(),
        storage_policy_name: None,
    }
}

#[cfg(test)]
mod tests;

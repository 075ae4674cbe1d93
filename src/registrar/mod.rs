//! The registrar: the one component that registers vmdks as CNS volumes (docs/design.md §4).
//!
//! Guarantees, per canonical path:
//! - operations are serialized by a keyed lock, and each holder re-reads the stored state
//!   before acting (rule 1);
//! - only the leader calls the backend, and leadership is checked again right before each
//!   create and unregister (rules 2 and 9, through [`LeaderGate`]);
//! - an existing CNS volume with the deterministic name or the same backing disk is adopted
//!   instead of creating another (rule 3);
//! - `Registering` is stored before the create and the ID right after, conditionally on the
//!   version the write-ahead produced; an ID the backend returned stays in memory until it
//!   is stored, and never replaces another stored ID (rules 4 and 9);
//! - a missing vmdk fails with `DiskNotFound` before CNS is called (rule 5);
//! - transient errors are retried with capped, jittered backoff (rule 6);
//! - backend calls are bounded in concurrency and rate (rule 7);
//! - a create whose outcome is unknown is never followed by another create until the
//!   in-flight grace, measured on this process's monotonic clock, has passed and the
//!   volume still did not appear (rules 8 and 10, [`InFlight`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing::debug;

use crate::backend::{BackendError, CreateVolumeRequest, VolumeBackend, VolumeId};
use crate::metrics::{Metrics, RegistrationStage};
use crate::syncer_lease::{NotRegistrar, RegistrarModeGate};
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

mod confirm;
mod create;
mod error;
mod failure;
mod follow_task;
mod in_flight;
mod keyed_lock;
mod leader_gate;
#[cfg(any(test, feature = "testing"))]
mod memory_store;
mod operations;
mod pressure;
mod protection;
mod record_id;
mod settle;
mod slots;
mod stages;
mod status_store;
mod unregister;

pub use crate::backend::selection::choose_adoptee;
pub use crate::requeue::{DEFAULT_ADOPTION_POLL, DEFAULT_FOLLOW_POLL, RetryPolicy};
pub use error::{LookupError, RegisterError};
pub use in_flight::InFlight;
pub use keyed_lock::{KeyGuard, KeyedLock};
pub use leader_gate::{LeaderCheck, LeaderGate};
#[cfg(any(test, feature = "testing"))]
pub use memory_store::InMemoryStatusStore;
pub use pressure::{CallGate, NotLeader};
use slots::HeldSlot;
pub use slots::{Lane, Slot};
pub use status_store::{
    StatusStore, StatusUpdate, StoreError, StoreErrorKind, StoredState, Version, apply,
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
    /// The session expired and logging in again failed.
    pub const NOT_AUTHENTICATED: &str = "NotAuthenticated";
    /// vCenter rejected the credentials: fix them (no retry loop that would lock the account).
    pub const INVALID_LOGIN: &str = "InvalidLogin";
    /// The object named after this path tracks another path (docs/design.md §2.6).
    pub const NAME_COLLISION: &str = "NameCollision";
    /// A create may still be running in vCenter; waiting for it before creating again.
    pub const CREATE_OUTCOME_UNKNOWN: &str = "CreateOutcomeUnknown";
    /// The CSI driver's syncer registers now (docs/design.md §8.2); volmig adopts its volume.
    pub const AWAITING_CSI_DRIVER: &str = "AwaitingCsiDriver";
}

/// Tuning of a [`Registrar`].
#[derive(Clone)]
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
    /// How long a create may still complete in vCenter after it was sent (or after its
    /// `Registering` marker was first seen): at least the request timeout plus the task
    /// timeout. During the grace the path is only looked at (adopted if the volume
    /// appears), never created again.
    pub in_flight_grace: Duration,
    /// How often CNS is asked again for the volume of a create in flight.
    pub adoption_poll: Duration,
    /// This replica's identity, part of every write-ahead token.
    pub instance: String,
    /// IDs the CSI driver's own cache holds for a path: the first adoption source
    /// (docs/design.md §8.2).
    pub driver_ids: Option<DriverIds>,
    /// Where each registration's stages are recorded
    /// (`volmig_registration_stage_seconds`); `None` records nothing.
    pub metrics: Option<Metrics>,
    /// Whether volmig or the CSI driver's syncer registers now (docs/design.md §8.2):
    /// checked before every write-ahead and every create.
    pub mode: RegistrarModeGate,
    /// How soon a path is looked at again while the driver's syncer registers.
    pub follow_poll: Duration,
    /// Who else uses a volume ID (the CSI driver's PVs and VolumeAttachments after
    /// cut-over): a volume with users is never unregistered (docs/design.md §5.1).
    pub volume_users: Option<VolumeUsers>,
}

/// The users of a CNS volume ID outside volmig's paths (empty: none).
pub type VolumeUsers = Arc<dyn Fn(&VolumeId) -> Vec<String> + Send + Sync>;

/// Looks up the volume IDs the CSI driver's cache holds for a path.
pub type DriverIds = Arc<dyn Fn(&VolumePath) -> Vec<VolumeId> + Send + Sync>;

/// Default of [`RegistrarConfig::in_flight_grace`]: the default request timeout (60 s)
/// plus the default task timeout (600 s).
pub const DEFAULT_IN_FLIGHT_GRACE: Duration = Duration::from_secs(660);

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
            adoption_poll: DEFAULT_ADOPTION_POLL,
            instance: "volmig".to_owned(),
            driver_ids: None,
            metrics: None,
            mode: RegistrarModeGate::always_own(),
            follow_poll: DEFAULT_FOLLOW_POLL,
            volume_users: None,
        }
    }

    /// Never unregisters a volume that `users` names users of.
    pub fn with_volume_users(mut self, users: VolumeUsers) -> Self {
        self.volume_users = Some(users);
        self
    }

    /// Creates only while `mode` says volmig is the registrar.
    pub fn with_mode_gate(mut self, mode: RegistrarModeGate) -> Self {
        self.mode = mode;
        self
    }

    /// Sets how soon a path is looked at again while the driver's syncer registers.
    pub fn with_follow_poll(mut self, poll: Duration) -> Self {
        self.follow_poll = poll;
        self
    }

    /// Records where each registration's time goes into `metrics`.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Adopts from the CSI driver's cache first.
    pub fn with_driver_ids(mut self, lookup: DriverIds) -> Self {
        self.driver_ids = Some(lookup);
        self
    }

    /// Sets how often a create in flight is looked for.
    pub fn with_adoption_poll(mut self, poll: Duration) -> Self {
        self.adoption_poll = poll;
        self
    }

    /// Sets the replica identity used in write-ahead tokens.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
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

/// Registers and unregisters vmdks; see the module documentation for its guarantees.
pub struct Registrar {
    backend: Arc<dyn VolumeBackend>,
    store: Arc<dyn StatusStore>,
    locks: KeyedLock<VolumePath>,
    gate: CallGate,
    /// IDs the backend returned that are not stored yet (rule 4).
    unsaved: Mutex<HashMap<VolumePath, VolumeId>>,
    /// Creates that may still be running in vCenter (rules 8 and 10).
    in_flight: Arc<InFlight>,
    config: RegistrarConfig,
}

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
            in_flight: Arc::default(),
            config,
        }
    }

    /// The backend this registrar calls.
    pub fn backend(&self) -> &Arc<dyn VolumeBackend> {
        &self.backend
    }

    /// Whether the status writes of a registration also record the path's PV list.
    pub fn records_pvs(&self) -> bool {
        self.store.records_pvs()
    }

    /// The retry policy (also used by callers to schedule requeues).
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.config.retry
    }

    /// The CNS container-cluster ID this registrar writes on its registrations.
    pub fn cluster_id(&self) -> &str {
        &self.config.cluster_id
    }

    /// Keys currently locked or awaited (0 when idle: entries never leak).
    pub fn locked_keys(&self) -> usize {
        self.locks.len()
    }

    /// Volume IDs held in memory because storing them failed so far.
    pub fn unsaved_ids(&self) -> usize {
        self.unsaved_map().len()
    }

    /// Paths with a create this process knows may still be in flight.
    pub fn creates_in_doubt(&self) -> usize {
        self.in_flight.len()
    }

    fn unsaved_map(&self) -> std::sync::MutexGuard<'_, HashMap<VolumePath, VolumeId>> {
        self.unsaved.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parses `raw` and registers it; an invalid path fails before any backend call.
    pub async fn register_raw(&self, raw: &str) -> Result<Registration, RegisterError> {
        let path = VolumePath::parse(raw)?;
        self.register(&path).await
    }

    /// The users of volume `id` outside volmig's paths (docs/design.md §5.1).
    fn users_of(&self, id: &VolumeId) -> Vec<String> {
        self.config
            .volume_users
            .as_ref()
            .map(|users| users(id))
            .unwrap_or_default()
    }

    /// The stored volume ID of `path`, never calling the backend.
    pub async fn lookup(&self, path: &VolumePath) -> Result<VolumeId, LookupError> {
        let state = self.store.load(path).await?;
        match state.as_ref().and_then(StoredState::registered_id) {
            Some(id) => Ok(id.clone()),
            None => Err(LookupError::NotRegisteredYet {
                path: path.clone(),
                phase: state
                    .and_then(|s| s.phase)
                    .map_or("none", Phase::as_str)
                    .to_owned(),
            }),
        }
    }

    /// Waits for a backend slot in `lane` (concurrency and rate limits), then checks
    /// leadership.
    async fn enter(&self, path: &VolumePath, lane: Lane) -> Result<Slot, RegisterError> {
        stages::timed(RegistrationStage::BackendSlotWait, self.gate.enter(lane))
            .await
            .map_err(|source| self.not_leader(path, source))
    }

    /// `Ok` when volmig is the registrar now (docs/design.md §8.2).
    fn may_create(&self, path: &VolumePath) -> Result<(), RegisterError> {
        self.config
            .mode
            .may_create()
            .map_err(|source| RegisterError::NotRegistrar {
                path: path.clone(),
                source,
                retry_after: self.config.follow_poll,
            })
    }

    fn not_leader(&self, path: &VolumePath, source: NotLeader) -> RegisterError {
        RegisterError::NotLeader {
            path: path.clone(),
            source,
        }
    }

    /// Fencing (rule 9): leadership is checked again right before a call that changes CNS,
    /// however long ago the work was admitted.
    fn fence(&self, path: &VolumePath) -> Result<(), RegisterError> {
        if self.config.leader.is_open() {
            Ok(())
        } else {
            Err(self.not_leader(path, NotLeader))
        }
    }

    /// Admits the next call of an operation under the slot it holds, or waits for one in
    /// `lane` when it holds none (see [`HeldSlot`]).
    async fn enter_held(
        &self,
        path: &VolumePath,
        held: &mut HeldSlot,
        lane: Lane,
    ) -> Result<Slot, RegisterError> {
        match held.0.take() {
            Some(slot) => {
                self.gate
                    .reenter(&slot)
                    .await
                    .map_err(|source| self.not_leader(path, source))?;
                Ok(slot)
            }
            None => self.enter(path, lane).await,
        }
    }

    /// Runs one backend call under the concurrency/rate limits and the leader check,
    /// retrying transient failures per the retry policy, in `lane` (see [`Lane`]; retries
    /// are always [`Lane::Started`]). The slot is freed when the call ends.
    async fn call<T, F, Fut>(&self, path: &VolumePath, lane: Lane, f: F) -> Result<T, RegisterError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        self.call_held(path, &mut HeldSlot::none(), lane, f).await
    }

    /// [`Self::call`] under the slot in `held` if there is one; a call that succeeds
    /// leaves its slot in `held` for the operation's next call. A failed call frees it
    /// (before any retry's sleep).
    async fn call_held<T, F, Fut>(
        &self,
        path: &VolumePath,
        held: &mut HeldSlot,
        lane: Lane,
        mut f: F,
    ) -> Result<T, RegisterError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let lane = if attempt == 1 { lane } else { Lane::Started };
            let permit = self.enter_held(path, held, lane).await?;
            let result = stages::timed(RegistrationStage::VcenterCall, f()).await;
            match result {
                Ok(value) => {
                    held.0 = Some(permit);
                    return Ok(value);
                }
                Err(e)
                    if e.class.is_retryable() && attempt < self.config.retry.attempts_per_call =>
                {
                    drop(permit);
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

    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, RegisterError> {
        stages::timed(RegistrationStage::StatusRead, self.store.load(path))
            .await
            .map_err(|source| RegisterError::Store {
                path: path.clone(),
                source,
            })
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

impl Registration {
    /// The ID the status already held: nothing was done.
    fn already_stored(volume_id: &VolumeId) -> Self {
        Self {
            volume_id: volume_id.clone(),
            adopted: true,
            unchanged: true,
        }
    }
}

fn create_request(
    config: &RegistrarConfig,
    path: &VolumePath,
    storage_policy: Option<String>,
) -> CreateVolumeRequest {
    CreateVolumeRequest {
        path: path.clone(),
        name: path.cns_volume_name(),
        cluster_id: config.cluster_id.clone(),
        storage_policy_name: storage_policy,
        fence: crate::backend::SendFence::none(),
    }
}

#[cfg(test)]
mod tests;

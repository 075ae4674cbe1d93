//! A backend that logs in to vCenter on first use (only the leader calls the backend, so
//! followers never open a session), with the login rules of docs/design.md §4.11:
//!
//! - **One attempt for everyone**: concurrent callers that find no usable connection share
//!   one connect (and so one `Login`); the waiters get its outcome.
//! - **Refused credentials are permanent for a while**: after an `InvalidLogin` the next
//!   attempt waits with exponential backoff ([`LoginBackoff`], 1 min doubling to 10 min);
//!   meanwhile every call fails at once with a [`ErrorClass::Permanent`] error whose fault
//!   is `InvalidLogin` and whose message names the vCenter and the user. A wrong password
//!   therefore never locks the vCenter account.
//! - **Changed credentials are used at once**: a probe ([`Version`] of the credentials
//!   file, cheap: `volmig run` reads the file again only when its metadata changes, or a
//!   second has passed) runs before each call. When the credentials changed since the connection
//!   (or since the failed attempt) was made, the next call connects again with them; a
//!   rotated Secret needs no restart. Until the new connection works, the old one is kept.
//! - A session that expires is re-established by the connected backend itself (one shared
//!   re-login); when that re-login is refused, the connection is dropped and the rules
//!   above apply.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{
    BackendError, CnsVolume, CreateVolumeRequest, ErrorClass, Protection, Result, SendFence,
    TaskState, VolumeBackend, VolumeId, VolumePage,
};
use crate::credentials::Version;
use crate::volume_path::VolumePath;

use super::INVALID_LOGIN_FAULT as INVALID_LOGIN;

type Connect =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn VolumeBackend>>> + Send>> + Send + Sync;
type Probe = dyn Fn() -> Version + Send + Sync;

/// How long to wait before logging in again after refused credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginBackoff {
    /// Wait after the first refusal.
    pub initial: Duration,
    /// Longest wait; each further refusal doubles the wait up to this.
    pub max: Duration,
}

impl Default for LoginBackoff {
    /// 1 minute, doubling up to 10 minutes.
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(60),
            max: Duration::from_secs(600),
        }
    }
}

impl LoginBackoff {
    /// The wait after the `failures`-th refusal in a row (1-based).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(30);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }
}

/// True for an error that says the credentials were refused (not a lost session).
pub fn is_invalid_login(err: &BackendError) -> bool {
    err.fault == INVALID_LOGIN
        || (err.operation == "Login" && err.class == ErrorClass::NotAuthenticated)
}

/// Connects lazily through `connect`, then forwards every call.
pub struct OnDemandBackend {
    connect: Box<Connect>,
    probe: Box<Probe>,
    backoff: LoginBackoff,
    state: Mutex<State>,
    /// Held while a connect is in flight: the single flight.
    flight: tokio::sync::Mutex<()>,
}

struct Connection {
    backend: Arc<dyn VolumeBackend>,
    /// Credentials version the connection logged in with.
    version: Version,
}

struct LoginFailure {
    /// The refusal as the server reported it (URL and user, no password).
    error: BackendError,
    /// Credentials version that was refused.
    version: Version,
    at: Instant,
    wait: Duration,
    failures: u32,
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    failure: Option<LoginFailure>,
    /// Connect attempts finished so far, and the error of the last one when it failed.
    flights: u64,
    last_flight_error: Option<(Version, BackendError)>,
}

enum Decision {
    Use(Arc<dyn VolumeBackend>),
    FailFast(BackendError),
    Connect,
}

impl State {
    fn decide(&self, version: Version, now: Instant) -> Decision {
        if let Some(c) = &self.connection
            && c.version == version
        {
            return Decision::Use(c.backend.clone());
        }
        if let Some(f) = &self.failure
            && f.version == version
            && now < f.at + f.wait
        {
            return match &self.connection {
                // The new credentials were refused; the session of the old ones still works.
                Some(c) => Decision::Use(c.backend.clone()),
                None => Decision::FailFast(refused(&f.error, f.at + f.wait - now)),
            };
        }
        Decision::Connect
    }

    /// Records a refusal of `version` and returns the error for the caller.
    fn refuse(
        &mut self,
        error: BackendError,
        version: Version,
        now: Instant,
        backoff: &LoginBackoff,
    ) -> BackendError {
        let failures = self.failure.as_ref().map_or(0, |f| f.failures) + 1;
        let wait = backoff.delay(failures);
        let shown = refused(&error, wait);
        tracing::error!(
            error = %shown.message,
            retry_in_secs = wait.as_secs(),
            failures,
            "vCenter refused the credentials; not logging in again before the wait ends or the credentials change"
        );
        self.failure = Some(LoginFailure {
            error,
            version,
            at: now,
            wait,
            failures,
        });
        shown
    }
}

/// The permanent error callers see for refused credentials.
fn refused(original: &BackendError, retry_in: Duration) -> BackendError {
    BackendError::new(
        ErrorClass::Permanent,
        "Login",
        INVALID_LOGIN,
        format!(
            "{}; volmig does not log in again for {}s, or until the credentials change (so the account is not locked)",
            original.message,
            retry_in.as_secs().max(1)
        ),
    )
}

impl OnDemandBackend {
    /// A backend created by `connect` on first use; `probe` tells whether the credentials
    /// changed (it runs before every call and must be cheap).
    pub fn new<F, Fut, P>(connect: F, probe: P, backoff: LoginBackoff) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn VolumeBackend>>> + Send + 'static,
        P: Fn() -> Version + Send + Sync + 'static,
    {
        Self {
            connect: Box::new(move || Box::pin(connect())),
            probe: Box::new(probe),
            backoff,
            state: Mutex::new(State::default()),
            flight: tokio::sync::Mutex::new(()),
        }
    }

    /// A backend whose credentials never change (tests, fixed configurations).
    pub fn with_fixed_credentials<F, Fut>(connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn VolumeBackend>>> + Send + 'static,
    {
        Self::new(connect, || Version::of(b"fixed"), LoginBackoff::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn get(&self) -> Result<Arc<dyn VolumeBackend>> {
        // Probed before taking the lock: callers never wait on each other's probe.
        let version = (self.probe)();
        let flights_seen = {
            let state = self.lock();
            match state.decide(version, Instant::now()) {
                Decision::Use(backend) => return Ok(backend),
                Decision::FailFast(err) => return Err(err),
                Decision::Connect => state.flights,
            }
        };
        let _flight = self.flight.lock().await;
        let version = (self.probe)();
        {
            let state = self.lock();
            match state.decide(version, Instant::now()) {
                Decision::Use(backend) => return Ok(backend),
                Decision::FailFast(err) => return Err(err),
                Decision::Connect => {}
            }
            // An attempt with the same credentials ended while we waited: share its error.
            if state.flights != flights_seen
                && let Some((v, err)) = &state.last_flight_error
                && *v == version
            {
                return Err(err.clone());
            }
        }
        let result = (self.connect)().await;
        let mut state = self.lock();
        state.flights += 1;
        match result {
            Ok(backend) => {
                if state.failure.take().is_some() {
                    tracing::info!("vCenter accepted the credentials again");
                }
                state.last_flight_error = None;
                state.connection = Some(Connection {
                    backend: backend.clone(),
                    version,
                });
                Ok(backend)
            }
            Err(err) => {
                let err = if is_invalid_login(&err) {
                    state.refuse(err, version, Instant::now(), &self.backoff)
                } else {
                    err
                };
                state.last_flight_error = Some((version, err.clone()));
                match &state.connection {
                    Some(c) => {
                        tracing::warn!(error = %err, "cannot log in to vCenter with the changed credentials; keeping the current session");
                        Ok(c.backend.clone())
                    }
                    None => Err(err),
                }
            }
        }
    }

    /// A call on `backend` ended with refused credentials (its re-login after a session
    /// expiry failed): drop that connection and back off.
    fn refused_by(&self, backend: &Arc<dyn VolumeBackend>, err: BackendError) -> BackendError {
        let mut state = self.lock();
        let current = state
            .connection
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c.backend, backend));
        if !current {
            // Already replaced (or dropped by another caller): let the caller retry.
            return match &state.failure {
                Some(f) if state.connection.is_none() => refused(&f.error, f.wait),
                _ => BackendError::new(
                    ErrorClass::Transient,
                    err.operation,
                    err.fault,
                    format!(
                        "{}; the vCenter connection was replaced, retry",
                        err.message
                    ),
                ),
            };
        }
        let version = state
            .connection
            .take()
            .map_or_else(|| (self.probe)(), |c| c.version);
        state.refuse(err, version, Instant::now(), &self.backoff)
    }

    async fn forward<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: FnOnce(Arc<dyn VolumeBackend>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let backend = self.get().await?;
        match call(backend.clone()).await {
            Err(err) if is_invalid_login(&err) => Err(self.refused_by(&backend, err)),
            other => other,
        }
    }

    /// The connected backend, if a call has connected it.
    pub fn connected(&self) -> Option<Arc<dyn VolumeBackend>> {
        self.lock().connection.as_ref().map(|c| c.backend.clone())
    }
}

#[async_trait]
impl VolumeBackend for OnDemandBackend {
    async fn disk_uuid(&self, path: &VolumePath) -> Result<String> {
        self.forward(|b| async move { b.disk_uuid(path).await })
            .await
    }
    async fn find_volumes(&self, name: &str, path: &VolumePath) -> Result<Vec<CnsVolume>> {
        self.forward(|b| async move { b.find_volumes(name, path).await })
            .await
    }
    async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<VolumeId> {
        self.forward(|b| async move { b.create_volume(request).await })
            .await
    }
    async fn create_task_state(&self, task: &str) -> Result<TaskState> {
        self.forward(|b| async move { b.create_task_state(task).await })
            .await
    }
    async fn delete_volume(&self, id: &VolumeId) -> Result<()> {
        self.forward(|b| async move { b.delete_volume(id).await })
            .await
    }
    async fn list_volumes(&self, cursor: Option<String>) -> Result<VolumePage> {
        self.forward(|b| async move { b.list_volumes(cursor).await })
            .await
    }
    async fn volumes_by_id(&self, ids: &[VolumeId]) -> Result<Vec<CnsVolume>> {
        self.forward(|b| async move { b.volumes_by_id(ids).await })
            .await
    }
    fn refuses_re_registration(&self) -> Option<bool> {
        let connected = self.lock().connection.as_ref().map(|c| c.backend.clone());
        connected.and_then(|backend| backend.refuses_re_registration())
    }

    async fn protect_from_vm_delete(&self, id: &VolumeId, fence: &SendFence) -> Result<Protection> {
        self.forward(|b| async move { b.protect_from_vm_delete(id, fence).await })
            .await
    }
    async fn is_protected(&self, id: &VolumeId) -> Result<bool> {
        self.forward(|b| async move { b.is_protected(id).await })
            .await
    }
    async fn creation_time(&self, id: &VolumeId) -> Result<Option<jiff::Timestamp>> {
        self.forward(|b| async move { b.creation_time(id).await })
            .await
    }
}

#[cfg(test)]
#[path = "on_demand_tests.rs"]
mod tests;

//! The background tasks that talk to the API server: the campaign (kube-lease-manager
//! acquiring and renewing the Lease) and the observer (a watch on the Lease object).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff as _;
use kube::runtime::watcher::watch_object;
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

/// What the background tasks report to the arbiter.
#[derive(Debug)]
pub(super) enum Input {
    /// The lease manager of campaign `generation` holds (or stopped holding) the lease.
    Manager { generation: u64, holds: bool },
    /// The Lease as observed now (`None`: it does not exist).
    Lease(Option<Box<Lease>>),
}

/// Aborts the task when dropped, so no background work outlives its owner.
#[derive(Debug)]
pub(super) struct AbortOnDrop<T>(pub(super) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running campaign: one lease manager acquiring and renewing the lease.
#[derive(Debug)]
pub(super) struct Campaign {
    /// Asks the campaign to stop; `true` = release the lease even if the manager does not
    /// know that it holds it.
    pub(super) stop: oneshot::Sender<bool>,
    /// The task; resolves to the result of releasing the lease.
    pub(super) task: AbortOnDrop<Result<(), LeaseManagerError>>,
}

/// Everything a campaign needs to talk to the API server.
#[derive(Clone)]
pub(super) struct LeaseTarget {
    pub(super) client: Client,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) holder_id: String,
    /// Whole seconds, at least 2.
    pub(super) duration_secs: u64,
    /// The lease manager renews this long before the lease expires.
    pub(super) grace_secs: u64,
    /// Longest wait between retries after API errors.
    pub(super) max_retry: Duration,
}

impl LeaseTarget {
    fn params(&self) -> LeaseParams {
        LeaseParams::new(self.holder_id.clone(), self.duration_secs, self.grace_secs)
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Starts campaign number `generation`.
pub(super) fn spawn_campaign(
    target: Arc<LeaseTarget>,
    generation: u64,
    tx: mpsc::Sender<Input>,
) -> Campaign {
    let (stop, stop_rx) = oneshot::channel();
    let task = tokio::spawn(campaign(target, generation, tx, stop_rx));
    Campaign {
        stop,
        task: AbortOnDrop(task),
    }
}

async fn campaign(
    target: Arc<LeaseTarget>,
    generation: u64,
    tx: mpsc::Sender<Input>,
    mut stop: oneshot::Receiver<bool>,
) -> Result<(), LeaseManagerError> {
    let lease = target.lease();
    let mut retry = retry_delays(target.max_retry);
    'manager: loop {
        let built = tokio::select! {
            biased;
            _ = &mut stop => return Ok(()),
            built = LeaseManager::new(
                target.client.clone(),
                target.name.as_str(),
                target.namespace.as_str(),
                target.params(),
                LeaseCreateMode::AutoCreate,
            ) => built,
        };
        let manager = match built {
            Ok(manager) => manager,
            Err(error) => {
                warn!(%lease, holder_id = %target.holder_id, %error, "cannot read or create the lease; retrying");
                let pause = retry.next().unwrap_or(target.max_retry);
                tokio::select! {
                    biased;
                    _ = &mut stop => return Ok(()),
                    () = tokio::time::sleep(pause) => continue 'manager,
                }
            }
        };
        let mut holds = false;
        let mut retry_at: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                release_anyway = &mut stop => {
                    // Dropping the pending `changed()` future above frees the manager's state.
                    if holds || release_anyway.unwrap_or(false) {
                        debug!(%lease, holder_id = %target.holder_id, "releasing the lease");
                        return manager.release().await;
                    }
                    return Ok(());
                }
                () = sleep_until(retry_at) => retry_at = None,
                changed = manager.changed(), if retry_at.is_none() => match changed {
                    Ok(now_holds) => {
                        holds = now_holds;
                        retry.reset();
                        let input = Input::Manager { generation, holds };
                        if tx.send(input).await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(LeaseManagerError::NonexistentLease(_)) => {
                        warn!(%lease, holder_id = %target.holder_id, "the lease was deleted; recreating it");
                        if holds {
                            holds = false;
                            let input = Input::Manager { generation, holds };
                            if tx.send(input).await.is_err() {
                                return Ok(());
                            }
                        }
                        continue 'manager;
                    }
                    Err(error) => {
                        warn!(%lease, holder_id = %target.holder_id, %error, "acquiring or renewing the lease failed; retrying");
                        retry_at = Some(Instant::now() + retry.next().unwrap_or(target.max_retry));
                    }
                },
            }
        }
    }
}

/// Sleeps until `at`; forever if `None`.
pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Starts watching the Lease object; every observation goes to `tx`.
pub(super) fn spawn_observer(target: Arc<LeaseTarget>, tx: mpsc::Sender<Input>) -> AbortOnDrop<()> {
    AbortOnDrop(tokio::spawn(observe(target, tx)))
}

async fn observe(target: Arc<LeaseTarget>, tx: mpsc::Sender<Input>) {
    let lease = target.lease();
    let api: Api<Lease> = Api::namespaced(target.client.clone(), &target.namespace);
    let stream = watch_object(api, &target.name).backoff(retry_delays(target.max_retry));
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(observed) => {
                if tx.send(Input::Lease(observed.map(Box::new))).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                warn!(%lease, holder_id = %target.holder_id, %error, "watching the lease failed; retrying")
            }
        }
    }
}

/// Retry delays of the campaign and the observer: from 100 ms, doubling up to `max`.
pub(super) fn retry_delays(max: Duration) -> crate::requeue::Delays {
    crate::requeue::RetryPolicy {
        initial: Duration::from_millis(100).min(max),
        max,
        attempts_per_call: u32::MAX,
        jitter: false,
    }
    .delays()
}

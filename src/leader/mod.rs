//! Leader election for `volmig run` (docs/design.md §3.3, §4.2): only the holder of a
//! `coordination.k8s.io/v1` Lease writes or calls the backend.
//!
//! [`Leadership::start`] campaigns in the background with kube-lease-manager, which
//! acquires the Lease and renews it every third of its duration. On top of that this module
//! keeps its own verdict:
//!
//! - leadership is valid until the observed `renewTime` + lease duration − a safety margin
//!   (a quarter of the duration), converted to this process's **monotonic** clock; when no
//!   renewal has been observed by then, the flag turns false at once, without waiting for
//!   the lease manager to notice. A former leader that was paused (SIGSTOP) past its term
//!   therefore finds itself not leading the moment it wakes: [`Leadership::is_leader`]
//!   checks the deadline itself, and the arbiter task flips the watch value when its timer
//!   fires;
//! - the Lease object is watched, so a follower takes a released Lease at once instead of
//!   sleeping until the old expiry, and a leader stops at once when it sees another holder;
//! - a process that restarts with the same holder id (a container restart in the same pod)
//!   finds itself as the Lease's holder and resumes leadership at once, renewing the Lease
//!   it already holds.
//!
//! Holder ids must be unique per replica: two live processes with one id both lead.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::info;

mod arbiter;
mod campaign;
mod tracker;

#[cfg(test)]
mod tests;

use arbiter::{Arbiter, Shared, Validity};
use campaign::{LeaseTarget, spawn_campaign, spawn_observer};
use tracker::Tracker;

/// Where and as whom to campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Namespace of the Lease (`--lease-namespace`).
    pub namespace: String,
    /// Name of the Lease (`--lease-name`).
    pub lease_name: String,
    /// This replica's identity in the Lease (`--lease-holder-id`, see [`default_holder_id`]).
    pub holder_id: String,
    /// How long the Lease stays valid after a renewal: whole seconds, at least 2.
    pub lease_duration: Duration,
}

/// Leader election failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The configured lease duration cannot be written into a Lease.
    #[error(
        "lease {lease}: the lease duration {duration:?} must be a whole number of seconds, at least 2"
    )]
    InvalidDuration {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The rejected duration.
        duration: Duration,
    },
    /// The holder id is empty.
    #[error("lease {lease}: the holder id must not be empty")]
    EmptyHolderId {
        /// `namespace/name` of the Lease.
        lease: String,
    },
    /// Giving the Lease up failed; it expires on its own after one lease duration.
    #[error("lease {lease}: releasing it as {holder_id} failed: {reason}")]
    Release {
        /// `namespace/name` of the Lease.
        lease: String,
        /// This replica's holder id.
        holder_id: String,
        /// What went wrong.
        reason: String,
    },
    /// The background task of the election ended abnormally.
    #[error("lease {lease}: the leader election task of {holder_id} failed: {reason}")]
    TaskFailed {
        /// `namespace/name` of the Lease.
        lease: String,
        /// This replica's holder id.
        holder_id: String,
        /// Why it failed.
        reason: String,
    },
}

/// This replica's holder id: `$POD_NAME` if set, else the host name plus `-` and a random
/// 5-character suffix (so two processes on one host never share an id).
pub fn default_holder_id() -> String {
    let pod = std::env::var("POD_NAME").ok();
    holder_id_from(pod, hostname(), &random_suffix())
}

fn holder_id_from(pod: Option<String>, host: Option<String>, suffix: &str) -> String {
    let nonblank = |s: String| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    match pod.and_then(nonblank) {
        Some(pod) => pod,
        None => {
            let host = host
                .and_then(nonblank)
                .unwrap_or_else(|| "volmig".to_owned());
            format!("{host}-{suffix}")
        }
    }
}

fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect()
}

/// Timing derived from the lease duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timing {
    duration_secs: u64,
    /// The lease manager renews this long before expiry (so every `duration - grace`).
    grace_secs: u64,
    /// Leadership ends this long before the observed expiry.
    margin: Duration,
    /// Longest pause between retries after API errors.
    max_retry: Duration,
}

impl Timing {
    fn new(lease_duration: Duration) -> Option<Self> {
        let duration_secs = lease_duration.as_secs();
        if lease_duration.subsec_nanos() != 0 || duration_secs < 2 {
            return None;
        }
        let renew_every = ((duration_secs + 1) / 3).max(1);
        Some(Self {
            duration_secs,
            grace_secs: duration_secs - renew_every,
            margin: lease_duration / 4,
            max_retry: lease_duration / 4,
        })
    }
}

/// This replica's leadership: campaigning in the background, or always leader.
#[derive(Debug)]
pub struct Leadership {
    shared: Arc<Shared>,
    election: Option<Election>,
}

#[derive(Debug)]
struct Election {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), LeaderError>>,
    lease: String,
    holder_id: String,
}

impl Leadership {
    /// Starts campaigning in the background; returns at once. API errors are logged and
    /// retried; only an invalid `config` fails here.
    pub async fn start(client: kube::Client, config: LeaderConfig) -> Result<Self, LeaderError> {
        let lease = format!("{}/{}", config.namespace, config.lease_name);
        let Some(timing) = Timing::new(config.lease_duration) else {
            return Err(LeaderError::InvalidDuration {
                lease,
                duration: config.lease_duration,
            });
        };
        if config.holder_id.trim().is_empty() {
            return Err(LeaderError::EmptyHolderId { lease });
        }
        let target = Arc::new(LeaseTarget {
            client,
            namespace: config.namespace,
            name: config.lease_name,
            holder_id: config.holder_id.clone(),
            duration_secs: timing.duration_secs,
            grace_secs: timing.grace_secs,
            max_retry: timing.max_retry,
        });
        let shared = Arc::new(Shared::new(Validity::Never));
        let (input_tx, inputs) = mpsc::channel(32);
        let observer = spawn_observer(Arc::clone(&target), input_tx.clone());
        let campaign_target = Arc::clone(&target);
        let arbiter = Arbiter {
            tracker: Tracker::new(
                config.holder_id.clone(),
                config.lease_duration,
                timing.margin,
            ),
            shared: Arc::clone(&shared),
            inputs,
            input_tx,
            spawn_campaign: Box::new(move |generation, tx| {
                spawn_campaign(Arc::clone(&campaign_target), generation, tx)
            }),
            observer: Some(observer),
            lease: lease.clone(),
            holder_id: config.holder_id.clone(),
            release_timeout: config.lease_duration,
        };
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(arbiter.run(stop_rx));
        info!(%lease, holder_id = %config.holder_id, lease_duration = ?config.lease_duration, "campaigning for leadership");
        Ok(Self {
            shared,
            election: Some(Election {
                stop,
                task,
                lease,
                holder_id: config.holder_id,
            }),
        })
    }

    /// A single replica without election: always leader (until released or dropped).
    pub fn always_leader() -> Self {
        Self {
            shared: Arc::new(Shared::new(Validity::Always)),
            election: None,
        }
    }

    /// True while this replica holds the lease. It turns false *before* the lease can
    /// expire (a safety margin ahead, on the monotonic clock), as soon as another holder
    /// is seen, and when this `Leadership` is released or dropped — stop starting backend
    /// calls at once (docs/design.md §4.2). Feed it to `registrar::LeaderGate::new`.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.shared.subscribe()
    }

    /// Whether this replica is the leader right now: the watch value *and* the validity
    /// deadline checked against the monotonic clock at this call, so the answer is false
    /// after the lease term even if the background task has not run since.
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// A cheap, cloneable view of [`Leadership::is_leader`] for code that must check the
    /// deadline itself right before a backend call.
    pub fn handle(&self) -> LeaderHandle {
        LeaderHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Stops leading at once, then releases the lease (if held) so a follower takes over
    /// without waiting for it to expire; used on SIGTERM. Waits at most one lease duration
    /// for the API server.
    pub async fn release(mut self) -> Result<(), LeaderError> {
        self.shared.revoke();
        let Some(election) = self.election.take() else {
            return Ok(());
        };
        let Election {
            stop,
            task,
            lease,
            holder_id,
        } = election;
        // The arbiter never ends on its own, so it still listens.
        let _ = stop.send(());
        match task.await {
            Ok(result) => result,
            Err(join) => Err(LeaderError::TaskFailed {
                lease,
                holder_id,
                reason: join.to_string(),
            }),
        }
    }
}

/// Dropping a `Leadership` without [`Leadership::release`] stops leading and campaigning at
/// once but leaves the Lease as it is, like a crash: a follower takes over when it expires.
impl Drop for Leadership {
    fn drop(&mut self) {
        self.shared.revoke();
        if let Some(election) = self.election.take() {
            election.task.abort();
        }
    }
}

/// A cloneable view of a [`Leadership`]'s verdict (see [`Leadership::handle`]).
#[derive(Debug, Clone)]
pub struct LeaderHandle {
    shared: Arc<Shared>,
}

impl LeaderHandle {
    /// Same as [`Leadership::is_leader`]; false once the `Leadership` is released or dropped.
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// Same as [`Leadership::watch`].
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.shared.subscribe()
    }
}

//! Who registers in-tree vmdks right now: volmig, or the vSphere CSI driver's syncer
//! (docs/design.md §8.2).
//!
//! The stock driver's syncer registers every in-tree PV it misses in its own cache, on
//! PV/PVC/Pod events and in every full sync, whatever the CSI-migration setting — but only
//! while it leads through its Lease (`vsphere-syncer` in `vmware-system-csi`). Two
//! registrars give two CNS volumes for one vmdk, so volmig creates nothing while that Lease
//! is live (**follow**): held by an identity that is not volmig's and renewed within its
//! lease duration, measured on this process's monotonic clock from the moment a renewal was
//! seen; a controller Deployment whose syncer runs without leader election counts as live
//! too. With no live syncer, volmig is the registrar (**own**); with `--hold-driver-syncer`
//! the leading replica holds the Lease itself until every path is registered and published
//! (**hold**, [`hold`]). Until the Lease (and the Deployment) has been looked at once,
//! nothing is created (**unknown**).
//!
//! [`SyncerObserver`] is the pure state machine; [`RegistrarModeGate`] shares it with the
//! registrar, which asks [`RegistrarModeGate::may_create`] right before each write-ahead and
//! each create; [`watch_syncer_lease`] feeds it from watches of that one Lease and that one
//! Deployment, [`hold_syncer_lease`] holds the Lease.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use tokio::time::Instant;

pub mod deployment;
pub mod hold;
mod holder;
mod mode;
mod watch;

pub use hold::HoldPhase;
pub use holder::{HandOverCheck, HolderConfig, hold_syncer_lease};
pub use mode::RegistrarMode;
pub use watch::watch_syncer_lease;

/// Who volmig follows right after its hand-over, before the driver's syncer is seen leading.
pub const HANDED_OVER: &str = "the CSI driver's syncer (the Lease was handed over to it)";

/// Holder identities of this prefix are volmig's own (hold mode): never a live driver syncer.
pub const VOLMIG_HOLDER_PREFIX: &str = "volmig/";

/// Lease duration assumed when the Lease names none (the stock manifest's
/// `--leader-election-lease-duration=30s`).
pub const DEFAULT_SYNCER_LEASE_DURATION: Duration = Duration::from_secs(30);

/// The duration a Lease's `leaseDurationSeconds` gives: [`DEFAULT_SYNCER_LEASE_DURATION`]
/// when it names none, or none that is positive.
pub fn lease_duration(seconds: Option<i32>) -> Duration {
    seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_SYNCER_LEASE_DURATION, Duration::from_secs)
}

/// Where the driver's syncer leads from (`--driver-namespace`, `--driver-syncer-lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncerLeaseConfig {
    /// The driver's namespace.
    pub namespace: String,
    /// The syncer's Lease name.
    pub lease_name: String,
    /// The driver's controller Deployment, whose `vsphere-syncer` container may run without
    /// leader election (empty: not looked at).
    pub deployment: String,
}

impl Default for SyncerLeaseConfig {
    fn default() -> Self {
        Self {
            namespace: "vmware-system-csi".to_owned(),
            lease_name: "vsphere-syncer".to_owned(),
            deployment: "vsphere-csi-controller".to_owned(),
        }
    }
}

/// The Lease as last seen: holder and renew time, and when (on this clock) it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    holder: String,
    renew_time: Option<String>,
    live_until: Instant,
}

/// What is known of the driver's controller Deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum DeploymentSeen {
    /// Not watched (`--driver-deployment` empty).
    #[default]
    NotWatched,
    /// Watched, not read yet.
    NotRead,
    /// Read: `Some` describes a syncer running without leader election.
    Read(Option<String>),
}

/// The syncer Lease state machine (pure: time comes in as arguments).
#[derive(Debug, Default)]
pub struct SyncerObserver {
    observed: bool,
    seen: Option<Seen>,
    deployment: DeploymentSeen,
    hold: HoldPhase,
    /// A driver syncer was seen holding the Lease since the hand-over.
    driver_led_since_hand_over: bool,
}

impl SyncerObserver {
    /// An observer that also waits for the driver's controller Deployment to be read.
    pub fn watching_deployment() -> Self {
        Self {
            deployment: DeploymentSeen::NotRead,
            ..Self::default()
        }
    }

    /// The Lease was read at monotonic `now` (`None`: it does not exist). A holder or renew
    /// time not seen before counts as a renewal now: the first sight of a held Lease is
    /// presumed live for one lease duration.
    pub fn on_lease(&mut self, spec: Option<&LeaseSpec>, now: Instant) {
        self.observed = true;
        let holder = spec
            .and_then(|s| s.holder_identity.as_deref())
            .filter(|h| !h.is_empty() && !h.starts_with(VOLMIG_HOLDER_PREFIX));
        let Some((holder, spec)) = holder.zip(spec) else {
            self.seen = None;
            return;
        };
        let renew_time = spec.renew_time.as_ref().map(|t| t.0.to_string());
        let unchanged = self
            .seen
            .as_ref()
            .is_some_and(|s| s.holder == holder && s.renew_time == renew_time);
        if unchanged {
            return;
        }
        let duration = lease_duration(spec.lease_duration_seconds);
        self.driver_led_since_hand_over = true;
        self.seen = Some(Seen {
            holder: holder.to_owned(),
            renew_time,
            live_until: now + duration,
        });
    }

    /// The driver's controller Deployment as read: `Some` describes a syncer that runs
    /// without leader election ([`deployment::syncer_without_election`]).
    pub fn on_deployment(&mut self, unelected: Option<String>) {
        self.deployment = DeploymentSeen::Read(unelected);
    }

    /// This replica's hold of the Lease changed (`--hold-driver-syncer`).
    pub fn set_hold(&mut self, phase: HoldPhase) {
        if phase == HoldPhase::HandedOver && self.hold != HoldPhase::HandedOver {
            self.driver_led_since_hand_over = false;
        }
        self.hold = phase;
    }

    /// This replica's hold of the Lease.
    pub fn hold(&self) -> &HoldPhase {
        &self.hold
    }

    /// True when a driver syncer other than volmig holds the Lease live at `now`.
    pub fn driver_lease_live(&self, now: Instant) -> bool {
        self.seen.as_ref().is_some_and(|s| now < s.live_until)
    }

    /// Who registers at monotonic `now`.
    pub fn mode(&self, now: Instant) -> RegistrarMode {
        if !self.observed || self.deployment == DeploymentSeen::NotRead {
            return RegistrarMode::Unknown;
        }
        if let DeploymentSeen::Read(Some(unelected)) = &self.deployment {
            return RegistrarMode::Follow {
                holder: unelected.clone(),
            };
        }
        let follow =
            self.seen
                .as_ref()
                .filter(|s| now < s.live_until)
                .map(|s| RegistrarMode::Follow {
                    holder: s.holder.clone(),
                });
        match &self.hold {
            HoldPhase::Held {
                holder,
                sends_until,
            } if now < *sends_until => RegistrarMode::Hold {
                holder: holder.clone(),
            },
            // A replica that is not the volmig leader creates nothing anyway; one that just
            // became it must not create before its holder has taken the Lease.
            HoldPhase::Held { .. } | HoldPhase::Acquiring | HoldPhase::Standby => {
                follow.unwrap_or(RegistrarMode::Acquiring)
            }
            // Handed over: the driver's syncer is about to lead. Until it has been seen
            // leading, volmig does not register (a create now could race its first
            // registration on a miss); afterwards the usual rules apply.
            HoldPhase::HandedOver if follow.is_none() && !self.driver_led_since_hand_over => {
                RegistrarMode::Follow {
                    holder: HANDED_OVER.to_owned(),
                }
            }
            HoldPhase::Off | HoldPhase::HandedOver => follow.unwrap_or(RegistrarMode::Own),
        }
    }

    /// When [`Self::mode`] changes by itself (a live Lease or a send window running out),
    /// if it will.
    pub fn expires_at(&self, now: Instant) -> Option<Instant> {
        let lease = self.seen.as_ref().map(|s| s.live_until);
        let hold = match &self.hold {
            HoldPhase::Held { sends_until, .. } => Some(*sends_until),
            _ => None,
        };
        lease.into_iter().chain(hold).filter(|at| *at > now).min()
    }
}

/// Why volmig may not create now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotRegistrar(pub RegistrarMode);

/// The registrar's view of [`SyncerObserver`], shared with the watch that feeds it.
#[derive(Clone)]
pub struct RegistrarModeGate {
    observer: Option<Arc<Mutex<SyncerObserver>>>,
}

impl RegistrarModeGate {
    /// Always the registrar (no driver to follow: unit tests, `--driver-syncer-lease=""`).
    pub fn always_own() -> Self {
        Self { observer: None }
    }

    /// A gate fed by `observer`.
    pub fn observing(observer: Arc<Mutex<SyncerObserver>>) -> Self {
        Self {
            observer: Some(observer),
        }
    }

    /// Who registers now.
    pub fn mode(&self) -> RegistrarMode {
        match &self.observer {
            None => RegistrarMode::Own,
            Some(observer) => observer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .mode(Instant::now()),
        }
    }

    /// `Ok` when volmig may create now; else who does.
    pub fn may_create(&self) -> Result<(), NotRegistrar> {
        match self.mode() {
            mode if mode.registers() => Ok(()),
            other => Err(NotRegistrar(other)),
        }
    }
}

impl Default for RegistrarModeGate {
    fn default() -> Self {
        Self::always_own()
    }
}

impl fmt::Debug for RegistrarModeGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistrarModeGate")
            .field("mode", &self.mode())
            .finish()
    }
}

#[cfg(test)]
mod tests;

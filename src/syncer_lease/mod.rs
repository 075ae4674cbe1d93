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

pub use deployment::DriverPresence;
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

/// When volmig may take the driver syncer's Lease from nobody or from a lapsed driver
/// syncer (docs/design.md §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakePolicy {
    /// `--hold-driver-syncer`: take it even while the driver's Deployment stands, and hand
    /// it over once every path is Registered and published; never take it again after that.
    pub hold: bool,
    /// The in-flight grace (docs/design.md §4.10): a lapsed syncer's `registerVolume` may
    /// still land this long after its last renewal seen, and a Deployment scaled to 0
    /// replicas counts as absent after this long.
    pub grace: Duration,
}

/// [`TakePolicy::grace`] when none is given: the registrar's default in-flight grace (the
/// default request timeout plus task timeout, docs/design.md §4.10). The daemon always
/// passes its effective grace.
pub const DEFAULT_TAKE_GRACE: Duration = Duration::from_secs(660);

impl Default for TakePolicy {
    fn default() -> Self {
        Self {
            hold: false,
            grace: DEFAULT_TAKE_GRACE,
        }
    }
}

/// A driver syncer's Lease as last seen: holder and renew time, and until when (on this
/// clock) it is live.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    holder: String,
    renew_time: Option<String>,
    live_until: Instant,
}

/// What is known of the driver's controller Deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum DeploymentSeen {
    /// Not watched (`--driver-deployment` empty): judged absent.
    #[default]
    NotWatched,
    /// Watched, not read yet.
    NotRead,
    /// Read; `scaled_down_since`: when it was first seen with 0 replicas, while it has.
    Read {
        presence: DriverPresence,
        scaled_down_since: Option<Instant>,
    },
}

/// The syncer Lease state machine (pure: time comes in as arguments).
#[derive(Debug, Default)]
pub struct SyncerObserver {
    policy: TakePolicy,
    observed: bool,
    seen: Option<Seen>,
    /// When a driver holder's record was last seen changing (a renewal, or first sight).
    last_driver_renewal: Option<Instant>,
    deployment: DeploymentSeen,
    hold: HoldPhase,
    /// `--hold-driver-syncer` handed the Lease over: volmig never takes it again.
    handed_over: bool,
    /// A driver syncer was seen holding the Lease since the hand-over.
    driver_led_since_hand_over: bool,
}

impl SyncerObserver {
    /// An observer with `policy`; `watch_deployment`: the driver's controller Deployment is
    /// watched, and nothing is decided before it was read.
    pub fn new(policy: TakePolicy, watch_deployment: bool) -> Self {
        Self {
            policy,
            deployment: if watch_deployment {
                DeploymentSeen::NotRead
            } else {
                DeploymentSeen::NotWatched
            },
            ..Self::default()
        }
    }

    /// The Lease was read at monotonic `now` (`None`: it does not exist). A holder or renew
    /// time not seen before counts as a renewal now: the first sight of a held Lease is
    /// presumed live for one lease duration, and a driver's registration may still land for
    /// one in-flight grace after it.
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
        self.last_driver_renewal = Some(now);
        self.seen = Some(Seen {
            holder: holder.to_owned(),
            renew_time,
            live_until: now + duration,
        });
    }

    /// The driver's controller Deployment as read at monotonic `now`
    /// ([`deployment::presence`]).
    pub fn on_deployment(&mut self, presence: DriverPresence, now: Instant) {
        let scaled_down = matches!(presence, DriverPresence::Elected { replicas: 0, .. });
        let scaled_down_since = match &self.deployment {
            DeploymentSeen::Read {
                scaled_down_since: Some(since),
                ..
            } if scaled_down => Some(*since),
            _ => scaled_down.then_some(now),
        };
        self.deployment = DeploymentSeen::Read {
            presence,
            scaled_down_since,
        };
    }

    /// This replica's hold of the Lease changed.
    pub fn set_hold(&mut self, phase: HoldPhase) {
        if phase == HoldPhase::HandedOver && self.hold != HoldPhase::HandedOver {
            self.handed_over = true;
            self.driver_led_since_hand_over = false;
        }
        self.hold = phase;
    }

    /// This replica's hold of the Lease.
    pub fn hold(&self) -> &HoldPhase {
        &self.hold
    }

    /// True while the leader should hold the Lease: always, except after the hand-over of
    /// `--hold-driver-syncer`.
    pub fn wants_hold(&self) -> bool {
        !(self.policy.hold && self.handed_over)
    }

    /// True while the hold ends in a hand-over (`--hold-driver-syncer`, not handed over yet).
    pub fn hands_over(&self) -> bool {
        self.policy.hold && !self.handed_over
    }

    /// True once the Lease (and the Deployment, when watched) has been read.
    pub fn has_read(&self) -> bool {
        self.observed && self.deployment != DeploymentSeen::NotRead
    }

    /// True when a driver syncer other than volmig holds the Lease live at `now`.
    pub fn driver_lease_live(&self, now: Instant) -> bool {
        self.live(now).is_some()
    }

    fn live(&self, now: Instant) -> Option<&Seen> {
        self.seen.as_ref().filter(|s| now < s.live_until)
    }

    /// `Ok` when volmig may take the Lease at `now` from nobody or from a lapsed driver
    /// syncer; else why not. Never while a driver syncer holds it live or runs without
    /// election; without `--hold-driver-syncer` only when no driver is deployed (no
    /// Deployment, or 0 replicas for one in-flight grace); and only one in-flight grace
    /// after the last renewal seen, since that syncer's `registerVolume` may still run.
    pub fn may_take(&self, now: Instant) -> Result<(), String> {
        if !self.observed {
            return Err("the CSI driver's syncer Lease has not been read yet".into());
        }
        if let Some(live) = self.live(now) {
            return Err(format!(
                "the CSI driver's syncer {} holds its Lease",
                live.holder
            ));
        }
        match &self.deployment {
            DeploymentSeen::NotRead => {
                return Err("the CSI driver's controller Deployment has not been read yet".into());
            }
            DeploymentSeen::Read {
                presence: DriverPresence::Unelected(unelected),
                ..
            } => return Err(unelected.clone()),
            DeploymentSeen::Read {
                presence: DriverPresence::Elected { name, replicas },
                scaled_down_since,
            } if !self.hands_over()
                && scaled_down_since.is_none_or(|since| now < since + self.policy.grace) =>
            {
                return Err(format!(
                    "the CSI driver's syncer Lease is not renewed while deployment/{name} \
                     stands with {replicas} replicas (a rollout or a crash: its next syncer \
                     leads soon)"
                ));
            }
            _ => {}
        }
        match self.last_driver_renewal {
            Some(renewed) if now < renewed + self.policy.grace => Err(format!(
                "a lapsed CSI driver syncer may still be registering: volmig takes its Lease \
                 one in-flight grace ({} s) after the last renewal it saw",
                self.policy.grace.as_secs()
            )),
            _ => Ok(()),
        }
    }

    /// Who registers at monotonic `now`: volmig only while this replica holds the Lease
    /// within its send window.
    pub fn mode(&self, now: Instant) -> RegistrarMode {
        if !self.has_read() {
            return RegistrarMode::Unknown;
        }
        if let DeploymentSeen::Read {
            presence: DriverPresence::Unelected(unelected),
            ..
        } = &self.deployment
        {
            return RegistrarMode::Follow {
                holder: unelected.clone(),
            };
        }
        // A driver syncer seen holding the Lease wins over this replica's own record of a
        // hold: whatever the reason, the Lease is not volmig's now.
        if let Some(live) = self.live(now) {
            return RegistrarMode::Follow {
                holder: live.holder.clone(),
            };
        }
        if let HoldPhase::Held {
            holder,
            sends_until,
        } = &self.hold
            && now < *sends_until
        {
            let holder = holder.clone();
            return if self.hands_over() {
                RegistrarMode::Hold { holder }
            } else {
                RegistrarMode::Own { holder }
            };
        }
        if !self.wants_hold() {
            // Handed over: until the driver's syncer has been seen leading, a create now
            // could race its first registration on a miss.
            return if self.driver_led_since_hand_over {
                RegistrarMode::Waiting {
                    reason: "the CSI driver's syncer Lease, handed over, is not renewed: waiting for its next syncer".into(),
                }
            } else {
                RegistrarMode::Follow {
                    holder: HANDED_OVER.to_owned(),
                }
            };
        }
        match self.may_take(now) {
            // A replica that is not the volmig leader creates nothing anyway; one that just
            // became it must not create before its holder has taken the Lease.
            Ok(()) => RegistrarMode::Acquiring,
            Err(reason) => RegistrarMode::Waiting { reason },
        }
    }

    /// When [`Self::mode`] changes by itself (a live Lease, a send window or a grace running
    /// out), if it will.
    pub fn expires_at(&self, now: Instant) -> Option<Instant> {
        let lease = self.seen.as_ref().map(|s| s.live_until);
        let hold = match &self.hold {
            HoldPhase::Held { sends_until, .. } => Some(*sends_until),
            _ => None,
        };
        let grace = self.last_driver_renewal.map(|t| t + self.policy.grace);
        let scaled_down = match &self.deployment {
            DeploymentSeen::Read {
                scaled_down_since: Some(since),
                ..
            } => Some(*since + self.policy.grace),
            _ => None,
        };
        [lease, hold, grace, scaled_down]
            .into_iter()
            .flatten()
            .filter(|at| *at > now)
            .min()
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
    /// Always the registrar, without any Lease (unit tests, `--driver-syncer-lease=""`).
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
            None => RegistrarMode::Unguarded,
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

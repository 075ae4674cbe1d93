//! Who registers in-tree vmdks right now: volmig, or the vSphere CSI driver's syncer
//! (docs/design.md §8.2).
//!
//! The stock driver's syncer registers every in-tree PV it misses in its own cache, on
//! PV/PVC/Pod events and in every full sync, whatever the CSI-migration setting — but only
//! while it leads through its Lease (`vsphere-syncer` in `vmware-system-csi`). Two
//! registrars give two CNS volumes for one vmdk, so volmig creates nothing while that Lease
//! is live (**follow**): held by an identity that is not volmig's and renewed within its
//! lease duration, measured on this process's monotonic clock from the moment a renewal was
//! seen. With no live syncer Lease, volmig is the registrar (**own**). Until the Lease has
//! been looked at once, nothing is created (**unknown**).
//!
//! [`SyncerObserver`] is the pure state machine; [`RegistrarModeGate`] shares it with the
//! registrar, which asks [`RegistrarModeGate::may_create`] right before each write-ahead and
//! each create; [`watch_syncer_lease`] feeds it from a watch of that one Lease.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use tokio::time::Instant;

mod watch;

pub use watch::watch_syncer_lease;

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
}

impl Default for SyncerLeaseConfig {
    fn default() -> Self {
        Self {
            namespace: "vmware-system-csi".to_owned(),
            lease_name: "vsphere-syncer".to_owned(),
        }
    }
}

/// Who registers now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrarMode {
    /// The syncer's Lease has not been looked at yet: nobody is presumed absent.
    Unknown,
    /// No live syncer Lease: volmig registers.
    Own,
    /// The driver's syncer leads as `holder`: volmig creates nothing and adopts its IDs.
    Follow {
        /// The Lease's `holderIdentity`.
        holder: String,
    },
}

impl RegistrarMode {
    /// The value of the `mode` label of `volmig_registrar_mode`.
    pub fn label(&self) -> &'static str {
        match self {
            RegistrarMode::Unknown => "unknown",
            RegistrarMode::Own => "own",
            RegistrarMode::Follow { .. } => "follow",
        }
    }
}

impl fmt::Display for RegistrarMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistrarMode::Unknown => {
                f.write_str("unknown (the CSI driver's syncer Lease has not been read yet)")
            }
            RegistrarMode::Own => f.write_str("own (no live CSI driver syncer: volmig registers)"),
            RegistrarMode::Follow { holder } => write!(
                f,
                "follow (the CSI driver's syncer {holder} leads and registers; volmig adopts)"
            ),
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

/// The syncer Lease state machine (pure: time comes in as arguments).
#[derive(Debug, Default)]
pub struct SyncerObserver {
    observed: bool,
    seen: Option<Seen>,
}

impl SyncerObserver {
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
        self.seen = Some(Seen {
            holder: holder.to_owned(),
            renew_time,
            live_until: now + duration,
        });
    }

    /// Who registers at monotonic `now`.
    pub fn mode(&self, now: Instant) -> RegistrarMode {
        match &self.seen {
            _ if !self.observed => RegistrarMode::Unknown,
            Some(seen) if now < seen.live_until => RegistrarMode::Follow {
                holder: seen.holder.clone(),
            },
            _ => RegistrarMode::Own,
        }
    }

    /// When [`Self::mode`] changes by itself (a live Lease running out), if it will.
    pub fn expires_at(&self) -> Option<Instant> {
        self.seen.as_ref().map(|s| s.live_until)
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
            RegistrarMode::Own => Ok(()),
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

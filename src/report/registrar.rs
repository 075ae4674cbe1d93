//! Who registers in-tree vmdks, as far as one read of the vSphere CSI driver's syncer Lease
//! tells (docs/design.md §8.7): the `Registrar:` line of the table and `registrar` in JSON.
//!
//! The daemon decides on its own monotonic clock from the renewals it sees
//! ([`crate::syncer_lease::SyncerObserver`]). A one-shot report sees one version of the
//! Lease and no renewal, so [`decide`] takes the Lease as read: held by an identity that is
//! not volmig's and `renewTime` + `leaseDurationSeconds` still ahead of the wall clock →
//! follow; held but stale, without a holder, or absent → own; unreadable → unknown. Pure:
//! [`super::fetch::read_syncer_lease`] does the one GET.

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::LeaseSpec;
use serde::Serialize;

use crate::syncer_lease::{
    DriverPresence, SyncerLeaseConfig, VOLMIG_HOLDER_PREFIX, lease_duration,
};

/// What volmig does with a Lease nobody holds live, when no driver Deployment stands.
const TAKES: &str = "volmig registers, once it holds this Lease itself (one in-flight grace \
                     after the last renewal it saw)";

/// The fields of the syncer's Lease the decision reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncerLease {
    /// `spec.holderIdentity`.
    pub holder_identity: Option<String>,
    /// `spec.renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`, as written.
    pub lease_duration_seconds: Option<i32>,
}

impl From<&LeaseSpec> for SyncerLease {
    fn from(spec: &LeaseSpec) -> Self {
        Self {
            holder_identity: spec.holder_identity.clone(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            lease_duration_seconds: spec.lease_duration_seconds,
        }
    }
}

/// What the one GET of the syncer's Lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncerLeaseRead {
    /// `--driver-syncer-lease` is empty: nothing was read, nobody is followed.
    NotNamed,
    /// The Lease does not exist (HTTP 404).
    Absent,
    /// The Lease as read.
    Found(SyncerLease),
    /// The GET failed: the HTTP status code (`None`: no answer) and the message.
    Unreadable {
        /// HTTP status code of the API server's answer, if there was one.
        code: Option<u16>,
        /// The API server's message, or the client error.
        message: String,
    },
}

/// Who registers in-tree vmdks (the `mode` of `volmig_registrar_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// volmig registers.
    Own,
    /// The CSI driver's syncer registers; volmig adopts its volumes.
    Follow,
    /// volmig holds the driver syncer's Lease (`--hold-driver-syncer`) and registers.
    Hold,
    /// The report cannot tell.
    Unknown,
}

impl Mode {
    /// `own`, `follow`, `hold` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Own => "own",
            Mode::Follow => "follow",
            Mode::Hold => "hold",
            Mode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The registrar as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Registrar {
    /// Who registers.
    pub mode: Mode,
    /// `namespace/name` of the syncer's Lease (`None`: `--driver-syncer-lease` is empty).
    pub lease: Option<String>,
    /// The Lease's `holderIdentity` (`None`: no Lease, or no holder).
    pub holder: Option<String>,
    /// The Lease's `renewTime`, as read.
    pub renew_time: Option<Timestamp>,
    /// The lease duration the decision used: the Lease's, or 30 s when it names none
    /// (`None`: no Lease).
    pub lease_duration_seconds: Option<u64>,
    /// Why, for a human.
    pub why: String,
}

impl Registrar {
    /// The table's line: `Registrar: <mode> — <why>`.
    pub fn line(&self) -> String {
        format!("Registrar: {} — {}", self.mode, self.why)
    }
}

/// Decides who registers from the Lease of `config` as `read`, at wall-clock `now`.
///
/// - held by an identity not starting with [`VOLMIG_HOLDER_PREFIX`] and `now` before
///   `renewTime` + `leaseDurationSeconds` (30 s when absent or not positive): **follow**;
/// - held but past that: **own** (the syncer stopped renewing);
/// - no holder, volmig's own identity, no Lease, or no Lease named: **own**;
/// - held without a `renewTime`, or not readable (e.g. HTTP 403): **unknown**.
pub fn decide(config: &SyncerLeaseConfig, read: &SyncerLeaseRead, now: Timestamp) -> Registrar {
    let name = format!("{}/{}", config.namespace, config.lease_name);
    let mut registrar = Registrar {
        mode: Mode::Own,
        lease: Some(name.clone()),
        holder: None,
        renew_time: None,
        lease_duration_seconds: None,
        why: String::new(),
    };
    let lease = match read {
        SyncerLeaseRead::NotNamed => {
            registrar.lease = None;
            registrar.why = "no CSI driver syncer is followed (--driver-syncer-lease is empty): \
                             volmig registers"
                .to_owned();
            return registrar;
        }
        SyncerLeaseRead::Absent => {
            registrar.why = format!("no CSI driver syncer Lease ({name} not found): {TAKES}");
            return registrar;
        }
        SyncerLeaseRead::Unreadable { code, message } => {
            registrar.mode = Mode::Unknown;
            registrar.why = match code {
                Some(code @ (401 | 403)) => format!(
                    "cannot read the CSI driver's syncer Lease {name}: {message} (HTTP {code}); \
                     the report needs get on that Lease"
                ),
                Some(code) => format!(
                    "cannot read the CSI driver's syncer Lease {name}: {message} (HTTP {code})"
                ),
                None => format!("cannot read the CSI driver's syncer Lease {name}: {message}"),
            };
            return registrar;
        }
        SyncerLeaseRead::Found(lease) => lease,
    };
    let seconds = lease_duration(lease.lease_duration_seconds).as_secs();
    registrar.lease_duration_seconds = Some(seconds);
    registrar.renew_time = lease.renew_time;
    let Some(holder) = lease.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
        registrar.why = format!("the CSI driver's syncer Lease {name} has no holder: {TAKES}");
        return registrar;
    };
    registrar.holder = Some(holder.to_owned());
    let volmig_holds = holder.starts_with(VOLMIG_HOLDER_PREFIX);
    if volmig_holds && lease.renew_time.is_none() {
        registrar.why = format!(
            "the Lease {name} is held by volmig's own identity {holder}, not by the CSI \
             driver's syncer: volmig registers"
        );
        return registrar;
    }
    let Some(renewed) = lease.renew_time else {
        registrar.mode = Mode::Unknown;
        registrar.why = format!(
            "the CSI driver's syncer {holder} holds the Lease {name} but it has no renewTime: \
             the report cannot tell whether it is live (the daemon follows it for {seconds} s \
             from when it first sees it)"
        );
        return registrar;
    };
    // i64 seconds: u64 values from a positive i32 always fit
    let duration = SignedDuration::from_secs(i64::try_from(seconds).unwrap_or(i64::MAX));
    // None: past the end of time, i.e. live for as long as anyone can tell
    let expires = renewed.checked_add(duration).ok();
    let renewed_text = whole_seconds(renewed);
    match expires {
        Some(expires) if now >= expires && volmig_holds => {
            registrar.why = format!(
                "the Lease {name} was held by volmig ({holder}) until {}: whoever leads next \
                 registers",
                whole_seconds(expires)
            );
        }
        _ if volmig_holds => {
            registrar.mode = Mode::Hold;
            registrar.why = format!(
                "volmig holds the CSI driver's syncer Lease {name} as {holder} (renewed \
                 {renewed_text}, {seconds} s): the driver's syncer cannot lead; volmig \
                 registers, and with --hold-driver-syncer hands the Lease over once every path \
                 is done"
            );
        }
        Some(expires) if now >= expires => {
            registrar.why = format!(
                "the CSI driver's syncer Lease {name} expired at {} (held by {holder}, renewed \
                 {renewed_text}, {seconds} s): {TAKES}",
                whole_seconds(expires)
            );
        }
        _ => {
            registrar.mode = Mode::Follow;
            registrar.why = format!(
                "the CSI driver's syncer {holder} (Lease {name}, renewed {renewed_text}, \
                 {seconds} s) registers in-tree vmdks; volmig adopts its volumes (as of the \
                 Lease's renewTime; the daemon decides on its own clock)"
            );
        }
    }
    registrar
}

/// The registrar once the driver's controller Deployment was read (`None`: not named or
/// not readable). A syncer that runs without leader election registers whatever the Lease
/// says, so volmig follows it; a Deployment whose syncer elects a leader and wants replicas
/// leads again soon, so a lapsed Lease does not make volmig the registrar (docs/design.md
/// §8.2): volmig waits for the next syncer.
pub fn with_deployment(mut registrar: Registrar, presence: Option<DriverPresence>) -> Registrar {
    match presence {
        Some(DriverPresence::Unelected(syncer)) => {
            registrar.mode = Mode::Follow;
            registrar.why = format!(
                "the CSI driver's syncer {syncer} registers in-tree vmdks; volmig adopts its volumes"
            );
            registrar.holder = Some(syncer);
        }
        Some(DriverPresence::Elected { name, replicas })
            if replicas > 0
                && registrar.mode == Mode::Own
                && !registrar
                    .holder
                    .as_deref()
                    .is_some_and(|h| h.starts_with(VOLMIG_HOLDER_PREFIX)) =>
        {
            registrar.mode = Mode::Follow;
            registrar.why = format!(
                "{}; but deployment/{name} stands with {replicas} replicas, so its next syncer \
                 leads soon (a rollout or a crash): volmig creates nothing and waits for it",
                registrar.why.split(": volmig").next().unwrap_or_default()
            );
        }
        _ => {}
    }
    registrar
}

/// The registrar once it is known whether volmig runs with `--hold-driver-syncer`
/// (`volmig check` knows, the report does not): a Lease volmig holds without that flag is
/// own mode — held for good, never handed over (docs/design.md §8.7).
pub fn with_hold_flag(mut registrar: Registrar, hold: bool) -> Registrar {
    if registrar.mode == Mode::Hold && !hold {
        registrar.mode = Mode::Own;
        if let Some((held, _)) = registrar
            .why
            .split_once(": the driver's syncer cannot lead")
        {
            registrar.why = format!(
                "{held}: the driver's syncer cannot lead; no driver is deployed, so volmig \
                 holds it for good and registers"
            );
        }
    }
    registrar
}

/// `2026-12-07T01:02:03Z`: UTC, fractions of a second left out.
fn whole_seconds(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
#[path = "registrar_tests.rs"]
mod tests;

//! Holding the driver syncer's Lease (docs/design.md §8.2): volmig creates only while its
//! leading replica holds that Lease itself, so the stock syncer cannot lead (and register on
//! a miss) at the same time. Without a driver volmig holds it for good (own); with
//! `--hold-driver-syncer` it hands it over once every path is done (hold). Pure:
//! [`decide_hold`] says what to write, [`HoldPhase`] what the registrar may do;
//! [`super::holder`] does the API calls.
//!
//! The timing that keeps one registrar across a volmig crash: the Lease is written with
//! `leaseDurationSeconds` = in-flight grace + [`HOLD_SEND_WINDOW`], and after each successful
//! write volmig sends creates for [`HOLD_SEND_WINDOW`] only. client-go's leader election (the
//! driver's syncer) acquires a held Lease only once `leaseDurationSeconds` has passed since it
//! saw the last renewal, so a create sent in the window has landed (or can no longer land,
//! §4.10) before the driver can lead.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use tokio::time::Instant;

use super::VOLMIG_HOLDER_PREFIX;

/// How long after a successful write of the Lease volmig may still send creates. Renewals
/// come every [`HOLD_RENEW_PERIOD`], so a healthy holder never reaches the end of it.
pub const HOLD_SEND_WINDOW: Duration = Duration::from_secs(30);

/// How often the holding replica renews the Lease (and looks whether it can hand it over).
pub const HOLD_RENEW_PERIOD: Duration = Duration::from_secs(10);

/// `leaseDurationSeconds` volmig writes while it holds: the in-flight grace plus
/// [`HOLD_SEND_WINDOW`], in whole seconds rounded up.
pub fn hold_lease_seconds(in_flight_grace: Duration) -> i32 {
    let total = in_flight_grace + HOLD_SEND_WINDOW;
    let seconds = total.as_secs() + u64::from(total.subsec_nanos() > 0);
    i32::try_from(seconds).unwrap_or(i32::MAX)
}

/// Where this replica stands with the syncer's Lease.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HoldPhase {
    /// The holder has not looked yet.
    #[default]
    Off,
    /// Not the volmig leader: another replica holds (or will hold) it; this one neither
    /// renews nor releases it.
    Standby,
    /// The volmig leader is taking the Lease: nothing is created until it holds it.
    Acquiring,
    /// Held as `holder`; creates may be sent until `sends_until`.
    Held {
        /// volmig's holder identity.
        holder: String,
        /// End of the send window of the last successful write.
        sends_until: Instant,
    },
    /// Every path was Registered and published and the Lease released: from now on volmig
    /// follows the driver like without `--hold-driver-syncer`.
    HandedOver,
}

/// What the holder writes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldAction {
    /// The Lease does not exist: create it, held by this replica.
    Create,
    /// Write this replica as holder with a fresh `renewTime` (a renewal, or with `takeover`
    /// a change of holder: free, expired, or held by another volmig replica).
    Write {
        /// The holder changes (acquireTime and leaseTransitions change with it).
        takeover: bool,
    },
    /// The driver's syncer holds it live, or may not be preempted (its Deployment stands, or
    /// its last registration may still land): wait, creating nothing.
    Wait,
    /// Clear the holder: hand the Lease over to the driver's syncer.
    Release,
    /// Nothing to write.
    Nothing,
}

/// Decides the next write for `me`, given the Lease as read, whether this replica wants to
/// hold it (it leads and has not handed over), and whether it may take the Lease from
/// nobody or from a driver syncer ([`super::SyncerObserver::may_take`]). Another volmig
/// replica's hold is taken over at once: only the volmig leader holds, and it is this one.
pub fn decide_hold(lease: Option<&LeaseSpec>, me: &str, want: bool, may_take: bool) -> HoldAction {
    let Some(spec) = lease else {
        return match (want, may_take) {
            (true, true) => HoldAction::Create,
            (true, false) => HoldAction::Wait,
            (false, _) => HoldAction::Nothing,
        };
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    match (want, holder) {
        (true, h) if h == me => HoldAction::Write { takeover: false },
        (true, h) if h.starts_with(VOLMIG_HOLDER_PREFIX) => HoldAction::Write { takeover: true },
        (true, _) if may_take => HoldAction::Write { takeover: true },
        (true, _) => HoldAction::Wait,
        (false, h) if h == me => HoldAction::Release,
        (false, _) => HoldAction::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            ..LeaseSpec::default()
        }
    }

    const ME: &str = "volmig/volmig-0";

    #[test]
    fn the_leader_creates_renews_and_takes_what_it_may_take() {
        assert_eq!(decide_hold(None, ME, true, true), HoldAction::Create);
        for may_take in [true, false] {
            assert_eq!(
                decide_hold(Some(&held_by(ME)), ME, true, may_take),
                HoldAction::Write { takeover: false },
                "its own hold is renewed"
            );
            // Another volmig replica's hold is taken over at once, even while it looks live:
            // only the volmig leader holds, and it is this one now.
            assert_eq!(
                decide_hold(Some(&held_by("volmig/volmig-1")), ME, true, may_take),
                HoldAction::Write { takeover: true },
            );
        }
        for free in ["", "csi-controller-0"] {
            assert_eq!(
                decide_hold(Some(&held_by(free)), ME, true, true),
                HoldAction::Write { takeover: true },
                "{free:?}"
            );
        }
        assert_eq!(
            decide_hold(Some(&LeaseSpec::default()), ME, true, true),
            HoldAction::Write { takeover: true }
        );
    }

    #[test]
    fn what_may_not_be_taken_is_waited_for_and_never_created() {
        assert_eq!(decide_hold(None, ME, true, false), HoldAction::Wait);
        for other in ["", "csi-controller-0"] {
            assert_eq!(
                decide_hold(Some(&held_by(other)), ME, true, false),
                HoldAction::Wait,
                "{other:?}"
            );
        }
    }

    #[test]
    fn only_this_replicas_hold_is_released_and_nothing_else_is_touched() {
        assert_eq!(
            decide_hold(Some(&held_by(ME)), ME, false, false),
            HoldAction::Release
        );
        for other in ["", "volmig/volmig-1", "csi-controller-0"] {
            assert_eq!(
                decide_hold(Some(&held_by(other)), ME, false, false),
                HoldAction::Nothing
            );
        }
        assert_eq!(decide_hold(None, ME, false, false), HoldAction::Nothing);
    }

    #[test]
    fn the_lease_duration_covers_the_grace_and_the_send_window() {
        assert_eq!(hold_lease_seconds(Duration::from_secs(660)), 690);
        assert_eq!(hold_lease_seconds(Duration::from_millis(12_500)), 43);
        assert_eq!(hold_lease_seconds(Duration::MAX / 2), i32::MAX);
    }
}

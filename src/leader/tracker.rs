//! "Are we the leader right now?", decided from what the lease manager reports *and* from the
//! Lease as observed, against this process's monotonic clock.
//!
//! The lease manager alone is not enough: it learns about a lost lease only on its next
//! renewal. This tracker holds a monotonic "valid until" derived from the last observed
//! `renewTime` (minus a safety margin), so leadership ends on this process's own clock even
//! when nothing else runs — e.g. after the process was paused (SIGSTOP) past its lease term.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::LeaseSpec;
use tokio::time::Instant;

/// Who holds the Lease, as last observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Observed {
    /// Not observed yet.
    Unknown,
    /// The Lease does not exist or has no holder.
    Free,
    /// This replica holds it.
    Us,
    /// Another replica holds it.
    Other(String),
}

/// Why this replica is not the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NotLeading {
    /// The lease manager does not report us as the holder.
    Campaigning,
    /// The Lease has not been observed yet.
    NotObserved,
    /// The Lease has no holder.
    Free,
    /// Another replica holds the Lease.
    HeldBy(String),
    /// No renewal was observed in time: the lease term (minus the safety margin) ran out on
    /// this process's monotonic clock.
    RenewalOverdue,
}

impl std::fmt::Display for NotLeading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotLeading::Campaigning => f.write_str("the lease manager does not hold the lease"),
            NotLeading::NotObserved => f.write_str("the lease has not been observed yet"),
            NotLeading::Free => f.write_str("the lease has no holder"),
            NotLeading::HeldBy(holder) => write!(f, "the lease is held by {holder}"),
            NotLeading::RenewalOverdue => {
                f.write_str("no renewal observed before the lease term ran out on this clock")
            }
        }
    }
}

/// A change of leadership found by [`Tracker::evaluate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// This replica became the leader, valid until the given instant unless renewed.
    Gained(Instant),
    /// This replica stopped being the leader.
    Lost(NotLeading),
}

/// The leadership state machine (pure: time comes in as arguments).
#[derive(Debug)]
pub(super) struct Tracker {
    holder_id: String,
    lease_duration: Duration,
    margin: Duration,
    manager_holds: bool,
    observed: Observed,
    valid_until: Option<Instant>,
    leader: bool,
    restart_wanted: bool,
}

impl Tracker {
    /// A tracker for `holder_id`; leadership ends `margin` before the lease would expire.
    pub(super) fn new(holder_id: String, lease_duration: Duration, margin: Duration) -> Self {
        Self {
            holder_id,
            lease_duration,
            margin,
            manager_holds: false,
            observed: Observed::Unknown,
            valid_until: None,
            leader: false,
            restart_wanted: false,
        }
    }

    /// The lease manager reported whether it holds the lease.
    pub(super) fn on_manager(&mut self, holds: bool) {
        self.manager_holds = holds;
    }

    /// A new campaign (a fresh lease manager) starts: it holds nothing yet.
    pub(super) fn on_campaign_restart(&mut self) {
        self.manager_holds = false;
    }

    /// The Lease was observed (`None`: it does not exist) at monotonic `now`, wall `wall`.
    pub(super) fn on_lease(&mut self, spec: Option<&LeaseSpec>, now: Instant, wall: Timestamp) {
        let holder = spec
            .and_then(|s| s.holder_identity.as_deref())
            .filter(|h| !h.is_empty());
        let observed = match holder {
            None => Observed::Free,
            Some(h) if h == self.holder_id => Observed::Us,
            Some(h) => Observed::Other(h.to_owned()),
        };
        // A lease that was just freed by someone else: the lease manager's cached view is
        // stale (it would sleep until the old expiry), so the campaign restarts and takes it.
        if observed == Observed::Free
            && matches!(self.observed, Observed::Us | Observed::Other(_))
            && !self.manager_holds
        {
            self.restart_wanted = true;
        }
        self.valid_until = match (&observed, spec) {
            (Observed::Us, Some(spec)) => self.deadline(spec, now, wall),
            _ => None,
        };
        self.observed = observed;
    }

    /// The monotonic instant until which the observed renewal lets us lead: the lease's
    /// expiry (`renewTime` + duration, never more than our own duration ahead) minus the
    /// safety margin. `None` if that moment has passed or the lease carries no renewal.
    fn deadline(&self, spec: &LeaseSpec, now: Instant, wall: Timestamp) -> Option<Instant> {
        let renewed = spec.renew_time.as_ref()?.0;
        let seconds = u64::try_from(spec.lease_duration_seconds?).ok()?;
        let duration = Duration::from_secs(seconds).min(self.lease_duration);
        let since_renewal = wall.duration_since(renewed);
        let left = SignedDuration::try_from(duration)
            .ok()?
            .checked_sub(since_renewal)?;
        let left = Duration::try_from(left).ok()?.min(self.lease_duration);
        let valid = left.checked_sub(self.margin)?;
        (!valid.is_zero()).then(|| now + valid)
    }

    /// Recomputes leadership at `now`; returns the change, if any.
    pub(super) fn evaluate(&mut self, now: Instant) -> Option<Change> {
        let why_not = self.why_not(now);
        let leader = why_not.is_none();
        let change = match (self.leader, why_not) {
            (false, None) => self.valid_until.map(Change::Gained),
            (true, Some(why)) => Some(Change::Lost(why)),
            _ => None,
        };
        self.leader = leader;
        change
    }

    fn why_not(&self, now: Instant) -> Option<NotLeading> {
        if !self.manager_holds {
            return Some(NotLeading::Campaigning);
        }
        match &self.observed {
            Observed::Unknown => Some(NotLeading::NotObserved),
            Observed::Free => Some(NotLeading::Free),
            Observed::Other(h) => Some(NotLeading::HeldBy(h.clone())),
            Observed::Us => match self.valid_until {
                Some(until) if now < until => None,
                _ => Some(NotLeading::RenewalOverdue),
            },
        }
    }

    /// While leading: the instant at which leadership ends unless a renewal is observed.
    pub(super) fn leading_until(&self) -> Option<Instant> {
        if self.leader { self.valid_until } else { None }
    }

    /// Whether this replica may hold the Lease (so releasing it is worth a call).
    pub(super) fn may_hold(&self) -> bool {
        self.manager_holds || self.observed == Observed::Us
    }

    /// Whether the campaign should restart (and clears the request).
    pub(super) fn take_restart(&mut self) -> bool {
        std::mem::take(&mut self.restart_wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    const D: Duration = Duration::from_secs(8);
    const MARGIN: Duration = Duration::from_secs(2);

    fn spec(holder: &str, renewed: Timestamp, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(seconds),
            ..Default::default()
        }
    }

    fn tracker() -> Tracker {
        Tracker::new("me".to_owned(), D, MARGIN)
    }

    #[test]
    fn leads_only_when_manager_and_lease_agree() {
        let (now, wall) = (Instant::now(), Timestamp::now());
        let mut t = tracker();
        t.on_lease(Some(&spec("me", wall, 8)), now, wall);
        assert_eq!(t.evaluate(now), None, "the manager has not reported yet");
        t.on_manager(true);
        assert_eq!(
            t.evaluate(now),
            Some(Change::Gained(now + Duration::from_secs(6)))
        );
        t.on_lease(Some(&spec("other", wall, 8)), now, wall);
        assert_eq!(
            t.evaluate(now),
            Some(Change::Lost(NotLeading::HeldBy("other".to_owned())))
        );
        assert_eq!(t.leading_until(), None);
    }

    #[test]
    fn validity_counts_from_the_renewal_not_from_the_observation() {
        let (now, wall) = (Instant::now(), Timestamp::now());
        let mut t = tracker();
        t.on_manager(true);
        // Renewed 3 s ago: 8 - 3 - 2 = 3 s left.
        let renewed = wall - SignedDuration::from_secs(3);
        t.on_lease(Some(&spec("me", renewed, 8)), now, wall);
        assert_eq!(
            t.evaluate(now),
            Some(Change::Gained(now + Duration::from_secs(3)))
        );
        // Renewed 7 s ago: inside the safety margin, not leading.
        let stale = wall - SignedDuration::from_secs(7);
        t.on_lease(Some(&spec("me", stale, 8)), now, wall);
        assert_eq!(
            t.evaluate(now),
            Some(Change::Lost(NotLeading::RenewalOverdue))
        );
    }

    #[test]
    fn a_renewal_time_in_the_future_never_extends_past_one_term() {
        let (now, wall) = (Instant::now(), Timestamp::now());
        let mut t = tracker();
        t.on_manager(true);
        let future = wall + SignedDuration::from_secs(3600);
        t.on_lease(Some(&spec("me", future, 3600)), now, wall);
        assert_eq!(t.evaluate(now), Some(Change::Gained(now + D - MARGIN)));
    }

    #[test]
    fn the_deadline_passes_on_the_monotonic_clock() {
        let (now, wall) = (Instant::now(), Timestamp::now());
        let mut t = tracker();
        t.on_manager(true);
        t.on_lease(Some(&spec("me", wall, 8)), now, wall);
        assert!(matches!(t.evaluate(now), Some(Change::Gained(_))));
        assert_eq!(
            t.evaluate(now + Duration::from_secs(5)),
            None,
            "still valid"
        );
        assert_eq!(
            t.evaluate(now + Duration::from_secs(6)),
            Some(Change::Lost(NotLeading::RenewalOverdue))
        );
    }

    #[test]
    fn a_freed_lease_restarts_a_follower_campaign_once() {
        let (now, wall) = (Instant::now(), Timestamp::now());
        let mut t = tracker();
        t.on_lease(Some(&spec("other", wall, 8)), now, wall);
        assert!(!t.take_restart());
        t.on_lease(None, now, wall);
        assert!(t.take_restart());
        assert!(!t.take_restart(), "the request is taken once");
        t.on_lease(None, now, wall);
        assert!(!t.take_restart(), "still free: no new request");
        // A leader whose lease was freed does not restart: its manager reports the loss.
        t.on_manager(true);
        t.on_lease(Some(&spec("me", wall, 8)), now, wall);
        t.on_lease(None, now, wall);
        assert!(!t.take_restart());
        assert!(t.may_hold());
    }

    #[test]
    fn an_empty_holder_is_free() {
        let (now, wall) = (Instant::now(), Timestamp::now());
        let mut t = tracker();
        t.on_manager(true);
        t.on_lease(Some(&spec("", wall, 8)), now, wall);
        assert_eq!(t.evaluate(now), None);
        assert_eq!(t.why_not(now), Some(NotLeading::Free));
    }
}

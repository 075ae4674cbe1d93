//! The syncer's leader election: `cmd/syncer/main.go` @ bf80902 L210-257 runs client-go's
//! `leaderelection.RunOrDie` on the Lease `vsphere-syncer` (L214) with `ReleaseOnCancel`
//! (L255); `OnStartedLeading` runs the syncer (L238-241), `OnStoppedLeading` exits the
//! process (L242-246). `ReleaseOnCancel` never takes effect: nothing cancels the context,
//! and SIGTERM exits the process in its handler (L139-150), so the Lease is never released.
//!
//! client-go's `tryAcquireOrRenew`, as done here: a missing Lease is created; a Lease whose
//! record (holder, times, duration, transitions) differs from the one last observed is
//! re-observed *on our own clock*; another non-empty holder whose record has not changed
//! for its `leaseDurationSeconds` since we observed it is taken over (as is an empty
//! holder). A holder spelled `volmig/…` is just another holder. The leader renews every
//! retry period and stops leading when no renewal succeeded within the renew deadline.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};

/// The fields of a Lease that client-go compares to notice a change.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Record {
    /// `holderIdentity` (empty: nobody).
    pub holder: String,
    /// `leaseDurationSeconds`.
    pub duration_seconds: i32,
    /// `acquireTime`, as text.
    pub acquire: String,
    /// `renewTime`, as text.
    pub renew: String,
    /// `leaseTransitions`.
    pub transitions: i32,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Record {
        Record {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire: spec
                .acquire_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            renew: spec
                .renew_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            transitions: spec.lease_transitions.unwrap_or_default(),
        }
    }
}

/// Whether a candidate may take the Lease now (client-go `tryAcquireOrRenew`): yes when the
/// holder is empty or is us, or when the record last changed (as observed at `observed_at`
/// on our clock) at least its `leaseDurationSeconds` ago.
pub fn may_acquire(me: &str, record: &Record, observed_at: Instant, now: Instant) -> bool {
    if record.holder.is_empty() || record.holder == me {
        return true;
    }
    let duration = Duration::from_secs(u64::try_from(record.duration_seconds.max(0)).unwrap_or(0));
    observed_at + duration <= now
}

/// One candidate: its identity, the Lease's name and namespace, and what it observed.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    observed: Option<(Record, Instant)>,
}

impl Elector {
    /// A candidate `identity` for Lease `namespace/name` that writes `duration`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration,
            observed: None,
        }
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One `tryAcquireOrRenew`: true when we hold the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> bool {
        let now = MicroTime(jiff::Timestamp::now());
        let current = match self.api.get_opt(&self.name).await {
            Ok(current) => current,
            Err(_) => return false,
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    true
                }
                Err(_) => false,
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let record = Record::of(&spec);
        if self.observed.as_ref().map(|(r, _)| r) != Some(&record) {
            self.observed = Some((record.clone(), Instant::now()));
        }
        let observed_at = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, at)| *at);
        if !may_acquire(&self.identity, &record, observed_at, Instant::now()) {
            return false;
        }
        let ours = record.holder == self.identity;
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.seconds()),
            acquire_time: if ours {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours {
                record.transitions
            } else {
                record.transitions + 1
            }),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(&written);
                true
            }
            Err(_) => false,
        }
    }

    fn observe(&mut self, lease: &Lease) {
        let record = Record::of(&lease.spec.clone().unwrap_or_default());
        self.observed = Some((record, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str) -> Record {
        Record {
            holder: holder.into(),
            duration_seconds: 4,
            ..Record::default()
        }
    }

    #[test]
    fn a_holder_is_waited_out_for_its_duration_on_our_clock() {
        let t0 = Instant::now();
        let other = held_by("volmig/replica-0");
        assert!(!may_acquire("me", &other, t0, t0 + Duration::from_secs(3)));
        assert!(may_acquire("me", &other, t0, t0 + Duration::from_secs(4)));
        assert!(may_acquire("me", &held_by(""), t0, t0), "empty holder");
        assert!(may_acquire("me", &held_by("me"), t0, t0), "our own record");
    }
}

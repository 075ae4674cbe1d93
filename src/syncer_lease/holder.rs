//! The task that holds the driver syncer's Lease for the volmig leader (docs/design.md §8.2):
//! it takes the Lease when [`super::SyncerObserver::may_take`] allows, renews it every
//! [`HOLD_RENEW_PERIOD`], and — with `--hold-driver-syncer` only — hands it over once every
//! path is Registered and published. Decisions are [`decide_hold`]'s; this file does the API
//! calls and keeps [`HoldPhase`] in the observer the registrar's gate reads.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::hold::{HOLD_RENEW_PERIOD, HOLD_SEND_WINDOW, HoldAction, HoldPhase, decide_hold};
use super::{SyncerObserver, VOLMIG_HOLDER_PREFIX};

/// Whether the Lease may be handed over now: `Ok` when every in-tree path is Registered and
/// published, else what is still missing (for the log).
pub type HandOverCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Which Lease to hold, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderConfig {
    /// The driver's namespace.
    pub namespace: String,
    /// The syncer's Lease name.
    pub lease_name: String,
    /// volmig's identity in the Lease: [`VOLMIG_HOLDER_PREFIX`] + this replica's holder ID.
    pub holder: String,
    /// `leaseDurationSeconds` to write ([`super::hold::hold_lease_seconds`]).
    pub lease_seconds: i32,
}

impl HolderConfig {
    /// The config for replica `holder_id`.
    pub fn new(namespace: &str, lease_name: &str, holder_id: &str, lease_seconds: i32) -> Self {
        Self {
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            holder: format!("{VOLMIG_HOLDER_PREFIX}{holder_id}"),
            lease_seconds,
        }
    }
}

/// Holds the Lease while this replica leads (`leader`) — with `--hold-driver-syncer` until
/// `hand_over` says every path is done; then releases it and returns. Never releases on
/// losing leadership or on shutdown: a create in flight stays covered by the Lease's
/// duration, and the next volmig leader takes the Lease over at once.
pub async fn hold_syncer_lease(
    client: kube::Client,
    config: HolderConfig,
    observer: Arc<Mutex<SyncerObserver>>,
    hold_changed: Arc<Notify>,
    mut leader: watch::Receiver<bool>,
    hand_over: HandOverCheck,
    shutdown: CancellationToken,
) {
    let holder = Holder {
        api: Api::namespaced(client, &config.namespace),
        lease: format!("{}/{}", config.namespace, config.lease_name),
        config,
        observer,
        hold_changed,
    };
    holder.set(HoldPhase::Standby);
    let mut waiting_for = String::new();
    loop {
        let leading = *leader.borrow_and_update();
        let pause = if leading {
            match holder.step(&hand_over, &mut waiting_for).await {
                Step::HandedOver => return,
                Step::Again(pause) => pause,
            }
        } else {
            holder.set(HoldPhase::Standby);
            HOLD_RENEW_PERIOD
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
            changed = leader.changed() => if changed.is_err() { return },
        }
    }
}

enum Step {
    HandedOver,
    Again(Duration),
}

struct Holder {
    api: Api<Lease>,
    lease: String,
    config: HolderConfig,
    observer: Arc<Mutex<SyncerObserver>>,
    hold_changed: Arc<Notify>,
}

impl Holder {
    fn observer(&self) -> std::sync::MutexGuard<'_, SyncerObserver> {
        self.observer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, phase: HoldPhase) {
        let changed = {
            let mut observer = self.observer();
            let changed = *observer.hold() != phase;
            observer.set_hold(phase);
            changed
        };
        if changed {
            self.hold_changed.notify_one();
        }
    }

    /// One look at the Lease as the leader: hand over, or take / renew / wait.
    async fn step(&self, hand_over: &HandOverCheck, waiting_for: &mut String) -> Step {
        let found = match self.api.get_opt(&self.config.lease_name).await {
            Ok(found) => found,
            Err(e) => {
                warn!(lease = %self.lease, error = %e, "cannot read the CSI driver's syncer Lease to hold it");
                self.lapse();
                return Step::Again(Duration::from_secs(1));
            }
        };
        let spec = found.as_ref().and_then(|l| l.spec.as_ref());
        let now = Instant::now();
        let (hands_over, want, may_take, wait) = {
            let observer = self.observer();
            // Look again as soon as the answer may change: the Lease or the Deployment read
            // for the first time, or a grace running out.
            let wait = if observer.has_read() {
                observer
                    .expires_at(now)
                    .map_or(HOLD_RENEW_PERIOD, |at| at - now)
                    .clamp(Duration::from_millis(100), HOLD_RENEW_PERIOD)
            } else {
                Duration::from_millis(200)
            };
            (
                observer.hands_over(),
                observer.wants_hold(),
                observer.may_take(now),
                wait,
            )
        };
        if !want {
            return Step::HandedOver;
        }
        if hands_over {
            match hand_over() {
                Ok(()) => {
                    self.release(found.clone()).await;
                    return Step::HandedOver;
                }
                Err(missing) if missing != *waiting_for => {
                    info!(lease = %self.lease, "holding the CSI driver's syncer Lease until every in-tree path is Registered and published: {missing}");
                    *waiting_for = missing;
                }
                Err(_) => {}
            }
        }
        let action = decide_hold(spec, &self.config.holder, true, may_take.is_ok());
        let sent_at = Instant::now();
        let written = match action {
            HoldAction::Wait => {
                if let Err(why) = may_take
                    && why != *waiting_for
                {
                    info!(lease = %self.lease, "volmig does not take the CSI driver's syncer Lease and creates nothing: {why}");
                    *waiting_for = why;
                }
                // The Lease as read is not this replica's: whatever was held is gone.
                self.set(HoldPhase::Acquiring);
                return Step::Again(wait);
            }
            HoldAction::Nothing | HoldAction::Release => return Step::Again(HOLD_RENEW_PERIOD),
            HoldAction::Create => {
                self.set_acquiring_unless_held();
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.lease_name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.held(None, true)),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            HoldAction::Write { takeover } => {
                if takeover {
                    self.set_acquiring_unless_held();
                }
                let Some(mut lease) = found else {
                    return Step::Again(Duration::from_secs(1));
                };
                lease.spec = Some(self.held(lease.spec.as_ref(), takeover));
                self.api
                    .replace(&self.config.lease_name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(_) => {
                if action != (HoldAction::Write { takeover: false }) {
                    info!(lease = %self.lease, holder = %self.config.holder, seconds = self.config.lease_seconds,
                        hand_over = hands_over,
                        "holding the CSI driver's syncer Lease: its syncer cannot lead, volmig registers");
                }
                self.set(HoldPhase::Held {
                    holder: self.config.holder.clone(),
                    sends_until: sent_at + HOLD_SEND_WINDOW,
                });
                Step::Again(HOLD_RENEW_PERIOD)
            }
            Err(e) => {
                warn!(lease = %self.lease, error = %e, "could not write the CSI driver's syncer Lease; trying again");
                self.lapse();
                Step::Again(Duration::from_secs(1))
            }
        }
    }

    /// A failed read or write: a hold keeps its send window (the gate checks its end), else
    /// nothing is held.
    fn lapse(&self) {
        self.set_acquiring_unless_held();
    }

    fn set_acquiring_unless_held(&self) {
        if !matches!(self.observer().hold(), HoldPhase::Held { .. }) {
            self.set(HoldPhase::Acquiring);
        }
    }

    /// The spec that makes this replica the holder, renewed now.
    fn held(&self, old: Option<&LeaseSpec>, takeover: bool) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        let old = old.cloned().unwrap_or_default();
        LeaseSpec {
            holder_identity: Some(self.config.holder.clone()),
            lease_duration_seconds: Some(self.config.lease_seconds),
            acquire_time: if takeover {
                Some(now.clone())
            } else {
                old.acquire_time.clone()
            },
            renew_time: Some(now),
            lease_transitions: if takeover && old.holder_identity.is_some_and(|h| !h.is_empty()) {
                Some(old.lease_transitions.unwrap_or(0).saturating_add(1))
            } else {
                old.lease_transitions
            },
            ..old
        }
    }

    /// Every path is done: stop creating first, then clear the holder the way client-go's
    /// release does (empty holder, 1 s), so the driver's syncer leads at its next try.
    async fn release(&self, found: Option<Lease>) {
        self.set(HoldPhase::HandedOver);
        let Some(mut lease) = found.filter(|l| {
            l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                == Some(self.config.holder.as_str())
        }) else {
            info!(lease = %self.lease, "every in-tree path is Registered and published: volmig does not hold the CSI driver's syncer Lease and now follows the driver");
            return;
        };
        let now = MicroTime(jiff::Timestamp::now());
        let old = lease.spec.take().unwrap_or_default();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..old
        });
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                info!(lease = %self.lease, "every in-tree path is Registered and published: the CSI driver's syncer Lease is handed over; volmig now follows the driver")
            }
            // Stops renewing either way: the Lease expires after its duration.
            Err(e) => warn!(lease = %self.lease, error = %e, seconds = self.config.lease_seconds,
                "could not release the CSI driver's syncer Lease; it expires unrenewed after its duration"),
        }
    }
}

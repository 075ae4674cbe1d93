//! The arbiter: one task that turns campaign reports, Lease observations and its own clock
//! into the published leadership flag, restarts a stale campaign, and releases on request.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::LeaderError;
use super::campaign::{AbortOnDrop, Campaign, Input, sleep_until};
use super::tracker::{Change, Tracker};

/// How long leadership is valid, checked against the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Validity {
    /// Leader without election.
    Always,
    /// Leader until this instant, unless a renewal extends it.
    Until(Instant),
    /// Not the leader.
    Never,
}

/// The state shared by the arbiter and every [`super::Leadership`] accessor.
#[derive(Debug)]
pub(super) struct Shared {
    validity: Mutex<Validity>,
    flag: watch::Sender<bool>,
}

impl Shared {
    pub(super) fn new(validity: Validity) -> Self {
        let (flag, _) = watch::channel(validity != Validity::Never);
        Self {
            validity: Mutex::new(validity),
            flag,
        }
    }

    /// A receiver of the leadership flag.
    pub(super) fn subscribe(&self) -> watch::Receiver<bool> {
        self.flag.subscribe()
    }

    /// Leader until `validity` (the deadline is stored before the flag turns true).
    fn grant(&self, validity: Validity) {
        *self.validity.lock().unwrap_or_else(PoisonError::into_inner) = validity;
        self.flag
            .send_if_modified(|leader| !std::mem::replace(leader, true));
    }

    /// Not the leader (the flag turns false before anything else happens).
    pub(super) fn revoke(&self) {
        self.flag
            .send_if_modified(|leader| std::mem::replace(leader, false));
        *self.validity.lock().unwrap_or_else(PoisonError::into_inner) = Validity::Never;
    }

    /// The flag *and* the deadline on the monotonic clock: false as soon as the deadline
    /// has passed, even if the arbiter has not run since.
    pub(super) fn is_leader(&self) -> bool {
        let validity = *self.validity.lock().unwrap_or_else(PoisonError::into_inner);
        *self.flag.borrow()
            && match validity {
                Validity::Always => true,
                Validity::Until(until) => Instant::now() < until,
                Validity::Never => false,
            }
    }
}

/// Starts a campaign with the given generation, reporting to the given sender.
pub(super) type SpawnCampaign = Box<dyn Fn(u64, mpsc::Sender<Input>) -> Campaign + Send>;

/// The arbiter task's state.
pub(super) struct Arbiter {
    pub(super) tracker: Tracker,
    pub(super) shared: Arc<Shared>,
    pub(super) inputs: mpsc::Receiver<Input>,
    pub(super) input_tx: mpsc::Sender<Input>,
    pub(super) spawn_campaign: SpawnCampaign,
    pub(super) observer: Option<AbortOnDrop<()>>,
    /// `namespace/name`, for logs and errors.
    pub(super) lease: String,
    pub(super) holder_id: String,
    /// Longest wait for the release call.
    pub(super) release_timeout: Duration,
}

impl Arbiter {
    /// Runs until `stop` fires (then releases the lease) or its sender is dropped (then
    /// stops without releasing, like a crash).
    pub(super) async fn run(mut self, mut stop: oneshot::Receiver<()>) -> Result<(), LeaderError> {
        let mut generation = 0;
        let mut campaign = (self.spawn_campaign)(generation, self.input_tx.clone());
        loop {
            let deadline = self.tracker.leading_until();
            tokio::select! {
                biased;
                stopped = &mut stop => {
                    self.shared.revoke();
                    if stopped.is_err() {
                        return Ok(());
                    }
                    return self.release(campaign).await;
                }
                () = sleep_until(deadline) => {}
                input = self.inputs.recv() => match input {
                    Some(Input::Manager { generation: from, holds }) if from == generation => {
                        debug!(lease = %self.lease, holder_id = %self.holder_id, holds, "lease manager reported");
                        self.tracker.on_manager(holds);
                    }
                    Some(Input::Manager { .. }) => {}
                    Some(Input::Lease(lease)) => {
                        let spec = lease.as_ref().and_then(|l| l.spec.as_ref());
                        self.tracker.on_lease(spec, Instant::now(), Timestamp::now());
                    }
                    // Unreachable: the arbiter holds a sender itself.
                    None => {}
                },
            }
            self.publish();
            if self.tracker.take_restart() {
                info!(lease = %self.lease, holder_id = %self.holder_id, "the lease was freed; campaigning for it now");
                generation += 1;
                self.tracker.on_campaign_restart();
                // The old campaign holds nothing: dropping it aborts it without a release.
                campaign = (self.spawn_campaign)(generation, self.input_tx.clone());
            }
        }
    }

    /// Publishes the tracker's verdict now and logs transitions.
    fn publish(&mut self) {
        let change = self.tracker.evaluate(Instant::now());
        match self.tracker.leading_until() {
            Some(until) => self.shared.grant(Validity::Until(until)),
            None => self.shared.revoke(),
        }
        match change {
            Some(Change::Gained(until)) => info!(
                lease = %self.lease,
                holder_id = %self.holder_id,
                valid_for_ms = until.saturating_duration_since(Instant::now()).as_millis(),
                "became the leader"
            ),
            Some(Change::Lost(why)) => info!(
                lease = %self.lease,
                holder_id = %self.holder_id,
                reason = %why,
                "stopped being the leader"
            ),
            None => {}
        }
    }

    async fn release(mut self, campaign: Campaign) -> Result<(), LeaderError> {
        self.observer = None;
        let may_hold = self.tracker.may_hold();
        let Campaign { stop, task } = campaign;
        // The campaign may already have ended; then there is nothing left to release.
        let _ = stop.send(may_hold);
        let mut task = task;
        let outcome = tokio::time::timeout(self.release_timeout, &mut task.0).await;
        let error = |reason| LeaderError::Release {
            lease: self.lease.clone(),
            holder_id: self.holder_id.clone(),
            reason,
        };
        match outcome {
            Ok(Ok(Ok(()))) => {
                if may_hold {
                    info!(lease = %self.lease, holder_id = %self.holder_id, "released the lease");
                }
                Ok(())
            }
            Ok(Ok(Err(source))) => Err(error(source.to_string())),
            Ok(Err(join)) => Err(error(format!("the campaign task failed: {join}"))),
            Err(_) => {
                warn!(lease = %self.lease, holder_id = %self.holder_id, "releasing the lease timed out; it expires on its own");
                Err(error(format!(
                    "no answer within {:?}",
                    self.release_timeout
                )))
            }
        }
    }
}

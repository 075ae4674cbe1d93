//! The backend slots of the [`super::CallGate`]: a counting semaphore with two FIFO lanes.
//! A freed slot goes to the longest-waiting call of a registration that has already made
//! backend calls ([`Lane::Started`]) before any call that would start a new one
//! ([`Lane::New`]).
//!
//! Why: with one FIFO queue, a burst of new registrations (a migration's start: hundreds
//! of reconciles at once) queues hundreds of first calls, and every registration's next
//! call waits behind all of them, so the long CNS creates that the slots exist for start
//! late and the slots spend the burst on short look-ups. With the started lane first, a
//! registration goes through its calls much as one worker per slot would, and new ones are
//! admitted as slots free up. Nothing starves: a registration has a bounded number of
//! calls, so the started lane empties whenever no registration is mid-way.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// Which queue a call waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The call that starts a registration or an unregistration: waits while any
    /// [`Lane::Started`] call waits.
    New,
    /// Every other call: the later calls of an operation, retries, and the one-call
    /// repairs of full sync (protection, orphan collection), which finish work rather
    /// than start more.
    Started,
}

/// Slots shared by every caller of one gate.
#[derive(Debug)]
pub(super) struct Slots {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Slots nobody holds; non-zero only while both queues are empty.
    free: usize,
    started: VecDeque<oneshot::Sender<()>>,
    new: VecDeque<oneshot::Sender<()>>,
}

impl Slots {
    /// `n` slots.
    pub(super) fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: n,
                started: VecDeque::new(),
                new: VecDeque::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot in `lane`. Cancel-safe: a caller dropped while waiting (or right
    /// after a slot was handed to it) gives the slot to the next one.
    pub(super) async fn acquire(self: &Arc<Self>, lane: Lane) -> Slot {
        let receiver = {
            let mut state = self.lock();
            if state.free > 0 {
                state.free -= 1;
                return Slot {
                    slots: Arc::clone(self),
                };
            }
            let (sender, receiver) = oneshot::channel();
            match lane {
                Lane::Started => state.started.push_back(sender),
                Lane::New => state.new.push_back(sender),
            }
            receiver
        };
        let mut waiting = Waiting {
            receiver,
            slots: Arc::clone(self),
            granted: false,
        };
        // The sender is only dropped without sending when the slots are dropped, which
        // cannot happen while `waiting` holds them.
        let _ = (&mut waiting.receiver).await;
        waiting.granted = true;
        Slot {
            slots: Arc::clone(self),
        }
    }

    /// Hands a freed slot to the first live waiter, started lane first.
    fn release(&self) {
        let mut state = self.lock();
        while let Some(sender) = state.started.pop_front().or_else(|| state.new.pop_front()) {
            if sender.send(()).is_ok() {
                return;
            }
            // That waiter was cancelled: try the next one.
        }
        state.free += 1;
    }

    /// Slots nobody holds now (for tests).
    #[cfg(test)]
    pub(super) fn available(&self) -> usize {
        self.lock().free
    }
}

/// One held slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release();
    }
}

/// The slot an operation keeps between its consecutive backend calls (a registration's
/// look-ups, write-ahead, create and protection), so that each of its calls does not
/// queue again behind every other operation's: a registration then holds one slot from
/// its first call to its last, as one worker per slot would. Released (by
/// [`HeldSlot::release`] or by dropping it) before anything that waits without calling
/// vCenter: a sleep, a retry's delay, the result's status write.
#[derive(Debug, Default)]
pub(super) struct HeldSlot(pub(super) Option<Slot>);

impl HeldSlot {
    /// Holding nothing: the next call waits for a slot.
    pub(super) fn none() -> Self {
        Self(None)
    }

    /// Frees the slot, if one is held.
    pub(super) fn release(&mut self) {
        self.0 = None;
    }
}

/// A caller waiting for a slot; if dropped before it took the slot handed to it, the slot
/// goes on to the next waiter.
struct Waiting {
    receiver: oneshot::Receiver<()>,
    slots: Arc<Slots>,
    granted: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        // After `close` no slot can be handed to this waiter any more; one handed before
        // is passed on.
        self.receiver.close();
        if self.receiver.try_recv().is_ok() {
            self.slots.release();
        }
    }
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;

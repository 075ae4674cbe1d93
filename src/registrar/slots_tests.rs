//! The two lanes: order, priority, cancellation and the slot count.

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use super::{Lane, Slot, Slots};

/// Spawns a waiter in `lane` that records `label` once it holds a slot and frees it at
/// once (so that a wrong order shows in `order` instead of hanging the test).
fn waiter(
    slots: &Arc<Slots>,
    lane: Lane,
    label: &'static str,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> JoinHandle<()> {
    let (slots, order) = (Arc::clone(slots), Arc::clone(order));
    tokio::spawn(async move {
        let _slot = slots.acquire(lane).await;
        order.lock().expect("order").push(label);
    })
}

/// Lets every spawned task run until it waits again.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// Queues one [`waiter`] per `(lane, label)`, in that order, behind slots all held.
async fn queue(
    slots: &Arc<Slots>,
    order: &Arc<Mutex<Vec<&'static str>>>,
    waiters: &[(Lane, &'static str)],
) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    for &(lane, label) in waiters {
        handles.push(waiter(slots, lane, label, order));
        settle().await;
    }
    assert!(
        order.lock().expect("order").is_empty(),
        "a call started with no slot free"
    );
    handles
}

/// Frees `held`, waits for every queued waiter and returns the order they got a slot in.
async fn run(
    held: Slot,
    handles: Vec<JoinHandle<()>>,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> Vec<&'static str> {
    drop(held);
    for handle in handles {
        handle.await.expect("joined");
    }
    order.lock().expect("order").clone()
}

#[tokio::test]
async fn a_freed_slot_goes_to_a_started_call_before_any_new_one() {
    let slots = Slots::new(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = slots.acquire(Lane::New).await;
    let waiters = [
        (Lane::New, "new 1"),
        (Lane::New, "new 2"),
        (Lane::Started, "started 1"),
        (Lane::Started, "started 2"),
    ];
    let handles = queue(&slots, &order, &waiters).await;
    assert_eq!(
        run(held, handles, &order).await,
        ["started 1", "started 2", "new 1", "new 2"]
    );
    assert_eq!(slots.available(), 1);
}

#[tokio::test]
async fn each_lane_is_first_in_first_out() {
    let slots = Slots::new(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = slots.acquire(Lane::Started).await;
    let waiters = [(Lane::New, "a"), (Lane::New, "b"), (Lane::New, "c")];
    let handles = queue(&slots, &order, &waiters).await;
    assert_eq!(run(held, handles, &order).await, ["a", "b", "c"]);
}

#[tokio::test]
async fn no_more_slots_are_held_than_there_are() {
    let slots = Slots::new(3);
    let held: Vec<Slot> = futures::future::join_all((0..3).map(|i| {
        let lane = if i % 2 == 0 { Lane::New } else { Lane::Started };
        slots.acquire(lane)
    }))
    .await;
    assert_eq!(slots.available(), 0);
    let order = Arc::new(Mutex::new(Vec::new()));
    let late = waiter(&slots, Lane::Started, "late", &order);
    settle().await;
    assert!(
        order.lock().expect("order").is_empty(),
        "a fourth slot was handed out"
    );
    drop(held);
    late.await.expect("joined");
    assert_eq!(*order.lock().expect("order"), ["late"]);
    assert_eq!(slots.available(), 3);
}

#[tokio::test]
async fn a_cancelled_waiter_passes_its_turn_on() {
    let slots = Slots::new(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = slots.acquire(Lane::New).await;
    let waiters = [(Lane::Started, "cancelled"), (Lane::New, "next")];
    let mut handles = queue(&slots, &order, &waiters).await;
    let cancelled = handles.remove(0);
    cancelled.abort();
    assert!(cancelled.await.is_err(), "the aborted waiter finished");
    assert_eq!(run(held, handles, &order).await, ["next"]);
    assert_eq!(slots.available(), 1, "a slot was lost");
}

#[tokio::test]
async fn a_slot_handed_to_a_waiter_dropped_before_it_ran_is_not_lost() {
    let slots = Slots::new(1);
    let held = slots.acquire(Lane::New).await;
    // Polled once (queued), then dropped after the slot was handed to it but before it
    // was polled again to take it.
    let mut pending = Box::pin(slots.acquire(Lane::New));
    assert!(futures::poll!(&mut pending).is_pending());
    drop(held);
    drop(pending);
    assert_eq!(slots.available(), 1, "the handed-over slot was lost");
    let again = slots.acquire(Lane::New).await;
    assert_eq!(slots.available(), 0);
    drop(again);
}

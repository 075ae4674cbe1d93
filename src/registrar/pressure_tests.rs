//! The call gate's limits, on tokio's paused clock: a call that would wait shows up as
//! time passing (the paused clock jumps to the timer), so no test depends on speed.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::{CallGate, LeaderGate, NotLeader};
use crate::registrar::Lane;

/// Enters the gate and lets the call end at once; returns how long entering took.
async fn enter_and_leave(gate: &CallGate) -> Duration {
    let before = Instant::now();
    let permit = gate.enter(Lane::New).await.expect("the gate is open");
    drop(permit);
    before.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_call_the_rate_allows_starts_without_a_timer() {
    // 100 calls/s; the clock is half-way between two of tokio's millisecond ticks, where
    // a timer set for "now" would still wait for the next tick.
    let gate = CallGate::new(1, Some(100.0), LeaderGate::always());
    advance(Duration::from_micros(10_500)).await;
    for _ in 0..5 {
        assert_eq!(enter_and_leave(&gate).await, Duration::ZERO);
        advance(Duration::from_micros(10_500)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn as_many_calls_as_slots_start_at_once_then_the_rate_binds() {
    // 4 slots, 10 calls/s: four starts at once, then one every 100 ms.
    let gate = CallGate::new(4, Some(10.0), LeaderGate::always());
    let start = Instant::now();
    let mut permits = Vec::new();
    for _ in 0..4 {
        permits.push(gate.enter(Lane::New).await.expect("open"));
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "the burst waited");
    drop(permits);
    for k in 1..=3u32 {
        enter_and_leave(&gate).await;
        assert_eq!(start.elapsed(), Duration::from_millis(100) * k);
    }
}

#[tokio::test(start_paused = true)]
async fn over_a_long_window_starts_stay_within_the_rate_plus_one_burst() {
    let gate = CallGate::new(8, Some(50.0), LeaderGate::always());
    let start = Instant::now();
    for _ in 0..(8 + 100) {
        enter_and_leave(&gate).await;
    }
    // 108 starts: 8 at once, then 100 at 20 ms each.
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn idle_time_does_not_bank_more_than_one_burst() {
    let gate = CallGate::new(2, Some(10.0), LeaderGate::always());
    advance(Duration::from_secs(60)).await;
    let start = Instant::now();
    for _ in 0..4 {
        enter_and_leave(&gate).await;
    }
    // Two at once (the burst), then 100 ms for each of the other two.
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn slots_bound_the_calls_in_flight() {
    let gate = std::sync::Arc::new(CallGate::new(2, None, LeaderGate::always()));
    let a = gate.enter(Lane::New).await.expect("open");
    let _b = gate.enter(Lane::New).await.expect("open");
    let waiting = tokio::spawn({
        let gate = gate.clone();
        async move { gate.enter(Lane::New).await.map(drop) }
    });
    tokio::task::yield_now().await;
    assert!(
        !waiting.is_finished(),
        "a third call started with two slots"
    );
    drop(a);
    waiting.await.expect("joined").expect("open");
}

#[tokio::test(start_paused = true)]
async fn a_closed_gate_starts_nothing() {
    let leader = LeaderGate::always();
    let gate = CallGate::new(2, Some(10.0), leader.clone());
    leader.close();
    assert_eq!(gate.enter(Lane::New).await.err(), Some(NotLeader));
}

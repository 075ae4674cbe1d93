use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

use super::*;

fn lease(holder: &str, renewed_at_second: i64, duration: Option<i32>) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_owned()),
        renew_time: Some(MicroTime(
            jiff::Timestamp::from_second(1_800_000_000 + renewed_at_second).unwrap(),
        )),
        lease_duration_seconds: duration,
        ..LeaseSpec::default()
    }
}

fn follow(holder: &str) -> RegistrarMode {
    RegistrarMode::Follow {
        holder: holder.to_owned(),
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_presumed_before_the_lease_was_read() {
    let observer = SyncerObserver::default();
    assert_eq!(observer.mode(Instant::now()), RegistrarMode::Unknown);
    let gate = RegistrarModeGate::observing(Arc::new(Mutex::new(observer)));
    assert_eq!(gate.may_create(), Err(NotRegistrar(RegistrarMode::Unknown)));
    assert_eq!(RegistrarModeGate::always_own().may_create(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn no_lease_or_no_holder_means_volmig_registers() {
    let mut observer = SyncerObserver::default();
    observer.on_lease(None, Instant::now());
    assert_eq!(observer.mode(Instant::now()), RegistrarMode::Own);
    let free = LeaseSpec {
        holder_identity: Some(String::new()),
        ..LeaseSpec::default()
    };
    observer.on_lease(Some(&free), Instant::now());
    assert_eq!(observer.mode(Instant::now()), RegistrarMode::Own);
}

#[tokio::test(start_paused = true)]
async fn a_held_lease_is_live_for_one_duration_after_each_renewal_seen() {
    let mut observer = SyncerObserver::default();
    let t0 = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t0);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
    assert_eq!(observer.expires_at(), Some(t0 + Duration::from_secs(30)));

    // The same renewTime seen again later does not extend it (a re-list is no renewal).
    let t20 = t0 + Duration::from_secs(20);
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t20);
    assert_eq!(
        observer.mode(t0 + Duration::from_secs(30)),
        RegistrarMode::Own
    );

    // A renewal seen at t20 extends it to t50 on this clock.
    observer.on_lease(Some(&lease("csi-controller-0", 20, Some(30))), t20);
    assert_eq!(
        observer.mode(t0 + Duration::from_secs(49)),
        follow("csi-controller-0")
    );
    assert_eq!(
        observer.mode(t0 + Duration::from_secs(50)),
        RegistrarMode::Own
    );
}

#[tokio::test(start_paused = true)]
async fn the_renew_time_is_never_compared_with_this_clock() {
    // A renewTime far in the past (another machine's clock): still live once seen.
    let mut observer = SyncerObserver::default();
    let now = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", -86_400, Some(15))), now);
    assert_eq!(observer.mode(now), follow("csi-controller-0"));
    assert_eq!(
        observer.mode(now + Duration::from_secs(15)),
        RegistrarMode::Own
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_duration_is_the_stock_thirty_seconds() {
    let mut observer = SyncerObserver::default();
    let now = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", 0, None)), now);
    assert_eq!(
        observer.expires_at(),
        Some(now + DEFAULT_SYNCER_LEASE_DURATION)
    );
    observer.on_lease(Some(&lease("csi-controller-0", 1, Some(0))), now);
    assert_eq!(
        observer.expires_at(),
        Some(now + DEFAULT_SYNCER_LEASE_DURATION)
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_volmig_holds_is_no_live_driver_syncer() {
    let mut observer = SyncerObserver::default();
    observer.on_lease(
        Some(&lease("volmig/replica-0", 0, Some(30))),
        Instant::now(),
    );
    assert_eq!(observer.mode(Instant::now()), RegistrarMode::Own);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_or_released_lease_ends_follow_at_once() {
    let mut observer = SyncerObserver::default();
    let now = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), now);
    observer.on_lease(None, now);
    assert_eq!(observer.mode(now), RegistrarMode::Own);
    assert_eq!(observer.expires_at(), None);
}

#[tokio::test(start_paused = true)]
async fn the_gate_reads_the_clock_itself() {
    let observer = Arc::new(Mutex::new(SyncerObserver::default()));
    observer.lock().unwrap().on_lease(
        Some(&lease("csi-controller-0", 0, Some(10))),
        Instant::now(),
    );
    let gate = RegistrarModeGate::observing(observer);
    assert_eq!(
        gate.may_create(),
        Err(NotRegistrar(follow("csi-controller-0")))
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        gate.may_create(),
        Ok(()),
        "no renewal seen: volmig registers"
    );
}

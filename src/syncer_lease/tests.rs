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
    assert_eq!(observer.expires_at(t0), Some(t0 + Duration::from_secs(30)));

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
        observer.expires_at(now),
        Some(now + DEFAULT_SYNCER_LEASE_DURATION)
    );
    observer.on_lease(Some(&lease("csi-controller-0", 1, Some(0))), now);
    assert_eq!(
        observer.expires_at(now),
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
    assert_eq!(observer.expires_at(now), None);
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

fn held(sends_until: Instant) -> HoldPhase {
    HoldPhase::Held {
        holder: "volmig/volmig-0".to_owned(),
        sends_until,
    }
}

#[tokio::test(start_paused = true)]
async fn hold_mode_creates_only_within_the_send_window_of_a_held_lease() {
    let mut observer = SyncerObserver::default();
    let t0 = Instant::now();
    observer.on_lease(None, t0);
    for waiting in [HoldPhase::Acquiring, HoldPhase::Standby] {
        observer.set_hold(waiting.clone());
        assert_eq!(observer.mode(t0), RegistrarMode::Acquiring, "{waiting:?}");
        assert!(!observer.mode(t0).registers());
    }
    let until = t0 + Duration::from_secs(30);
    observer.set_hold(held(until));
    assert_eq!(
        observer.mode(t0),
        RegistrarMode::Hold {
            holder: "volmig/volmig-0".to_owned()
        }
    );
    assert!(observer.mode(t0).registers());
    assert_eq!(observer.expires_at(t0), Some(until));
    // No renewal written since: the window ends, creates stop before the driver can lead.
    assert_eq!(observer.mode(until), RegistrarMode::Acquiring);
    assert_eq!(observer.expires_at(until), None);
    // Handed over: follow until the driver's syncer has been seen leading, then as usual.
    observer.set_hold(HoldPhase::HandedOver);
    assert_eq!(observer.mode(until), follow(HANDED_OVER));
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), until);
    assert_eq!(observer.mode(until), follow("csi-controller-0"));
    let later = until + Duration::from_secs(30);
    assert_eq!(
        observer.mode(later),
        RegistrarMode::Own,
        "the driver stopped renewing"
    );
}

#[tokio::test(start_paused = true)]
async fn hold_mode_follows_a_live_driver_syncer_it_waits_for() {
    let mut observer = SyncerObserver::default();
    let t0 = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t0);
    observer.set_hold(HoldPhase::Acquiring);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
    assert!(observer.driver_lease_live(t0));
    // Handed over: the driver leads, volmig follows it as without hold mode.
    observer.set_hold(HoldPhase::HandedOver);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
}

#[tokio::test(start_paused = true)]
async fn a_syncer_without_leader_election_is_followed_whatever_the_lease_says() {
    let mut observer = SyncerObserver::watching_deployment();
    let now = Instant::now();
    observer.on_lease(None, now);
    assert_eq!(
        observer.mode(now),
        RegistrarMode::Unknown,
        "the Deployment is not read yet"
    );
    observer.on_deployment(Some("deployment/vsphere-csi-controller".to_owned()));
    assert_eq!(
        observer.mode(now),
        follow("deployment/vsphere-csi-controller")
    );
    observer.set_hold(held(now + Duration::from_secs(30)));
    assert_eq!(
        observer.mode(now),
        follow("deployment/vsphere-csi-controller"),
        "a Lease held by volmig does not stop a syncer that ignores it"
    );
    observer.on_deployment(None);
    observer.set_hold(HoldPhase::Off);
    assert_eq!(observer.mode(now), RegistrarMode::Own);
}

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

use super::*;

/// The in-flight grace of these tests.
const GRACE: Duration = Duration::from_secs(100);
const ME: &str = "volmig/volmig-0";

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

fn own() -> RegistrarMode {
    RegistrarMode::Own {
        holder: ME.to_owned(),
    }
}

fn waiting(mode: &RegistrarMode) -> bool {
    matches!(mode, RegistrarMode::Waiting { .. })
}

fn observer_with(hold: bool, watch_deployment: bool) -> SyncerObserver {
    SyncerObserver::new(TakePolicy { hold, grace: GRACE }, watch_deployment)
}

fn held(sends_until: Instant) -> HoldPhase {
    HoldPhase::Held {
        holder: ME.to_owned(),
        sends_until,
    }
}

fn stock_deployment(replicas: i32) -> DriverPresence {
    DriverPresence::Elected {
        name: "vsphere-csi-controller".into(),
        replicas,
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_presumed_before_the_lease_was_read() {
    let observer = observer_with(false, false);
    assert_eq!(observer.mode(Instant::now()), RegistrarMode::Unknown);
    assert!(observer.may_take(Instant::now()).is_err());
    let gate = RegistrarModeGate::observing(Arc::new(Mutex::new(observer)));
    assert_eq!(gate.may_create(), Err(NotRegistrar(RegistrarMode::Unknown)));
    assert_eq!(RegistrarModeGate::always_own().may_create(), Ok(()));
    assert_eq!(
        RegistrarModeGate::always_own().mode(),
        RegistrarMode::Unguarded
    );
}

#[tokio::test(start_paused = true)]
async fn with_no_driver_volmig_registers_only_once_it_holds_the_lease() {
    let mut observer = observer_with(false, true);
    let now = Instant::now();
    observer.on_lease(None, now);
    assert_eq!(
        observer.mode(now),
        RegistrarMode::Unknown,
        "Deployment unread"
    );
    observer.on_deployment(DriverPresence::Absent, now);
    assert_eq!(observer.may_take(now), Ok(()), "no Lease, no driver");
    assert_eq!(observer.mode(now), RegistrarMode::Acquiring);
    assert!(!observer.mode(now).registers(), "not held yet");
    let free = LeaseSpec {
        holder_identity: Some(String::new()),
        ..LeaseSpec::default()
    };
    observer.on_lease(Some(&free), now);
    assert_eq!(observer.mode(now), RegistrarMode::Acquiring);
    observer.set_hold(held(now + Duration::from_secs(30)));
    assert_eq!(observer.mode(now), own());
    assert!(observer.mode(now).registers());
    assert!(
        observer.wants_hold() && !observer.hands_over(),
        "own: no hand-over"
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_lease_is_live_for_one_duration_after_each_renewal_seen() {
    let mut observer = observer_with(false, false);
    let t0 = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t0);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
    assert_eq!(observer.expires_at(t0), Some(t0 + Duration::from_secs(30)));

    // The same renewTime seen again later does not extend it (a re-list is no renewal).
    let t20 = t0 + Duration::from_secs(20);
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t20);
    assert!(waiting(&observer.mode(t0 + Duration::from_secs(30))));

    // A renewal seen at t20 extends it to t50 on this clock.
    observer.on_lease(Some(&lease("csi-controller-0", 20, Some(30))), t20);
    assert_eq!(
        observer.mode(t0 + Duration::from_secs(49)),
        follow("csi-controller-0")
    );
    let t50 = t0 + Duration::from_secs(50);
    assert!(waiting(&observer.mode(t50)), "{}", observer.mode(t50));
    // Lapsed: taken only one grace after the last renewal seen (its registerVolume may
    // still run), and never before.
    assert!(observer.may_take(t50).is_err());
    assert_eq!(observer.expires_at(t50), Some(t20 + GRACE));
    assert!(
        observer
            .may_take(t20 + GRACE - Duration::from_millis(1))
            .is_err()
    );
    assert_eq!(observer.may_take(t20 + GRACE), Ok(()));
    assert_eq!(observer.mode(t20 + GRACE), RegistrarMode::Acquiring);
}

#[tokio::test(start_paused = true)]
async fn the_renew_time_is_never_compared_with_this_clock() {
    // A renewTime far in the past (another machine's clock): still live once seen, and its
    // grace counts from then.
    let mut observer = observer_with(false, false);
    let now = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", -86_400, Some(15))), now);
    assert_eq!(observer.mode(now), follow("csi-controller-0"));
    assert!(waiting(&observer.mode(now + Duration::from_secs(15))));
    assert!(observer.may_take(now + Duration::from_secs(15)).is_err());
    assert_eq!(observer.may_take(now + GRACE), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_missing_duration_is_the_stock_thirty_seconds() {
    let mut observer = observer_with(false, false);
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
async fn a_lease_another_volmig_replica_holds_is_no_live_driver_syncer() {
    let mut observer = observer_with(false, false);
    let now = Instant::now();
    observer.on_lease(Some(&lease("volmig/replica-1", 0, Some(30))), now);
    assert!(!observer.driver_lease_live(now));
    assert_eq!(observer.may_take(now), Ok(()));
    assert_eq!(
        observer.mode(now),
        RegistrarMode::Acquiring,
        "this replica registers only once it holds the Lease itself"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deleted_or_released_lease_ends_follow_at_once_but_is_taken_after_the_grace() {
    let mut observer = observer_with(false, false);
    let now = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), now);
    observer.on_lease(None, now);
    assert!(waiting(&observer.mode(now)), "{}", observer.mode(now));
    assert!(observer.may_take(now).is_err());
    assert_eq!(observer.expires_at(now), Some(now + GRACE));
    assert_eq!(observer.mode(now + GRACE), RegistrarMode::Acquiring);
}

#[tokio::test(start_paused = true)]
async fn the_gate_reads_the_clock_itself() {
    let observer = Arc::new(Mutex::new(observer_with(false, false)));
    let t0 = Instant::now();
    observer
        .lock()
        .unwrap()
        .on_lease(Some(&lease("csi-controller-0", 0, Some(10))), t0);
    let gate = RegistrarModeGate::observing(observer.clone());
    assert_eq!(
        gate.may_create(),
        Err(NotRegistrar(follow("csi-controller-0")))
    );
    tokio::time::advance(GRACE).await;
    observer
        .lock()
        .unwrap()
        .set_hold(held(Instant::now() + Duration::from_secs(30)));
    assert_eq!(gate.may_create(), Ok(()), "held within its send window");
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(
        gate.may_create(),
        Err(NotRegistrar(RegistrarMode::Acquiring)),
        "the send window ran out unrenewed"
    );
}

/// A driver rollout: the leading syncer's pod exits without releasing its Lease while its
/// Deployment stands; the next syncer leads within seconds. volmig never takes the Lease in
/// that gap, however long it lasts, unless told to hold the syncer.
#[tokio::test(start_paused = true)]
async fn a_lapsed_lease_is_never_taken_while_the_drivers_deployment_stands() {
    let mut observer = observer_with(false, true);
    let t0 = Instant::now();
    observer.on_deployment(stock_deployment(3), t0);
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t0);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
    let long_after = t0 + GRACE * 10;
    let mode = observer.mode(long_after);
    assert!(waiting(&mode), "{mode}");
    assert!(
        mode.to_string()
            .contains("deployment/vsphere-csi-controller")
    );
    assert!(observer.may_take(long_after).is_err());
    assert_eq!(
        decide_hold_now(&observer, long_after),
        hold::HoldAction::Wait
    );
    // No Lease at all (a first install whose syncer has not led yet) is no reason either.
    observer.on_lease(None, long_after);
    assert!(observer.may_take(long_after).is_err());
    assert_eq!(
        hold::decide_hold(None, ME, true, observer.may_take(long_after).is_ok()),
        hold::HoldAction::Wait
    );

    // With --hold-driver-syncer the lapsed Lease is taken, one grace after its last renewal.
    let mut holding = observer_with(true, true);
    holding.on_deployment(stock_deployment(3), t0);
    holding.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t0);
    assert!(holding.may_take(t0 + Duration::from_secs(30)).is_err());
    assert_eq!(holding.may_take(t0 + GRACE), Ok(()));
}

fn decide_hold_now(observer: &SyncerObserver, now: Instant) -> hold::HoldAction {
    hold::decide_hold(
        Some(&lease("csi-controller-0", 0, Some(30))),
        ME,
        observer.wants_hold(),
        observer.may_take(now).is_ok(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_driver_scaled_to_zero_or_deleted_counts_as_absent() {
    let mut observer = observer_with(false, true);
    let t0 = Instant::now();
    observer.on_lease(None, t0);
    observer.on_deployment(stock_deployment(0), t0);
    assert!(observer.may_take(t0).is_err(), "0 replicas only just now");
    // Seen again with 0 replicas: the count runs from the first sight.
    observer.on_deployment(stock_deployment(0), t0 + GRACE / 2);
    assert_eq!(observer.expires_at(t0 + GRACE / 2), Some(t0 + GRACE));
    assert_eq!(observer.may_take(t0 + GRACE), Ok(()));
    // Scaled up again: the count starts over.
    observer.on_deployment(stock_deployment(1), t0 + GRACE);
    observer.on_deployment(stock_deployment(0), t0 + GRACE * 2);
    assert!(observer.may_take(t0 + GRACE * 2).is_err());
    // Deleted: absent at once.
    observer.on_deployment(DriverPresence::Absent, t0 + GRACE * 2);
    assert_eq!(observer.may_take(t0 + GRACE * 2), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_driver_seen_holding_the_lease_ends_volmigs_hold_at_once() {
    let mut observer = observer_with(false, false);
    let t0 = Instant::now();
    observer.on_lease(None, t0);
    observer.set_hold(held(t0 + Duration::from_secs(30)));
    assert_eq!(observer.mode(t0), own());
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t0);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
}

#[tokio::test(start_paused = true)]
async fn hold_mode_creates_only_within_the_send_window_and_never_after_the_hand_over() {
    let mut observer = observer_with(true, false);
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
            holder: ME.to_owned()
        }
    );
    assert!(observer.mode(t0).registers() && observer.hands_over());
    assert_eq!(observer.expires_at(t0), Some(until));
    // No renewal written since: the window ends, creates stop before the driver can lead.
    assert_eq!(observer.mode(until), RegistrarMode::Acquiring);
    // Handed over: follow until the driver's syncer has been seen leading; never take the
    // Lease again, even with no driver deployed.
    observer.set_hold(HoldPhase::HandedOver);
    assert!(!observer.wants_hold());
    assert_eq!(observer.mode(until), follow(HANDED_OVER));
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), until);
    assert_eq!(observer.mode(until), follow("csi-controller-0"));
    let later = until + GRACE * 2;
    let mode = observer.mode(later);
    assert!(waiting(&mode), "the driver stopped renewing: {mode}");
    assert!(!mode.registers());
}

#[tokio::test(start_paused = true)]
async fn hold_mode_follows_a_live_driver_syncer_it_waits_for() {
    let mut observer = observer_with(true, false);
    let t0 = Instant::now();
    observer.on_lease(Some(&lease("csi-controller-0", 0, Some(30))), t0);
    observer.set_hold(HoldPhase::Acquiring);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
    assert!(observer.driver_lease_live(t0));
    assert!(observer.may_take(t0).is_err());
    observer.set_hold(HoldPhase::HandedOver);
    assert_eq!(observer.mode(t0), follow("csi-controller-0"));
}

#[tokio::test(start_paused = true)]
async fn a_syncer_without_leader_election_is_followed_whatever_the_lease_says() {
    let mut observer = observer_with(false, true);
    let now = Instant::now();
    observer.on_lease(None, now);
    assert_eq!(
        observer.mode(now),
        RegistrarMode::Unknown,
        "the Deployment is not read yet"
    );
    let unelected = "deployment/vsphere-csi-controller".to_owned();
    observer.on_deployment(DriverPresence::Unelected(unelected.clone()), now);
    assert_eq!(observer.mode(now), follow(&unelected));
    assert_eq!(observer.may_take(now), Err(unelected.clone()));
    observer.set_hold(held(now + Duration::from_secs(30)));
    assert_eq!(
        observer.mode(now),
        follow(&unelected),
        "a Lease held by volmig does not stop a syncer that ignores it"
    );
    observer.on_deployment(DriverPresence::Absent, now);
    assert_eq!(observer.mode(now), own());
}

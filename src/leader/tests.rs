//! Unit tests of the arbiter on tokio's paused clock, and of the whole election against a
//! scripted API server (tower-test mock).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::client::Body;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::arbiter::{Arbiter, Shared, Validity};
use super::campaign::{AbortOnDrop, Campaign, Input};
use super::tracker::Tracker;
use super::*;

const D: Duration = Duration::from_secs(8);
const MARGIN: Duration = Duration::from_secs(2);

fn lease(holder: Option<&str>, renewed: Timestamp, seconds: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("volmig".to_owned()),
            namespace: Some("kube-system".to_owned()),
            resource_version: Some("1".to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(seconds),
            ..Default::default()
        }),
    }
}

/// What the fake campaigns saw.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CampaignLog {
    Started(u64),
    /// Stopped with "release even if not known to hold", and whether the flag was
    /// still true at that moment.
    Stopped {
        generation: u64,
        release_anyway: bool,
        flag_was: bool,
    },
}

/// An arbiter with fake campaigns and no observer: the test plays both.
struct Harness {
    inputs: mpsc::Sender<Input>,
    shared: Arc<Shared>,
    log: Arc<Mutex<Vec<CampaignLog>>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), LeaderError>>,
}

impl Harness {
    fn start() -> Self {
        let shared = Arc::new(Shared::new(Validity::Never));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (input_tx, inputs) = mpsc::channel(32);
        let (campaign_log, campaign_shared) = (Arc::clone(&log), Arc::clone(&shared));
        let arbiter = Arbiter {
            tracker: Tracker::new("me".to_owned(), D, MARGIN),
            shared: Arc::clone(&shared),
            inputs,
            input_tx: input_tx.clone(),
            spawn_campaign: Box::new(move |generation, _tx| {
                campaign_log
                    .lock()
                    .unwrap()
                    .push(CampaignLog::Started(generation));
                let (stop, stop_rx) = oneshot::channel::<bool>();
                let (log, flag) = (Arc::clone(&campaign_log), campaign_shared.subscribe());
                let task = tokio::spawn(async move {
                    if let Ok(release_anyway) = stop_rx.await {
                        let flag_was = *flag.borrow();
                        let entry = CampaignLog::Stopped {
                            generation,
                            release_anyway,
                            flag_was,
                        };
                        log.lock().unwrap().push(entry);
                    }
                    Ok(())
                });
                Campaign {
                    stop,
                    task: AbortOnDrop(task),
                }
            }),
            observer: None,
            lease: "kube-system/volmig".to_owned(),
            holder_id: "me".to_owned(),
            release_timeout: D,
        };
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(arbiter.run(stop_rx));
        Self {
            inputs: input_tx,
            shared,
            log,
            stop: Some(stop),
            task,
        }
    }

    async fn send(&self, input: Input) {
        self.inputs.send(input).await.unwrap();
    }

    async fn manager(&self, generation: u64, holds: bool) {
        self.send(Input::Manager { generation, holds }).await;
    }

    /// The Lease, renewed "now" on the wall clock.
    async fn observe(&self, holder: Option<&str>) {
        self.send(Input::Lease(Some(Box::new(lease(
            holder,
            Timestamp::now(),
            8,
        )))))
        .await;
    }

    /// Waits until the flag has the given value.
    async fn flag_becomes(&self, value: bool) {
        let mut rx = self.shared.subscribe();
        tokio::time::timeout(Duration::from_secs(60), rx.wait_for(|v| *v == value))
            .await
            .expect("the flag did not change")
            .unwrap();
    }

    fn log(&self) -> Vec<CampaignLog> {
        self.log.lock().unwrap().clone()
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_without_observed_renewals_stops_at_its_own_deadline() {
    let h = Harness::start();
    h.manager(0, true).await;
    h.observe(Some("me")).await;
    h.flag_becomes(true).await;
    let since = Instant::now();
    assert!(h.shared.is_leader());

    // Nothing renews (a paused process, a stuck API server): the paused clock runs to the
    // arbiter's timer, which sends false although the lease manager still says "holder".
    h.flag_becomes(false).await;
    assert!(!h.shared.is_leader());
    // The renewal time is read from the wall clock, which keeps moving under the paused
    // monotonic clock: allow the milliseconds a loaded machine takes between the two.
    let elapsed = since.elapsed();
    assert!(
        elapsed <= D - MARGIN && (D - MARGIN) - elapsed < Duration::from_secs(1),
        "leadership ends a margin before the lease: {elapsed:?} vs {:?}",
        D - MARGIN
    );
}

#[tokio::test(start_paused = true)]
async fn is_leader_checks_the_deadline_even_when_the_arbiter_cannot_run() {
    let h = Harness::start();
    h.manager(0, true).await;
    h.observe(Some("me")).await;
    h.flag_becomes(true).await;
    // The arbiter is gone (as if it had not been scheduled since the process woke up).
    h.task.abort();
    let flag = h.shared.subscribe();
    tokio::time::advance(D - MARGIN - Duration::from_millis(1)).await;
    assert!(h.shared.is_leader(), "still inside the term");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(*flag.borrow(), "nobody flipped the watch value");
    assert!(!h.shared.is_leader(), "the clock alone ends leadership");
}

#[tokio::test(start_paused = true)]
async fn observed_renewals_keep_the_leader_leading() {
    let h = Harness::start();
    h.manager(0, true).await;
    h.observe(Some("me")).await;
    h.flag_becomes(true).await;
    let mut flag = h.shared.subscribe();
    flag.mark_unchanged();
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(3)).await;
        h.observe(Some("me")).await;
        tokio::task::yield_now().await;
        assert!(h.shared.is_leader());
    }
    assert!(
        !flag.has_changed().unwrap(),
        "the flag never dropped while renewals came"
    );
    let last = Instant::now();
    h.flag_becomes(false).await;
    assert_eq!(last.elapsed(), D - MARGIN);
}

#[tokio::test(start_paused = true)]
async fn another_holder_ends_leadership_at_once() {
    let h = Harness::start();
    h.manager(0, true).await;
    h.observe(Some("me")).await;
    h.flag_becomes(true).await;
    let before = Instant::now();
    h.observe(Some("someone-else")).await;
    h.flag_becomes(false).await;
    assert_eq!(before.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_lease_alone_does_not_make_a_leader() {
    let h = Harness::start();
    h.observe(Some("me")).await;
    h.manager(0, false).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!h.shared.is_leader());
    assert!(!*h.shared.subscribe().borrow());
}

#[tokio::test(start_paused = true)]
async fn a_freed_lease_restarts_the_campaign_and_stale_reports_are_ignored() {
    let h = Harness::start();
    h.manager(0, false).await;
    h.observe(Some("other")).await;
    h.send(Input::Lease(None)).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        h.log(),
        vec![CampaignLog::Started(0), CampaignLog::Started(1)]
    );

    // A late report of the aborted campaign does not count; the new one's does.
    h.manager(0, true).await;
    h.observe(Some("me")).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(!h.shared.is_leader());
    h.manager(1, true).await;
    h.flag_becomes(true).await;
}

#[tokio::test(start_paused = true)]
async fn release_drops_the_flag_before_the_campaign_releases() {
    let mut h = Harness::start();
    h.manager(0, true).await;
    h.observe(Some("me")).await;
    h.flag_becomes(true).await;
    h.stop.take().unwrap().send(()).unwrap();
    (&mut h.task).await.unwrap().unwrap();
    assert_eq!(
        h.log(),
        vec![
            CampaignLog::Started(0),
            CampaignLog::Stopped {
                generation: 0,
                release_anyway: true,
                flag_was: false
            },
        ]
    );
    assert!(!h.shared.is_leader());
}

#[test]
fn timing_follows_the_lease_duration() {
    let t = Timing::new(Duration::from_secs(15)).unwrap();
    assert_eq!(
        (t.duration_secs, t.grace_secs),
        (15, 10),
        "renews every 5 s"
    );
    assert_eq!(t.margin, Duration::from_millis(3750));
    let t = Timing::new(Duration::from_secs(2)).unwrap();
    assert_eq!((t.duration_secs, t.grace_secs), (2, 1));
    assert_eq!(Timing::new(Duration::from_secs(1)), None);
    assert_eq!(Timing::new(Duration::from_millis(2500)), None);
}

#[test]
fn holder_id_prefers_the_pod_name() {
    let id = holder_id_from(
        Some("volmig-7d9f-abcde".into()),
        Some("node".into()),
        "x1y2z",
    );
    assert_eq!(id, "volmig-7d9f-abcde");
    assert_eq!(
        holder_id_from(Some(" ".into()), Some("node\n".into()), "x1y2z"),
        "node-x1y2z"
    );
    assert_eq!(holder_id_from(None, None, "x1y2z"), "volmig-x1y2z");
    let suffix = random_suffix();
    assert_eq!(suffix.len(), 5);
    assert!(
        suffix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    );
}

#[tokio::test]
async fn invalid_configs_are_rejected_with_the_lease_named() {
    let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let config = LeaderConfig {
        namespace: "kube-system".into(),
        lease_name: "volmig".into(),
        holder_id: "me".into(),
        lease_duration: Duration::from_secs(1),
    };
    let error = Leadership::start(client.clone(), config.clone())
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("lease kube-system/volmig"),
        "{error}"
    );
    let config = LeaderConfig {
        holder_id: " ".into(),
        lease_duration: D,
        ..config
    };
    let error = Leadership::start(client, config).await.unwrap_err();
    assert!(
        matches!(error, LeaderError::EmptyHolderId { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn always_leader_until_released() {
    let leadership = Leadership::always_leader();
    let handle = leadership.handle();
    let rx = leadership.watch();
    assert!(leadership.is_leader() && handle.is_leader() && *rx.borrow());
    leadership.release().await.unwrap();
    assert!(!handle.is_leader());
    assert!(!*rx.borrow());
}

/// A scripted API server holding one Lease; watch requests are left pending.
struct FakeApi {
    lease: Mutex<Lease>,
    patches: Mutex<Vec<String>>,
}

impl FakeApi {
    fn serve(
        self: &Arc<Self>,
        mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    ) -> AbortOnDrop<()> {
        let api = Arc::clone(self);
        AbortOnDrop(tokio::spawn(async move {
            let mut parked = Vec::new();
            while let Some((request, respond)) = handle.next_request().await {
                let query = request.uri().query().unwrap_or("").to_owned();
                let path = request.uri().path().to_owned();
                let body = if query.contains("watch=true") {
                    parked.push(respond);
                    continue;
                } else if request.method() == Method::PATCH {
                    let bytes = request.into_body().collect_bytes().await.unwrap();
                    api.patches
                        .lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&bytes).into());
                    serde_json::to_vec(&*api.lease.lock().unwrap()).unwrap()
                } else if path.ends_with("/leases") {
                    let lease = api.lease.lock().unwrap().clone();
                    serde_json::to_vec(&serde_json::json!({
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "LeaseList",
                        "metadata": {"resourceVersion": "1"},
                        "items": [lease],
                    }))
                    .unwrap()
                } else {
                    serde_json::to_vec(&*api.lease.lock().unwrap()).unwrap()
                };
                let response = Response::builder()
                    .status(StatusCode::OK)
                    .body(Body::from(body))
                    .unwrap();
                respond.send_response(response);
            }
        }))
    }
}

async fn start_against(
    holder: &str,
    renewed: Timestamp,
) -> (Leadership, Arc<FakeApi>, AbortOnDrop<()>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let api = Arc::new(FakeApi {
        lease: Mutex::new(lease(Some(holder), renewed, 60)),
        patches: Mutex::new(Vec::new()),
    });
    let server = api.serve(handle);
    let client = kube::Client::new(service, "default");
    let config = LeaderConfig {
        namespace: "kube-system".into(),
        lease_name: "volmig".into(),
        holder_id: "me".into(),
        lease_duration: Duration::from_secs(60),
    };
    (
        Leadership::start(client, config).await.unwrap(),
        api,
        server,
    )
}

#[tokio::test]
async fn a_restart_with_the_same_holder_id_resumes_leadership_without_waiting() {
    // The previous process with our id renewed 5 s ago and died; the lease runs 60 s.
    let renewed = Timestamp::now() - jiff::SignedDuration::from_secs(5);
    let (leadership, api, _server) = start_against("me", renewed).await;
    let mut rx = leadership.watch();
    tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|v| *v))
        .await
        .unwrap()
        .unwrap();
    assert!(leadership.is_leader());
    assert!(
        api.patches.lock().unwrap().is_empty(),
        "no takeover write was needed"
    );
}

#[tokio::test]
async fn a_live_lease_of_another_holder_is_left_alone() {
    let (leadership, api, _server) = start_against("other", Timestamp::now()).await;
    // Give the campaign time to read the lease and go to sleep until it expires.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!leadership.is_leader());
    assert!(api.patches.lock().unwrap().is_empty());
    leadership.release().await.unwrap();
    assert!(
        api.patches.lock().unwrap().is_empty(),
        "a follower releases nothing"
    );
}

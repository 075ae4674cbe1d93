//! Leader election against the Kubernetes API test server: one leader at a time, prompt
//! hand-over on release, take-over after a crash, and a restarted replica with the same
//! holder id resuming at once (docs/design.md §3.3, §4.2).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed unwrap or expectation is a test failure"
)]

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use kube_testserver::{Options, TestServer};
use tokio::time::Instant;
use volmig::leader::{LeaderConfig, Leadership};
use volmig::registrar::LeaderGate;

const NAMESPACE: &str = "kube-system";
const LEASE: &str = "volmig";
/// Long enough that "waiting for the lease to expire" would blow every test timeout.
const LONG: Duration = Duration::from_secs(60);
/// Upper bound for things that must happen "at once" (far below [`LONG`]); a hang guard.
const PROMPTLY: Duration = Duration::from_secs(20);

async fn start_server() -> (TestServer, Client) {
    let server = TestServer::start(Options::default())
        .await
        .expect("start the API test server");
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig_yaml()).expect("parse kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    let client = Client::try_from(config).expect("client");
    (server, client)
}

async fn campaign(client: &Client, holder_id: &str, lease_duration: Duration) -> Leadership {
    let config = LeaderConfig {
        namespace: NAMESPACE.to_owned(),
        lease_name: LEASE.to_owned(),
        holder_id: holder_id.to_owned(),
        lease_duration,
    };
    Leadership::start(client.clone(), config)
        .await
        .expect("start campaigning")
}

async fn holder(client: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get(LEASE)
        .await
        .unwrap();
    lease.spec.and_then(|s| s.holder_identity)
}

/// Samples every replica until `done` holds for the sample (or `limit` passes, which
/// fails the test); asserts at every sample that at most one replica leads.
async fn sample_until(
    replicas: &[(&str, &Leadership)],
    limit: Duration,
    done: impl Fn(&[bool]) -> bool,
) -> usize {
    let start = Instant::now();
    let mut samples = 0;
    loop {
        let leading: Vec<bool> = replicas.iter().map(|(_, l)| l.is_leader()).collect();
        samples += 1;
        let leaders: Vec<&str> = replicas
            .iter()
            .zip(&leading)
            .filter(|(_, l)| **l)
            .map(|((id, _), _)| *id)
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if done(&leading) {
            return samples;
        }
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}: {leading:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_lead_at_the_same_time_through_many_renewals() {
    let (_server, client) = start_server().await;
    let lease_duration = Duration::from_secs(4);
    let a = campaign(&client, "replica-a", lease_duration).await;
    sample_until(&[("a", &a)], PROMPTLY, |l| l[0]).await;
    let b = campaign(&client, "replica-b", lease_duration).await;

    // Three lease durations: the leader renews about every second meanwhile.
    let replicas = [("a", &a), ("b", &b)];
    let deadline = Instant::now() + 3 * lease_duration;
    let samples = sample_until(&replicas, 4 * lease_duration, |_| {
        Instant::now() >= deadline
    })
    .await;
    assert!(
        !b.is_leader(),
        "the follower never took a lease that was being renewed"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("replica-a"));
    println!(
        "{samples} samples over {:?}: never two leaders, replica-a kept the lease",
        3 * lease_duration
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_started_together_elect_exactly_one() {
    let (_server, client) = start_server().await;
    let lease_duration = Duration::from_secs(4);
    let (a, b) = tokio::join!(
        campaign(&client, "replica-a", lease_duration),
        campaign(&client, "replica-b", lease_duration)
    );
    let replicas = [("a", &a), ("b", &b)];
    sample_until(&replicas, PROMPTLY, |l| l.contains(&true)).await;
    let deadline = Instant::now() + 2 * lease_duration;
    sample_until(&replicas, 3 * lease_duration, |_| {
        Instant::now() >= deadline
    })
    .await;
    let elected = if a.is_leader() {
        "replica-a"
    } else {
        "replica-b"
    };
    assert!(a.is_leader() != b.is_leader(), "exactly one leader");
    assert_eq!(holder(&client).await.as_deref(), Some(elected));
    println!("{elected} elected; the Lease names it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_the_lease_over_at_once() {
    let (_server, client) = start_server().await;
    let a = campaign(&client, "replica-a", LONG).await;
    let gate = LeaderGate::new(a.watch());
    sample_until(&[("a", &a)], PROMPTLY, |l| l[0]).await;
    assert!(
        gate.is_open(),
        "the registrar's gate follows the leader flag"
    );
    let b = campaign(&client, "replica-b", LONG).await;
    // Let the follower read the lease and settle into waiting for it.
    let settle = Instant::now() + Duration::from_millis(500);
    sample_until(&[("a", &a), ("b", &b)], PROMPTLY, |_| {
        Instant::now() >= settle
    })
    .await;
    assert!(a.is_leader() && !b.is_leader());

    let released_at = Instant::now();
    a.release().await.expect("release");
    assert!(!gate.is_open(), "the gate is closed once release returns");
    // The lease runs 60 s: taking over within PROMPTLY proves nobody waited for it.
    sample_until(&[("b", &b)], PROMPTLY, |l| l[0]).await;
    assert_eq!(holder(&client).await.as_deref(), Some("replica-b"));
    println!(
        "replica-b leads {:?} after the release of a 60 s lease",
        released_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_after_its_lease_expires() {
    let (_server, client) = start_server().await;
    let lease_duration = Duration::from_secs(2);
    let a = campaign(&client, "replica-a", lease_duration).await;
    sample_until(&[("a", &a)], PROMPTLY, |l| l[0]).await;
    let b = campaign(&client, "replica-b", lease_duration).await;
    let settle = Instant::now() + Duration::from_millis(500);
    sample_until(&[("a", &a), ("b", &b)], PROMPTLY, |_| {
        Instant::now() >= settle
    })
    .await;

    // Dropping without release is a crash: nothing is written, the lease stays A's.
    let handle = a.handle();
    drop(a);
    let crashed_at = Instant::now();
    assert!(!handle.is_leader());
    assert_eq!(holder(&client).await.as_deref(), Some("replica-a"));

    sample_until(&[("b", &b)], PROMPTLY, |l| l[0]).await;
    assert_eq!(holder(&client).await.as_deref(), Some("replica-b"));
    println!(
        "replica-b took over {:?} after replica-a crashed (lease duration {lease_duration:?})",
        crashed_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_with_the_same_holder_id_resumes_at_once() {
    let (_server, client) = start_server().await;
    let first = campaign(&client, "pod-a", LONG).await;
    sample_until(&[("pod-a", &first)], PROMPTLY, |l| l[0]).await;
    let other = campaign(&client, "pod-b", LONG).await;
    let settle = Instant::now() + Duration::from_millis(500);
    sample_until(&[("pod-a", &first), ("pod-b", &other)], PROMPTLY, |_| {
        Instant::now() >= settle
    })
    .await;

    // The container restarts: the old process dies without releasing, a new one with the
    // same identity starts while the 60 s lease still names it.
    drop(first);
    let restarted_at = Instant::now();
    let second = campaign(&client, "pod-a", LONG).await;
    sample_until(&[("pod-a", &second), ("pod-b", &other)], PROMPTLY, |l| l[0]).await;
    assert!(!other.is_leader());
    assert_eq!(holder(&client).await.as_deref(), Some("pod-a"));
    println!(
        "pod-a leads again {:?} after its restart; pod-b stayed a follower",
        restarted_at.elapsed()
    );
    second.release().await.expect("release");
    sample_until(&[("pod-b", &other)], PROMPTLY, |l| l[0]).await;
}

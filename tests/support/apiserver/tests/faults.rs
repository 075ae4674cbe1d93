//! Fault injection and request counters, through the library handle and the admin endpoints.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_testserver::{FailureRates, FaultConfig, Verb};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).expect("cm")
}

async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> (u16, Option<String>, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(
            serde_json::to_vec(&body).expect("json"),
        ))
        .expect("request");
    let resp = client.send(req).await.expect("send");
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (status, retry, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn write_failures_latency_and_after_commit() {
    let env = common::start().await;
    let client = env.client_without_retries().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let faults = env.server.faults();

    faults.set_write_failures(1.0, 0.0);
    match api.create(&PostParams::default(), &cm("a")).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (500, "InternalError")),
        other => panic!("expected 500, got {other:?}"),
    }
    assert!(
        api.get_opt("a").await.expect("reads still work").is_none(),
        "a failed write changes nothing"
    );

    faults.set_write_failures(0.0, 1.0);
    let (code, retry, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json!(cm("a")),
    )
    .await;
    assert_eq!((code, retry.as_deref()), (429, Some("1")), "{body}");
    assert!(body.contains("TooManyRequests"));

    faults.set_write_failures(0.0, 0.0);
    faults.set_write_failures_after_commit(1.0);
    match api.create(&PostParams::default(), &cm("b")).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 500),
        other => panic!("expected 500, got {other:?}"),
    }
    assert!(
        api.get_opt("b").await.expect("get").is_some(),
        "committed despite the 500"
    );

    faults.clear();
    faults.set_read_failures(1.0, 0.0);
    assert!(
        api.list(&ListParams::default()).await.is_err(),
        "reads fail"
    );
    api.create(&PostParams::default(), &cm("c"))
        .await
        .expect("writes unaffected by read faults");
    faults.clear();

    faults.set_latency(std::time::Duration::from_millis(300));
    let t = Instant::now();
    api.get("c").await.expect("get");
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(300),
        "latency added"
    );
    faults.clear();
    let stats = env.server.stats();
    assert_eq!(stats.injected_failures, 4);
    println!(
        "checked: 500 and 429+Retry-After on writes, 500 after commit, read failures, added latency; 4 injected failures counted"
    );
}

#[tokio::test]
async fn failure_fractions_are_seeded_and_reproducible() {
    let env = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client_without_retries().await, "default");
    let config = FaultConfig {
        writes: FailureRates {
            fail_500: 0.10,
            fail_429: 0.05,
            fail_500_after_commit: 0.0,
        },
        seed: Some(42),
        resources: vec!["configmaps".into()],
        ..FaultConfig::default()
    };
    let mut runs = Vec::new();
    for round in 0..2 {
        env.server.faults().set(config.clone());
        let mut outcomes = Vec::new();
        for i in 0..300 {
            let r = api
                .create(&PostParams::default(), &cm(&format!("r{round}-{i}")))
                .await;
            outcomes.push(match r {
                Ok(_) => 200,
                Err(kube::Error::Api(s)) => s.code,
                Err(e) => panic!("{e}"),
            });
        }
        runs.push(outcomes);
    }
    env.server.faults().clear();
    assert_eq!(runs[0], runs[1], "same seed, same failures");
    let n500 = runs[0].iter().filter(|c| **c == 500).count();
    let n429 = runs[0].iter().filter(|c| **c == 429).count();
    assert!((12..=50).contains(&n500), "{n500} of 300 failed with 500");
    assert!((3..=30).contains(&n429), "{n429} of 300 failed with 429");
    let stored = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .len();
    assert_eq!(stored, runs.iter().flatten().filter(|c| **c == 200).count());
    println!(
        "checked: seeded 10% 500 / 5% 429 write failures: {n500} and {n429} of 300, identical on replay"
    );
}

#[tokio::test]
async fn stats_count_requests_exactly() {
    let env = common::start().await;
    let client = env.client_without_retries().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("warmup"))
        .await
        .expect("create");
    env.server.reset_stats();
    for n in ["a", "b", "c"] {
        api.create(&PostParams::default(), &cm(n))
            .await
            .expect("create");
    }
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .expect("patch");
    api.patch("b", &PatchParams::apply("t").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"z": "1"}})))
        .await
        .expect("apply");
    let mut c = api.get("c").await.expect("get");
    c.data
        .get_or_insert_default()
        .insert("u".into(), "v".into());
    api.replace("c", &PostParams::default(), &c)
        .await
        .expect("replace");
    api.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    api.list(&ListParams::default()).await.expect("list");
    let _ = api.get("nope").await;
    // Admin endpoints are not counted.
    let stats_json = client
        .request_text(
            http::Request::get("/_testserver/stats")
                .body(vec![])
                .expect("req"),
        )
        .await
        .expect("stats");
    let via_http: serde_json::Value = serde_json::from_str(&stats_json).expect("json");
    let s = env.server.stats();
    assert_eq!(via_http["writes"], 7);
    assert_eq!(
        s.writes, 7,
        "3 creates + 2 patches + 1 update + 1 delete: {s:?}"
    );
    assert_eq!(s.count(Verb::Create, "configmaps"), 3);
    assert_eq!(s.count(Verb::Patch, "configmaps"), 2);
    assert_eq!(s.count(Verb::Update, "configmaps"), 1);
    assert_eq!(s.count(Verb::Delete, "configmaps"), 1);
    assert_eq!(s.count(Verb::Get, "configmaps"), 2);
    assert_eq!(s.count(Verb::List, "configmaps"), 1);
    assert_eq!(s.reads, 3);
    env.server.reset_stats();
    assert_eq!(env.server.stats().writes, 0);
    println!(
        "checked: exact per-verb counts, writes={}, reads={}, admin requests not counted",
        s.writes, s.reads
    );
}

//! Server-side apply conflicts and what depends on them: Lease-based leader election with
//! kube-lease-manager (the crate volmig uses) elects exactly one holder.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use kube_lease_manager::LeaseManagerBuilder;
use serde_json::json;

fn lease(holder: &str) -> serde_json::Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l1"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 5}})
}

#[tokio::test]
async fn apply_conflicts_on_fields_owned_by_another_manager() {
    let env = common::start().await;
    let api: Api<Lease> = Api::namespaced(env.client().await, "default");
    api.patch(
        "l1",
        &PatchParams::apply("mgr-a"),
        &Patch::Apply(lease("a")),
    )
    .await
    .expect("first apply creates");
    match api
        .patch(
            "l1",
            &PatchParams::apply("mgr-b"),
            &Patch::Apply(lease("b")),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(
                s.message.contains("mgr-a") && s.message.contains(".spec.holderIdentity"),
                "{}",
                s.message
            );
        }
        other => panic!("expected a 409 apply conflict, got {other:?}"),
    }
    api.patch(
        "l1",
        &PatchParams::apply("mgr-b"),
        &Patch::Apply(lease("a")),
    )
    .await
    .expect("same values share ownership");
    match api
        .patch(
            "l1",
            &PatchParams::apply("mgr-c"),
            &Patch::Apply(lease("c")),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert!(
                s.message.contains("mgr-a") && s.message.contains("mgr-b"),
                "both owners named: {}",
                s.message
            );
        }
        other => panic!("expected 409, got {other:?}"),
    }
    let got = api
        .patch(
            "l1",
            &PatchParams::apply("mgr-b").force(),
            &Patch::Apply(lease("b")),
        )
        .await
        .expect("force");
    assert_eq!(
        got.spec.expect("spec").holder_identity.as_deref(),
        Some("b")
    );
    match api
        .patch(
            "l1",
            &PatchParams::apply("mgr-a"),
            &Patch::Apply(lease("a")),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 409, "forcing took ownership away from mgr-a")
        }
        other => panic!("expected 409, got {other:?}"),
    }
    // An update that clears the field frees it for anyone.
    let clear = json!({"spec": {"holderIdentity": null}});
    api.patch(
        "l1",
        &PatchParams {
            field_manager: Some("mgr-b".into()),
            ..Default::default()
        },
        &Patch::Strategic(clear),
    )
    .await
    .expect("release");
    api.patch(
        "l1",
        &PatchParams::apply("mgr-a"),
        &Patch::Apply(lease("a")),
    )
    .await
    .expect("free again");
    let file = env.file(
        "lease.yaml",
        &serde_json::to_string(&lease("c")).expect("json"),
    );
    let err = env.kubectl_err(&["apply", "--server-side", "-f", &file]);
    assert!(err.contains("conflict") && err.contains("mgr-a"), "{err}");
    env.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", &file]);
    println!(
        "checked: SSA conflict (409) on another manager's field, shared ownership on equal values, force, release by update, kubectl --server-side"
    );
}

#[tokio::test]
async fn lease_manager_elects_exactly_one_leader() {
    let env = common::start().await;
    let mut rxs = Vec::new();
    let mut handles = Vec::new();
    for i in 0..3 {
        let m = LeaseManagerBuilder::new(env.client().await, "volmig-leader")
            .with_namespace("default")
            .with_identity(format!("replica-{i}"))
            .with_duration(3)
            .with_grace(1)
            .build()
            .await
            .expect("lease manager");
        let (rx, handle) = m.watch().await;
        rxs.push(rx);
        handles.push(handle);
    }
    let leaders =
        |rxs: &Vec<tokio::sync::watch::Receiver<bool>>| rxs.iter().filter(|r| *r.borrow()).count();
    let mut first = None;
    for _ in 0..400 {
        let n = leaders(&rxs);
        assert!(n <= 1, "two leaders at once");
        if n == 1 {
            first = rxs.iter().position(|r| *r.borrow());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = first.expect("a leader was elected");
    for _ in 0..40 {
        assert_eq!(leaders(&rxs), 1, "exactly one leader while it renews");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The leader dies without releasing: another replica takes over once the lease expires.
    handles[first].abort();
    rxs.remove(first);
    let mut second = None;
    for _ in 0..400 {
        let n = leaders(&rxs);
        assert!(n <= 1, "two leaders at once after fail-over");
        if n == 1 {
            second = Some(n);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(second.is_some(), "a new leader took over");
    let lease: Lease = Api::namespaced(env.client().await, "default")
        .get("volmig-leader")
        .await
        .expect("lease");
    let holder = lease.spec.expect("spec").holder_identity.expect("holder");
    assert_ne!(holder, format!("replica-{first}"));
    for h in &handles {
        h.abort();
    }
    println!(
        "checked: kube-lease-manager elected one leader of 3 (replica-{first}), and {holder} after it died"
    );
}

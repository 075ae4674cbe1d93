//! Acceptance tests with kube-rs as the client: watcher resilience, conflicts, pagination,
//! server-side apply, selectors, Events in both groups.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_testserver::Verb;
use serde_json::json;

fn pv(name: &str, path: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"app": "volmig"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "vsphereVolume": {"volumePath": path, "fsType": "ext4"}
        }
    }))
    .expect("pv")
}

async fn create_pvs(api: &Api<PersistentVolume>, prefix: &str, range: std::ops::Range<usize>) {
    futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            let name = format!("{prefix}-{i:05}");
            async move {
                api.create(
                    &PostParams::default(),
                    &pv(&name, &format!("[ds] v/{name}.vmdk")),
                )
                .await
                .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("create pvs");
}

async fn fresh_versions(api: &Api<PersistentVolume>) -> BTreeMap<String, String> {
    let list = api.list(&ListParams::default()).await.expect("list");
    list.items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect()
}

fn store_versions(reader: &reflector::Store<PersistentVolume>) -> BTreeMap<String, String> {
    reader
        .state()
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

async fn churn(api: &Api<PersistentVolume>, prefix: &str, round: usize) {
    create_pvs(api, prefix, 0..10).await;
    for i in 0..3 {
        let name = format!("base-{:05}", round * 6 + i);
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    for i in 3..6 {
        let name = format!("base-{:05}", round * 6 + i);
        let p = json!({"metadata": {"labels": {"round": round.to_string()}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(p))
            .await
            .expect("patch");
    }
}

async fn converge(
    reader: &reflector::Store<PersistentVolume>,
    api: &Api<PersistentVolume>,
) -> BTreeMap<String, String> {
    let want = fresh_versions(api).await;
    for _ in 0..200 {
        if store_versions(reader) == want {
            return want;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "watcher cache never matched a fresh list: {} vs {} objects",
        store_versions(reader).len(),
        want.len()
    );
}

#[tokio::test]
async fn watcher_survives_dropped_watches_and_compaction() {
    let env = common::start().await;
    let api: Api<PersistentVolume> = Api::all(env.client().await);
    create_pvs(&api, "base", 0..30).await;
    let (reader, writer) = reflector::store();
    let stream =
        reflector(writer, watcher(api.clone(), watcher::Config::default())).default_backoff();
    let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    reader.wait_until_ready().await.expect("initial list");
    converge(&reader, &api).await;
    common::eventually("the watcher's watch to be open", || {
        env.server.open_watches() == 1
    })
    .await;
    env.server.reset_stats();

    let dropped = env.server.faults().drop_watches();
    assert!(dropped >= 1, "the watcher's watch was open");
    churn(&api, "after-drop", 0).await;
    let after_drop = converge(&reader, &api).await;
    let lists_after_drop = env.server.stats().count(Verb::List, "persistentvolumes");

    // Compaction: the resourceVersion the watcher holds becomes too old, so its next watch
    // gets 410 Gone and it must re-list.
    env.server.faults().compact();
    env.server.faults().drop_watches();
    churn(&api, "after-compact", 1).await;
    let final_state = converge(&reader, &api).await;
    // The re-list fills the cache before the watcher opens its next watch, so the cache
    // can match a fresh list while that watch is still on its way.
    common::eventually("the watcher to watch again after its re-list", || {
        env.server.stats().count(Verb::Watch, "persistentvolumes") >= 3
    })
    .await;
    let stats = env.server.stats();
    let lists = stats.count(Verb::List, "persistentvolumes");
    task.abort();
    assert_eq!(
        lists_after_drop, 1,
        "a dropped watch resumes from its resourceVersion without a re-list (the 1 is our own list)"
    );
    assert!(
        lists >= 3,
        "the 410 after compaction forced a re-list ({lists} lists): {:?}",
        stats.requests
    );
    assert_eq!(after_drop.len(), 30 + 10 - 3);
    assert_eq!(final_state.len(), 30 + 20 - 6);
    println!(
        "checked: watcher cache equals a fresh list after a watch drop ({} objects) and after compaction + drop ({} objects, {lists} lists)",
        after_drop.len(),
        final_state.len()
    );
}

#[tokio::test]
async fn raw_watch_from_compacted_version_gets_410_error_event() {
    let env = common::start().await;
    let api: Api<PersistentVolume> = Api::all(env.client().await);
    create_pvs(&api, "p", 0..3).await;
    let old = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let floor = env.server.faults().compact();
    let mut s = api
        .watch(&WatchParams::default(), &old)
        .await
        .expect("watch")
        .boxed();
    match s.try_next().await.expect("event").expect("one event") {
        WatchEvent::Error(e) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    let mut s = api
        .watch(&WatchParams::default().timeout(1), &floor.to_string())
        .await
        .expect("watch")
        .boxed();
    api.create(&PostParams::default(), &pv("p-new", "[ds] n.vmdk"))
        .await
        .expect("create");
    match s.try_next().await.expect("event").expect("one event") {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("p-new")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    println!(
        "checked: watch from rv {old} after compaction -> ERROR 410; from the new floor {floor} -> events"
    );
}

#[tokio::test]
async fn stale_replace_conflicts_and_duplicate_create_exists() {
    let env = common::start().await;
    let api: Api<PersistentVolume> = Api::all(env.client().await);
    let first = api
        .create(&PostParams::default(), &pv("pv1", "[ds] a.vmdk"))
        .await
        .expect("create");
    let mut newer = first.clone();
    newer
        .metadata
        .labels
        .get_or_insert_default()
        .insert("v".into(), "2".into());
    let newer = api
        .replace("pv1", &PostParams::default(), &newer)
        .await
        .expect("replace with the current rv");
    assert_ne!(
        newer.metadata.resource_version,
        first.metadata.resource_version
    );
    let mut stale = first.clone();
    stale
        .metadata
        .labels
        .get_or_insert_default()
        .insert("v".into(), "3".into());
    match api.replace("pv1", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"), "{s:?}");
            assert!(
                s.message.contains("the object has been modified"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 409, got {other:?}"),
    }
    match api
        .create(&PostParams::default(), &pv("pv1", "[ds] a.vmdk"))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("expected 409 AlreadyExists, got {other:?}"),
    }
    let current = api.get("pv1").await.expect("get");
    assert_eq!(current.metadata.labels.expect("labels")["v"], "2");
    assert_eq!(
        current.metadata.generation,
        Some(1),
        "labels are not spec: no generation bump"
    );
    println!(
        "checked: replace with a stale resourceVersion -> 409 Conflict, create of an existing name -> 409 AlreadyExists"
    );
}

#[tokio::test]
async fn pagination_returns_each_object_once() {
    let env = common::start().await;
    let api: Api<PersistentVolume> = Api::all(env.client().await);
    create_pvs(&api, "pv", 0..1000).await;
    let mut seen: Vec<String> = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    let mut list_rv = None;
    loop {
        let mut lp = ListParams::default().limit(50);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.expect("page");
        pages += 1;
        assert!(page.items.len() <= 50);
        list_rv.get_or_insert(page.metadata.resource_version.clone());
        assert_eq!(
            Some(page.metadata.resource_version.clone()),
            list_rv,
            "pages share the list's resourceVersion"
        );
        seen.extend(
            page.items
                .into_iter()
                .map(|p| p.metadata.name.unwrap_or_default()),
        );
        if pages == 3 {
            // Writes between pages must not make anything appear twice.
            create_pvs(&api, "aaa", 0..5).await;
            create_pvs(&api, "zzz", 0..5).await;
            api.delete("pv-00999", &DeleteParams::default())
                .await
                .expect("delete");
        }
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no object twice");
    for i in 0..999 {
        assert!(unique.contains(&format!("pv-{i:05}")), "pv-{i:05} missing");
    }
    assert!(
        !unique.contains(&"aaa-00000".to_string()),
        "created before the cursor: not in this list"
    );
    assert!(
        unique.contains(&"zzz-00000".to_string()),
        "created after the cursor: in this list"
    );
    assert_eq!(pages, 21);
    // A continue token from before a compaction is expired.
    let page = api
        .list(&ListParams::default().limit(10))
        .await
        .expect("page");
    env.server.faults().compact();
    let tok = page.metadata.continue_.expect("token");
    match api
        .list(&ListParams::default().limit(10).continue_token(&tok))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    println!(
        "checked: 1000 PVs in {pages} pages of 50, each exactly once despite writes between pages; stale continue -> 410"
    );
}

#[tokio::test]
async fn server_side_apply_merges_and_removes_dropped_fields() {
    let env = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    let pp = PatchParams::apply("volmig").force();
    let cm = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": data});
    api.patch("cfg", &pp, &Patch::Apply(cm(json!({"a": "1", "b": "2"}))))
        .await
        .expect("apply creates");
    api.patch(
        "cfg",
        &PatchParams::apply("other"),
        &Patch::Apply(cm(json!({"c": "3"}))),
    )
    .await
    .expect("second manager");
    let got = api
        .patch("cfg", &pp, &Patch::Apply(cm(json!({"a": "10"}))))
        .await
        .expect("re-apply");
    let data = got.data.expect("data");
    assert_eq!(data.get("a").map(String::as_str), Some("10"));
    assert_eq!(
        data.get("b"),
        None,
        "a field the manager stopped applying is removed"
    );
    assert_eq!(
        data.get("c").map(String::as_str),
        Some("3"),
        "another manager's field stays"
    );
    let managers: Vec<String> = got
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.contains(&"volmig".to_string()) && managers.contains(&"other".to_string()));
    let before = env.server.stats().writes;
    let dry = api
        .patch(
            "cfg",
            &PatchParams::apply("volmig").force().dry_run(),
            &Patch::Apply(cm(json!({"a": "dry"}))),
        )
        .await
        .expect("dry run");
    assert_eq!(dry.data.expect("data")["a"], "dry");
    assert_eq!(
        api.get("cfg").await.expect("get").data.expect("data")["a"],
        "10"
    );
    assert_eq!(
        env.server.stats().writes,
        before,
        "dry runs are not counted as writes"
    );
    println!("checked: SSA create, merge across managers, removal of un-applied fields, dry run");
}

/// Creates one ConfigMap per `(name, labels)`.
async fn create_labelled_config_maps<const N: usize>(
    api: &Api<ConfigMap>,
    maps: [(&str, serde_json::Value); N],
) {
    for (name, labels) in maps {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                .expect("cm");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
}

#[tokio::test]
async fn label_and_field_selectors() {
    let env = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    create_labelled_config_maps(
        &api,
        [
            ("a", json!({"app": "web", "tier": "front"})),
            ("b", json!({"app": "db"})),
            ("c", json!({})),
        ],
    )
    .await;
    let names = |l: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    };
    let cases = [
        ("app=web", vec!["a"]),
        ("app!=web", vec!["b", "c"]),
        ("app in (web,db)", vec!["a", "b"]),
        ("app notin (web)", vec!["b", "c"]),
        ("tier", vec!["a"]),
        ("!app", vec!["c"]),
    ];
    for (sel, want) in cases {
        let got = names(
            api.list(&ListParams::default().labels(sel))
                .await
                .expect("list"),
        );
        assert_eq!(got, want, "{sel}");
    }
    let got = names(
        api.list(&ListParams::default().fields("metadata.name=b"))
            .await
            .expect("list"),
    );
    assert_eq!(got, vec!["b"]);
    match api.list(&ListParams::default().labels("app in web")).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 400),
        other => panic!("expected 400, got {other:?}"),
    }
    println!("checked: label selector operators and fieldSelector=metadata.name");
}

/// Whether a plain HTTP list of ConfigMaps is answered within five seconds.
fn list_config_maps_over_a_socket(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut socket) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!(
        "GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut reply = Vec::new();
    socket.write_all(request.as_bytes()).is_ok()
        && socket.read_to_end(&mut reply).is_ok()
        && reply.starts_with(b"HTTP/1.1 200")
}

/// The in-process tally a benchmark stops its clock on: the count of matching objects and
/// the time of the resource's last write, which a read does not move and a write does.
#[tokio::test]
async fn count_where_tallies_matches_and_dates_the_last_write() {
    let env = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    let labelled = |cm: &serde_json::Value| cm.pointer("/metadata/labels/app").is_some();
    let tally = env.server.count_where("", "configmaps", labelled);
    assert_eq!((tally.matching, tally.last_change), (0, None));
    let before = std::time::Instant::now();
    create_labelled_config_maps(&api, [("a", json!({"app": "web"})), ("b", json!({}))]).await;
    let after_creates = std::time::Instant::now();
    let tally = env.server.count_where("", "configmaps", labelled);
    assert_eq!(tally.matching, 1);
    let written = tally.last_change.expect("the creates are dated");
    assert!(before <= written && written <= after_creates, "{tally:?}");
    api.list(&ListParams::default()).await.expect("list");
    let tally = env.server.count_where("", "configmaps", labelled);
    assert_eq!(tally.last_change, Some(written), "a read changes nothing");
    api.delete("b", &DeleteParams::default())
        .await
        .expect("delete");
    let tally = env.server.count_where("", "configmaps", labelled);
    assert!(tally.last_change > Some(after_creates), "{tally:?}");
    // The predicate runs after the store lock is released: a request the server gets
    // meanwhile is answered (under the lock it would wait for the look to end).
    let answered = std::cell::Cell::new(None);
    let tally = env.server.count_where("", "configmaps", |cm| {
        if answered.get().is_none() {
            answered.set(Some(list_config_maps_over_a_socket(env.server.addr())));
        }
        labelled(cm)
    });
    assert_eq!(tally.matching, 1);
    assert_eq!(
        answered.get(),
        Some(true),
        "a list during the look was answered"
    );
    println!("checked: count_where counts matches and dates the last write, not reads");
}

#[tokio::test]
async fn events_are_served_in_both_groups() {
    let env = common::start().await;
    let client = env.client().await;
    let v1: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let ev: EventV1 = serde_json::from_value(json!({
        "metadata": {"generateName": "pv1."},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "regarding": {"kind": "PersistentVolume", "name": "pv1", "apiVersion": "v1"},
        "note": "volume path is malformed", "reason": "InvalidVolumePath", "type": "Warning",
        "action": "Validate", "reportingController": "volmig.io/volmig", "reportingInstance": "volmig-0"
    }))
    .expect("event");
    let created = v1
        .create(&PostParams::default(), &ev)
        .await
        .expect("create events.k8s.io Event");
    let name = created.metadata.name.expect("generated name");
    assert!(name.starts_with("pv1.") && name.len() == 9, "{name}");
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
    let listed = core
        .list(&ListParams::default().fields("involvedObject.name=pv1"))
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
    let e = &listed.items[0];
    assert_eq!(e.message.as_deref(), Some("volume path is malformed"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("PersistentVolume"));
    let table = env.kubectl_ok(&["get", "events"]);
    assert!(
        table.contains("InvalidVolumePath") && table.contains("persistentvolume/pv1"),
        "{table}"
    );
    println!(
        "checked: an events.k8s.io/v1 Event is visible as a core v1 Event (field selector on involvedObject) and in kubectl get events"
    );
}

#[tokio::test]
async fn crd_lifecycle_serves_and_removes_the_resource() {
    let env = common::start().await;
    env.install_crd();
    let ar = kube::api::ApiResource {
        group: "volmig.io".into(),
        version: "v1alpha1".into(),
        api_version: "volmig.io/v1alpha1".into(),
        kind: "VolumeMigration".into(),
        plural: "volumemigrations".into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::all_with(env.client().await, &ar);
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "volmig.io/v1alpha1", "kind": "VolumeMigration",
        "metadata": {"name": "m1"}, "spec": {"volumePath": "[ds] a.vmdk", "junk": true},
        "status": {"phase": "Registered"}
    }))
    .expect("obj");
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    assert!(
        created.data.get("status").is_none(),
        "status is ignored on create with a status subresource"
    );
    assert!(
        created.data["spec"].get("junk").is_none(),
        "unknown fields pruned"
    );
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "volmig.io/v1alpha1", "kind": "VolumeMigration", "metadata": {"name": "m2"}, "spec": {}
    }))
    .expect("obj");
    match api.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert!(
                s.message.contains("spec.volumePath: Required value"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    let bad_status = json!({"status": {"phase": "Bogus", "attempts": "three"}});
    match api
        .patch_status("m1", &PatchParams::default(), &Patch::Merge(bad_status))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.contains("status.phase") && s.message.contains("status.attempts"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    env.kubectl_ok(&["delete", "crd", "volumemigrations.volmig.io"]);
    let res = env.kubectl_ok(&["api-resources"]);
    assert!(!res.contains("volumemigrations"), "{res}");
    match api.get("m1").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404 after the CRD is gone, got {other:?}"),
    }
    println!(
        "checked: CRD create serves the resource (status dropped on create, pruning, 422s); CRD delete removes it"
    );
}

#[tokio::test]
async fn metadata_lists_and_streaming_list_watches() {
    let env = common::start().await;
    let api: Api<PersistentVolume> = Api::all(env.client().await);
    create_pvs(&api, "m", 0..5).await;
    let meta = api
        .list_metadata(&ListParams::default())
        .await
        .expect("metadata list");
    assert_eq!(meta.items.len(), 5);
    assert_eq!(meta.items[0].metadata.name.as_deref(), Some("m-00000"));
    // sendInitialEvents=true: the initial state arrives as ADDED events, then a bookmark.
    let (reader, writer) = reflector::store();
    let cfg = watcher::Config::default().streaming_lists();
    let stream = reflector(writer, watcher(api.clone(), cfg)).default_backoff();
    let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    reader.wait_until_ready().await.expect("initial events");
    assert_eq!(reader.state().len(), 5);
    create_pvs(&api, "n", 0..2).await;
    common::eventually("the new PVs in the cache", || reader.state().len() == 7).await;
    task.abort();
    assert_eq!(
        env.server.stats().count(Verb::List, "persistentvolumes"),
        1,
        "only the metadata list"
    );
    println!(
        "checked: PartialObjectMetadataList, and a streaming-list watcher (sendInitialEvents) without any list"
    );
}

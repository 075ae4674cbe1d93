//! Acceptance tests that drive the real `kubectl` against the in-process server.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::io::{BufRead, BufReader};
use std::time::Duration;

use common::{Env, start, vmig_yaml, vsphere_pv_yaml};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const PATH1: &str = "[LocalDS_0] kubevols/disk-1.vmdk";

fn vmig_api(c: kube::Client) -> Api<kube::api::DynamicObject> {
    let ar = kube::api::ApiResource {
        group: "volmig.io".into(),
        version: "v1alpha1".into(),
        api_version: "volmig.io/v1alpha1".into(),
        kind: "VolumeMigration".into(),
        plural: "volumemigrations".into(),
    };
    Api::all_with(c, &ar)
}

fn columns(line: &str) -> Vec<String> {
    // kubectl separates columns by 3+ spaces; the path column contains single spaces.
    line.split("   ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn apply_vmig(env: &Env, name: &str, path: &str) {
    let f = env.file(&format!("{name}.yaml"), &vmig_yaml(name, path));
    env.kubectl_ok(&["apply", "-f", &f]);
}

#[tokio::test]
async fn crd_apply_get_and_api_resources() {
    let env = start().await;
    let out = env.kubectl_ok(&["apply", "-f", &common::crd_path().display().to_string()]);
    assert!(out.contains("volumemigrations.volmig.io created"), "{out}");
    let crds = env.kubectl_ok(&["get", "crd"]);
    assert!(
        crds.lines()
            .any(|l| l.starts_with("volumemigrations.volmig.io")),
        "{crds}"
    );
    let res = env.kubectl_ok(&["api-resources"]);
    let line = res
        .lines()
        .find(|l| l.starts_with("volumemigrations "))
        .expect("listed");
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cols,
        vec![
            "volumemigrations",
            "vmig",
            "volmig.io/v1alpha1",
            "false",
            "VolumeMigration"
        ]
    );
    let established = env.kubectl_ok(&[
        "get",
        "crd",
        "volumemigrations.volmig.io",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
    ]);
    assert_eq!(established, "True");
    println!(
        "checked: kubectl apply of the CRD, get crd, api-resources row {cols:?}, Established=True"
    );
}

#[tokio::test]
async fn vsphere_pv_apply_and_get() {
    let env = start().await;
    let f = env.file("pv.yaml", &vsphere_pv_yaml("pv-vsphere-1", PATH1));
    let out = env.kubectl_ok(&["apply", "-f", &f]);
    assert!(
        out.contains("persistentvolume/pv-vsphere-1 created"),
        "{out}"
    );
    let table = env.kubectl_ok(&["get", "pv"]);
    let mut lines = table.lines();
    let header = lines.next().expect("header");
    assert!(
        header.starts_with("NAME")
            && header.contains("STATUS")
            && header.trim_end().ends_with("AGE"),
        "{header}"
    );
    let row: Vec<&str> = lines.next().expect("row").split_whitespace().collect();
    assert_eq!(
        &row[..5],
        &["pv-vsphere-1", "5Gi", "RWO", "Retain", "Pending"]
    );
    let path = env.kubectl_ok(&[
        "get",
        "pv",
        "pv-vsphere-1",
        "-o",
        "jsonpath={.spec.vsphereVolume.volumePath}",
    ]);
    assert_eq!(path, PATH1);
    // Re-applying the same manifest changes nothing.
    let again = env.kubectl_ok(&["apply", "-f", &f]);
    assert!(again.contains("unchanged"), "{again}");
    println!(
        "checked: in-tree vSphere PV applied, listed by kubectl get pv ({row:?}), path kept, re-apply unchanged"
    );
}

#[tokio::test]
async fn volumemigration_columns_yaml_round_trip_and_explain() {
    let env = start().await;
    env.install_crd();
    let f = env.file("vm.yaml", &vmig_yaml("disk-1-abcdef12", PATH1));
    env.kubectl_ok(&["create", "-f", &f]);
    env.kubectl_ok(&[
        "patch", "vmig", "disk-1-abcdef12", "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"phase":"Registered","volumeID":"vol-123","persistentVolumes":["pv-a","pv-b"],"attempts":2,"lastError":{"reason":"BackendUnavailable","message":"earlier attempt","time":"2026-01-01T00:00:00Z"}}}"#,
    ]);
    for resource in ["volumemigrations", "vmig"] {
        let out = env.kubectl_ok(&["get", resource]);
        let mut lines = out.lines();
        assert_eq!(
            columns(lines.next().expect("header")),
            vec![
                "NAME",
                "PATH",
                "VOLUME-ID",
                "PHASE",
                "PV",
                "ATTEMPTS",
                "REASON",
                "AGE"
            ]
        );
        let row = columns(lines.next().expect("row"));
        assert_eq!(
            &row[..7],
            &[
                "disk-1-abcdef12",
                PATH1,
                "vol-123",
                "Registered",
                "pv-a,pv-b",
                "2",
                "BackendUnavailable"
            ]
        );
        assert!(row[7].ends_with('s'), "age {:?}", row[7]);
        println!("checked: kubectl get {resource} columns {row:?}");
    }
    // -o yaml round-trips: what kubectl prints is the stored object, and replacing with it
    // changes nothing.
    let yaml = env.kubectl_ok(&["get", "vmig", "disk-1-abcdef12", "-o", "yaml"]);
    let printed: Value = serde_saphyr::from_str(&yaml).expect("yaml");
    let stored = env.kubectl_ok(&[
        "get",
        "vmig",
        "disk-1-abcdef12",
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    let mut stored: Value = serde_json::from_str(&stored).expect("json");
    stored["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("managedFields");
    assert_eq!(printed, stored);
    let f = env.file("roundtrip.yaml", &yaml);
    let out = env.kubectl_ok(&["replace", "-f", &f]);
    assert!(out.contains("replaced"), "{out}");
    let after: Value =
        serde_json::from_str(&env.kubectl_ok(&["get", "vmig", "disk-1-abcdef12", "-o", "json"]))
            .expect("json");
    assert_eq!(
        after["metadata"]["resourceVersion"], printed["metadata"]["resourceVersion"],
        "no-op replace keeps the version"
    );
    assert_eq!(after["status"]["volumeID"], "vol-123");
    let explain = env.kubectl_ok(&["explain", "volumemigrations.spec"]);
    assert!(
        explain.contains("KIND:") && explain.contains("VolumeMigration"),
        "{explain}"
    );
    assert!(
        explain.contains("volumePath") && explain.contains("-required-"),
        "{explain}"
    );
    let explain_pv = env.kubectl_ok(&["explain", "pv.spec.vsphereVolume"]);
    assert!(explain_pv.contains("volumePath"), "{explain_pv}");
    println!(
        "checked: -o yaml round trip (replace is a no-op), kubectl explain for the CRD and for PVs"
    );
}

#[tokio::test]
async fn status_subresource_and_immutable_path() {
    let env = start().await;
    env.install_crd();
    apply_vmig(&env, "vm1", PATH1);
    let get = |env: &Env| -> Value {
        serde_json::from_str(&env.kubectl_ok(&["get", "vmig", "vm1", "-o", "json"])).expect("json")
    };
    let before = get(&env);
    env.kubectl_ok(&[
        "patch",
        "vmig",
        "vm1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"spec":{"volumePath":"[other] x.vmdk"},"status":{"phase":"Registering"}}"#,
    ]);
    let after = get(&env);
    assert_eq!(after["status"]["phase"], "Registering");
    assert_eq!(
        after["spec"], before["spec"],
        "a status patch cannot change spec"
    );
    assert_eq!(
        after["metadata"]["generation"],
        before["metadata"]["generation"]
    );
    let out = env.kubectl_ok(&[
        "patch",
        "vmig",
        "vm1",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Failed"}}"#,
    ]);
    assert!(out.contains("no change"), "{out}");
    assert_eq!(
        get(&env)["status"]["phase"],
        "Registering",
        "a main-resource patch cannot change status"
    );
    let err = env.kubectl_err(&[
        "patch",
        "vmig",
        "vm1",
        "--type=merge",
        "-p",
        r#"{"spec":{"volumePath":"[x] y.vmdk"}}"#,
    ]);
    assert!(
        err.contains("is invalid")
            && err.contains("spec.volumePath")
            && err.contains("volumePath is immutable"),
        "{err}"
    );
    let raw = env.kubectl(&[
        "patch",
        "vmig",
        "vm1",
        "--type=merge",
        "-p",
        r#"{"spec":{"volumePath":"[x] y.vmdk"}}"#,
        "-v=8",
    ]);
    let log = String::from_utf8_lossy(&raw.stderr);
    assert!(
        log.contains("422 Unprocessable Entity"),
        "status code shown in the verbose log"
    );
    assert_eq!(get(&env)["spec"]["volumePath"], PATH1);
    let err = env.kubectl_err(&[
        "patch",
        "vmig",
        "vm1",
        "--type=merge",
        "-p",
        r#"{"spec":{"volumePath":null}}"#,
    ]);
    assert!(err.contains("spec.volumePath: Required value"), "{err}");
    println!(
        "checked: status patch only changes status, main patch ignores status, volumePath change -> 422 naming the field"
    );
}

#[tokio::test]
async fn get_watch_prints_update_from_another_client() {
    let env = start().await;
    env.install_crd();
    apply_vmig(&env, "watched", PATH1);
    let mut child = env
        .kubectl_cmd(&["get", "vmig", "-w", "--request-timeout=30s"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(20)).expect("header");
    assert!(first.starts_with("NAME"), "{first}");
    let initial = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("initial row");
    assert!(initial.starts_with("watched"), "{initial}");
    // The other client: kube-rs.
    let api = vmig_api(env.client().await);
    api.patch_status(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Registered", "volumeID": "vol-77"}})),
    )
    .await
    .expect("status patch");
    let update = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("update line");
    let _ = child.kill();
    let _ = child.wait();
    let cols = columns(&update);
    assert_eq!(cols[0], "watched");
    assert!(
        cols.contains(&"vol-77".to_string()) && cols.contains(&"Registered".to_string()),
        "{update}"
    );
    println!("checked: kubectl get vmig -w printed the update {cols:?}");
}

#[tokio::test]
async fn delete_with_finalizer_waits_for_its_removal() {
    let env = start().await;
    env.install_crd();
    apply_vmig(&env, "held", PATH1);
    env.kubectl_ok(&[
        "patch",
        "vmig",
        "held",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["volmig.io/registration"]}}"#,
    ]);
    let out = env.kubectl_ok(&["delete", "vmig", "held", "--wait=false"]);
    assert!(out.contains("deleted"), "{out}");
    let ts = env.kubectl_ok(&[
        "get",
        "vmig",
        "held",
        "-o",
        "jsonpath={.metadata.deletionTimestamp}",
    ]);
    assert!(
        ts.ends_with('Z') && ts.len() == 20,
        "deletionTimestamp {ts:?}"
    );
    // A blocking `kubectl delete` waits until the finalizer is removed.
    let mut waiting = env
        .kubectl_cmd(&["delete", "vmig", "held", "--timeout=30s"])
        .spawn()
        .expect("kubectl delete");
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        waiting.try_wait().expect("poll").is_none(),
        "kubectl delete must wait for the finalizer"
    );
    env.kubectl_ok(&["get", "vmig", "held"]);
    env.kubectl_ok(&[
        "patch",
        "vmig",
        "held",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    let status = waiting.wait().expect("kubectl delete ends");
    assert!(status.success());
    let err = env.kubectl_err(&["get", "vmig", "held"]);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    println!(
        "checked: delete leaves the object with deletionTimestamp {ts} until the finalizer goes; kubectl delete waited"
    );
}

#[tokio::test]
async fn dry_run_server_validates_without_storing() {
    let env = start().await;
    let deploy = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: volmig
  namespace: default
spec:
  replicas: 2
  selector: {matchLabels: {app: volmig}}
  template:
    metadata: {labels: {app: volmig}}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: volmig
        image: volmig:dev
        securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        livenessProbe: {httpGet: {path: /healthz, port: 8080}}
"#;
    let f = env.file("deploy.yaml", deploy);
    let out = env.kubectl_ok(&["apply", "--dry-run=server", "-f", &f]);
    assert!(out.contains("(server dry run)"), "{out}");
    let err = env.kubectl_err(&["get", "deployment", "volmig"]);
    assert!(err.contains("not found"), "{err}");
    let bad = deploy.replace("replicas: 2", "replicas: 2\n  bogusField: 1");
    let f = env.file("bad.yaml", &bad);
    let err = env.kubectl_err(&["apply", "--dry-run=server", "-f", &f]);
    assert!(
        err.contains("unknown field") && err.contains("bogusField"),
        "{err}"
    );
    let stats = env.server.stats();
    assert_eq!(stats.writes, 0, "dry runs write nothing");
    assert!(stats.dry_run_writes >= 1);
    env.kubectl_ok(&["apply", "-f", &env.file("real.yaml", deploy)]);
    let replicas = env.kubectl_ok(&["get", "deploy", "volmig", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas, "2");
    println!(
        "checked: apply --dry-run=server accepted without storing, unknown field rejected, real apply stored"
    );
}

#[tokio::test]
async fn namespaced_kinds_and_namespace_deletion() {
    let env = start().await;
    env.kubectl_ok(&["create", "namespace", "volmig"]);
    env.kubectl_ok(&[
        "-n",
        "volmig",
        "create",
        "configmap",
        "cfg",
        "--from-literal=a=b",
    ]);
    env.kubectl_ok(&[
        "-n",
        "volmig",
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=password=hunter2",
    ]);
    env.kubectl_ok(&["-n", "volmig", "create", "serviceaccount", "volmig"]);
    let err = env.kubectl_err(&["-n", "nope", "create", "configmap", "x"]);
    assert!(err.contains("namespaces \"nope\" not found"), "{err}");
    let secrets = env.kubectl_ok(&["-n", "volmig", "get", "secrets"]);
    assert!(
        secrets.contains("creds") && secrets.contains("Opaque"),
        "{secrets}"
    );
    env.kubectl_ok(&["delete", "namespace", "volmig"]);
    let err = env.kubectl_err(&["get", "namespace", "volmig"]);
    assert!(err.contains("not found"), "{err}");
    let left = env.kubectl_ok(&["get", "configmaps", "-A", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");
    println!(
        "checked: namespaced kinds need an existing namespace; deleting the namespace removes its contents"
    );
}

#[tokio::test]
async fn older_kubectl_releases_work_too() {
    // The kubectl dispatcher runs the bundled client nearest to the server's /version.
    for minor in [27u32, 30] {
        let env = common::start_with(kube_testserver::Options {
            kube_version: (1, minor),
            ..Default::default()
        })
        .await;
        let version = env.kubectl_ok(&["version", "--client", "-o", "json"]);
        let v: Value = serde_json::from_str(&version).expect("version json");
        assert_eq!(v["clientVersion"]["minor"], minor.to_string(), "{version}");
        env.install_crd();
        apply_vmig(&env, "old", PATH1);
        env.kubectl_ok(&[
            "apply",
            "-f",
            &env.file("pv.yaml", &vsphere_pv_yaml("pv1", PATH1)),
        ]);
        env.kubectl_ok(&[
            "patch",
            "vmig",
            "old",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Failed"}}"#,
        ]);
        let out = env.kubectl_ok(&["get", "vmig"]);
        let mut lines = out.lines();
        assert_eq!(
            columns(lines.next().expect("header"))[..4],
            ["NAME", "PATH", "VOLUME-ID", "PHASE"]
        );
        assert!(lines.next().expect("row").contains("Failed"), "{out}");
        let err = env.kubectl_err(&[
            "patch",
            "vmig",
            "old",
            "--type=merge",
            "-p",
            r#"{"spec":{"volumePath":"[x] y.vmdk"}}"#,
        ]);
        assert!(err.contains("volumePath is immutable"), "{err}");
        println!("checked: kubectl 1.{minor}: apply, status patch, printer columns, 422");
    }
}

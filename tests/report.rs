//! End-to-end tests of `volmig report` and `volmig lookup --pv` (docs/design.md §3.2): the real
//! binary against the Kubernetes API test server (or `VOLMIG_E2E_KUBECONFIG`), over a mixed cluster
//! written directly with the test client — Registered, Failed with each reason, an invalid path, a
//! PV without VolumeMigration, NFS PVs, and the vSphere CSI driver's `CnsVSphereVolumeMigration`
//! objects once its CRD is installed.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::path::Path;
use std::time::Duration;

use e2e::{Cluster, wait_for};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use volmig::VolumePath;
use volmig::volume_migration::{VolumeMigration, VolumeMigrationSpec};

/// `[/DC0/datastore/LocalDS_0] kubevols//a.vmdk`: a non-canonical spelling, so the driver
/// object must carry this raw string, not the canonical one.
const RAW_A: &str = "[/DC0/datastore/LocalDS_0] kubevols//a.vmdk";
const PATH_B: &str = "[LocalDS_0] kubevols/b.vmdk";
const PATH_C: &str = "[LocalDS_0] kubevols/c.vmdk";
const PATH_D: &str = "[LocalDS_0] kubevols/d.vmdk";
const PATH_E: &str = "[LocalDS_0] kubevols/e.vmdk";
const INVALID: &str = "kubevols/no-datastore.vmdk";

/// NFS PVs: more than two list pages together with the vSphere ones.
const NFS_PVS: usize = 1100;

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the real `volmig` binary with `args`; the kubeconfig comes from `KUBECONFIG`.
async fn volmig(kubeconfig: &Path, args: &[&str]) -> Output {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_volmig"))
        .args(args)
        .env_remove("VOLMIG_KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", kubeconfig)
        .env("VOLMIG_LOG", "warn")
        .output()
        .await
        .expect("run volmig");
    Output {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

async fn report_json(cluster: &Cluster, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["report", "-o", "json"];
    args.extend(extra);
    let out = volmig(&cluster.kubeconfig, &args).await;
    let value: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("report JSON does not parse: {e}\n{}", out.stdout));
    (out.code, value)
}

fn row<'a>(report: &'a Value, pv: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["pv"] == pv)
        .unwrap_or_else(|| panic!("no row for {pv}: {report:#}"))
}

async fn create_migration(cluster: &Cluster, raw: &str, status: Value) {
    let path = VolumePath::parse(raw).unwrap();
    let name = path.object_name();
    let vm = VolumeMigration::new(
        &name,
        VolumeMigrationSpec {
            volume_path: path.canonical(),
            storage_policy_name: None,
        },
    );
    let api = cluster.migrations();
    api.create(&PostParams::default(), &vm).await.unwrap();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn failed(reason: &str, message: &str) -> Value {
    json!({
        "phase": "Failed",
        "attempts": 2,
        "lastError": {"reason": reason, "message": message, "time": "2025-01-01T00:00:00Z"},
    })
}

fn registered(id: &str) -> Value {
    json!({"phase": "Registered", "volumeID": id})
}

fn driver_resource() -> ApiResource {
    ApiResource {
        group: "cns.vmware.com".into(),
        version: "v1alpha1".into(),
        api_version: "cns.vmware.com/v1alpha1".into(),
        kind: "CnsVSphereVolumeMigration".into(),
        plural: "cnsvspherevolumemigrations".into(),
    }
}

async fn install_driver_crd(cluster: &Cluster) {
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cnsvspherevolumemigrations.yaml"
    ))
    .unwrap();
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&yaml).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let api: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &driver_resource());
    wait_for(Duration::from_secs(30), "driver CRD served", || async {
        api.list(&Default::default()).await.ok().map(|_| ())
    })
    .await;
}

async fn create_driver_object(cluster: &Cluster, name: &str, raw: &str, id: &str) {
    let api: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &driver_resource());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cns.vmware.com/v1alpha1",
        "kind": "CnsVSphereVolumeMigration",
        "metadata": {"name": name},
        "spec": {"volumepath": raw, "volumeid": id, "protectvolumefromvmdelete": true},
    }))
    .unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// docs/design.md §8.9: a pod naming a vmdk inline (no PV) is a row of its own, named
/// `pod/<namespace>/<pod>/<volume>`, and holds the verdict back until its path is Registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_pod_volumes_are_rows_of_the_report() {
    let cluster = Cluster::start().await;
    cluster.create_pv("pv-b", PATH_B).await;
    create_migration(&cluster, PATH_B, registered("id-b")).await;
    cluster.create_pod("web-0", PATH_C).await;
    let required = ["--require-driver-cache", "off"];

    let (code, report) = report_json(&cluster, &required).await;
    assert_eq!(code, 1, "{report:#}");
    let pod = row(&report, "pod/default/web-0/data");
    assert_eq!(pod["reason"], "NoVolumeMigration", "{pod:#}");
    assert_eq!(pod["volumePath"], PATH_C);
    assert_eq!(report["inlinePodVolumes"], json!({"count": 1}));
    assert_eq!(report["persistentVolumes"]["inTree"], 1, "PVs count apart");

    create_migration(&cluster, PATH_C, registered("id-c")).await;
    let out = volmig(
        &cluster.kubeconfig,
        &["report", "--require-driver-cache", "off"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout.contains("\nInline pod volumes: 1\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("READY: all 1 in-tree vSphere PVs and 1 inline pod volumes are Registered"),
        "{}",
        out.stdout
    );
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("pod/default/web-0/data "))
        .expect("the pod's row in the table");
    assert!(line.contains("id-c"), "{line}");
}

/// A small RFC 4180 reader (quoted fields may hold `,`, doubled `"` and line breaks).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => {
                quoted = false;
                assert!(
                    matches!(chars.peek(), None | Some(',' | '\r' | '\n')),
                    "text after a closing quote"
                );
            }
            (true, other) => field.push(other),
            (false, '"') => {
                assert!(field.is_empty(), "quote inside an unquoted field");
                quoted = true;
            }
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, other) => field.push(other),
        }
    }
    assert!(!quoted, "unterminated quoted field");
    assert!(
        field.is_empty() && record.is_empty(),
        "last record without line end"
    );
    records
}

/// Reads the count of `verb` requests on `resource` at the test server.
fn requests(cluster: &Cluster, verb: kube_testserver::Verb, resource: &str) -> Option<u64> {
    cluster
        .server
        .as_ref()
        .map(|s| s.stats().count(verb, resource))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_and_lookup_over_a_mixed_cluster() {
    let cluster = Cluster::start_test_server().await;
    let kc = cluster.kubeconfig.clone();

    cluster.create_pv("pv-a-published", RAW_A).await;
    cluster.create_pv("pv-b-unpublished", PATH_B).await;
    cluster.create_pv("pv-c-disk-not-found", PATH_C).await;
    cluster.create_pv("pv-d-invalid-login", PATH_D).await;
    cluster.create_pv("pv-e-no-migration", PATH_E).await;
    cluster.create_pv("pv-f-invalid-path", INVALID).await;
    futures::stream::iter(0..NFS_PVS)
        .map(|i| {
            let cluster = &cluster;
            async move { cluster.create_nfs_pv(&format!("nfs-{i:04}")).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    create_migration(&cluster, RAW_A, registered("id-a")).await;
    create_migration(&cluster, PATH_B, registered("id-b")).await;
    create_migration(
        &cluster,
        PATH_C,
        failed(
            "DiskNotFound",
            "disk [LocalDS_0] kubevols/c.vmdk not found, \"File not found\"",
        ),
    )
    .await;
    create_migration(
        &cluster,
        PATH_D,
        failed(
            "InvalidLogin",
            "Cannot complete login due to an incorrect user name or password.",
        ),
    )
    .await;

    // --- without the driver's CRD: auto does not require publication ---
    let writes_before = cluster.writes();
    let pv_lists_before = requests(&cluster, kube_testserver::Verb::List, "persistentvolumes");
    let (code, report) = report_json(&cluster, &[]).await;
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["ready"], false);
    assert_eq!(report["persistentVolumes"]["inTree"], 6);
    assert_eq!(report["persistentVolumes"]["ignored"], NFS_PVS);
    assert_eq!(report["volumeMigrations"], 4);
    assert_eq!(report["driverCache"]["served"], false);
    assert_eq!(report["driverCache"]["required"], false);
    assert_eq!(report["notReady"], 4);
    assert_eq!(
        report["totals"]["byPhase"],
        json!({"<none>": 2, "Failed": 2, "Registered": 2})
    );
    assert_eq!(
        report["totals"]["byReason"],
        json!({"DiskNotFound": 1, "InvalidLogin": 1, "InvalidVolumePath": 1, "NoVolumeMigration": 1})
    );
    let a = row(&report, "pv-a-published");
    assert_eq!(a["volumePath"], RAW_A);
    assert_eq!(a["canonicalPath"], "[LocalDS_0] kubevols/a.vmdk");
    assert_eq!(a["phase"], "Registered");
    assert_eq!(a["volumeID"], "id-a");
    assert_eq!(a["driverObject"], Value::Null);
    assert_eq!(a["ready"], true);
    let c = row(&report, "pv-c-disk-not-found");
    assert_eq!(c["reason"], "DiskNotFound");
    assert_eq!(
        c["message"],
        "disk [LocalDS_0] kubevols/c.vmdk not found, \"File not found\""
    );
    assert_eq!(row(&report, "pv-d-invalid-login")["reason"], "InvalidLogin");
    let e = row(&report, "pv-e-no-migration");
    assert_eq!(e["reason"], "NoVolumeMigration");
    assert_eq!(e["phase"], Value::Null);
    let f = row(&report, "pv-f-invalid-path");
    assert_eq!(f["reason"], "InvalidVolumePath");
    assert_eq!(f["canonicalPath"], Value::Null);
    assert!(f["pathError"].as_str().unwrap().contains("[datastore]"));
    assert_eq!(
        report["rows"].as_array().unwrap().len(),
        6,
        "NFS PVs get no row"
    );
    if let (Some(before), Some(after)) = (
        pv_lists_before,
        requests(&cluster, kube_testserver::Verb::List, "persistentvolumes"),
    ) {
        // 1106 PVs at 500 a page: three pages, no per-PV request
        assert_eq!(after - before, 3, "paged PV list");
        assert_eq!(
            requests(&cluster, kube_testserver::Verb::Get, "persistentvolumes"),
            Some(0)
        );
    }

    // --- --require-driver-cache=on without the CRD: nothing is published ---
    let (code, report) = report_json(&cluster, &["--require-driver-cache", "on"]).await;
    assert_eq!(code, 1);
    assert_eq!(report["driverCache"]["required"], true);
    assert_eq!(report["notReady"], 6);
    let b = row(&report, "pv-b-unpublished");
    assert_eq!(b["reason"], "NotPublished");
    assert!(b["message"].as_str().unwrap().contains("not served"));

    // --- lookup --pv ---
    let out = volmig(&kc, &["lookup", "--pv", "pv-a-published"]).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "id-a\n"),
        "{}",
        out.stderr
    );
    let out = volmig(&kc, &["lookup", "--pv", "pv-c-disk-not-found"]).await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("not registered yet") && out.stderr.contains("Failed"));
    assert!(out.stdout.is_empty());
    let out = volmig(&kc, &["lookup", "--pv", "pv-e-no-migration"]).await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    let out = volmig(&kc, &["lookup", "--pv", "nfs-0001"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("nfs-0001 is not an in-tree vSphere volume"),
        "{}",
        out.stderr
    );
    let out = volmig(&kc, &["lookup", "--pv", "no-such-pv"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("PersistentVolume no-such-pv not found"),
        "{}",
        out.stderr
    );
    let out = volmig(&kc, &["lookup", "--pv", "pv-f-invalid-path"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("[datastore]"), "{}", out.stderr);
    let out = volmig(&kc, &["lookup", "--pv", "pv-a-published", PATH_B]).await;
    assert_eq!(out.code, 2, "path and --pv together: {}", out.stderr);
    let out = volmig(&kc, &["lookup"]).await;
    assert_eq!(out.code, 2, "neither path nor --pv: {}", out.stderr);
    // the path form still works
    let out = volmig(&kc, &["lookup", PATH_B]).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "id-b\n"),
        "{}",
        out.stderr
    );

    assert_eq!(
        cluster.writes(),
        writes_before,
        "report and lookup never write"
    );

    // --- the driver's CRD is served: auto requires publication of the RAW path ---
    install_driver_crd(&cluster).await;
    create_driver_object(&cluster, "id-a", RAW_A, "id-a").await;
    // a driver object for B's canonical path but another ID does not count
    create_driver_object(&cluster, "id-b-other", PATH_B, "id-b-other").await;

    let writes_mid = cluster.writes();
    let out = volmig(&kc, &["report"]).await;
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let table = out.stdout;
    assert!(
        table.starts_with(&format!(
            "PersistentVolumes: 6 in-tree vSphere, {NFS_PVS} other (ignored), {} in all; \
             VolumeMigrations: 4\nDriver cache: 2 CnsVSphereVolumeMigration objects; \
             publication required\n",
            NFS_PVS + 6
        )),
        "{table}"
    );
    let line = |pv: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{pv} ")))
            .unwrap_or_else(|| panic!("no line for {pv}:\n{table}"))
            .split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect()
    };
    assert_eq!(
        line("pv-a-published")[..6],
        [
            "pv-a-published",
            RAW_A,
            "[LocalDS_0] kubevols/a.vmdk",
            "Registered",
            "id-a",
            "yes"
        ]
    );
    let b = line("pv-b-unpublished");
    assert_eq!(b[3..7], ["Registered", "id-b", "no", "NotPublished"]);
    assert!(b[7].contains("id-b-other holds id-b-other"), "{b:?}");
    assert_eq!(line("pv-c-disk-not-found")[3..6], ["Failed", "-", "no"]);
    assert!(
        table.contains("By phase: <none>=2 Failed=2 Registered=2\n"),
        "{table}"
    );
    assert!(
        table.contains(
            "By reason: DiskNotFound=1 InvalidLogin=1 InvalidVolumePath=1 NoVolumeMigration=1 \
             NotPublished=1\n"
        ),
        "{table}"
    );
    for (reason, what) in [
        ("DiskNotFound", "the vmdk is missing"),
        ("InvalidLogin", "fix the vCenter credentials"),
        ("InvalidVolumePath", "fix the PV spec"),
        ("NoVolumeMigration", "volmig run"),
        ("NotPublished", "--publish-driver-cache"),
    ] {
        let advice = table
            .lines()
            .find(|l| l.starts_with(&format!("  {reason} (1 PV, 1 blocking): ")))
            .unwrap_or_else(|| panic!("no advice for {reason}:\n{table}"));
        assert!(advice.contains(what), "{advice}");
    }
    assert!(
        table.ends_with(
            "\nNOT READY: 5 of 6 in-tree vSphere PVs are not Registered and published to the \
             vSphere CSI driver\n"
        ),
        "{table}"
    );
    assert!(!table.contains("nfs-0"), "NFS PVs are not listed");

    // CSV: parses, one record per in-tree PV
    let out = volmig(&kc, &["report", "-o", "csv"]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("NOT READY: 5 of 6"), "{}", out.stderr);
    let records = parse_csv(&out.stdout);
    assert_eq!(
        records[0],
        [
            "pv",
            "volume_path",
            "canonical_path",
            "path_error",
            "phase",
            "volume_id",
            "driver_object",
            "reason",
            "message",
            "ready"
        ]
    );
    assert_eq!(records.len(), 7);
    assert!(records[1..].iter().all(|r| r.len() == 10));
    let csv_row = |pv: &str| records.iter().find(|r| r[0] == pv).unwrap().clone();
    assert_eq!(
        csv_row("pv-a-published")[4..],
        ["Registered", "id-a", "true", "", "", "true"]
    );
    assert_eq!(csv_row("pv-b-unpublished")[6..8], ["false", "NotPublished"]);
    assert_eq!(
        csv_row("pv-c-disk-not-found")[8],
        "disk [LocalDS_0] kubevols/c.vmdk not found, \"File not found\""
    );
    assert_eq!(csv_row("pv-f-invalid-path")[2], "");
    assert!(!csv_row("pv-f-invalid-path")[3].is_empty());

    // --not-ready lists only the blocking rows
    let out = volmig(&kc, &["report", "-o", "csv", "--not-ready"]).await;
    assert_eq!(out.code, 1);
    let names: Vec<String> = parse_csv(&out.stdout)[1..]
        .iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(
        names,
        [
            "pv-b-unpublished",
            "pv-c-disk-not-found",
            "pv-d-invalid-login",
            "pv-e-no-migration",
            "pv-f-invalid-path"
        ]
    );

    // off: the driver objects are not read and not required
    let (code, report) = report_json(&cluster, &["--require-driver-cache=off"]).await;
    assert_eq!(code, 1);
    assert_eq!(report["driverCache"]["served"], Value::Null);
    assert_eq!(row(&report, "pv-b-unpublished")["ready"], true);
    assert_eq!(report["notReady"], 4);

    assert_eq!(cluster.writes(), writes_mid, "report never writes");

    // --- fix everything: exit 0 ---
    for pv in [
        "pv-c-disk-not-found",
        "pv-d-invalid-login",
        "pv-e-no-migration",
        "pv-f-invalid-path",
    ] {
        cluster.delete_pv(pv).await;
    }
    create_driver_object(&cluster, "id-b", PATH_B, "id-b").await;
    let out = volmig(&kc, &["report"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.ends_with(
            "\nREADY: all 2 in-tree vSphere PVs are Registered and published to the vSphere CSI \
             driver\n"
        ),
        "{}",
        out.stdout
    );
    let (code, report) = report_json(&cluster, &[]).await;
    assert_eq!(code, 0);
    assert_eq!(report["ready"], true);
    assert_eq!(report["advice"], json!([]));
    // ... unless publication is turned into a requirement the cluster cannot meet: it can
    // (the CRD is served), so `on` agrees with `auto` here
    let (code, _) = report_json(&cluster, &["--require-driver-cache", "on"]).await;
    assert_eq!(code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_exits_2_on_usage_and_connection_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");

    // a kubeconfig that does not exist
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_volmig"))
        .args(["report", "--kubeconfig"])
        .arg(&missing)
        .env_remove("VOLMIG_KUBECONFIG")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error:") && stderr.contains("kubeconfig"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    // an API server that does not answer
    let port = e2e::free_port();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    \
             user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .unwrap();
    let out = volmig(&kubeconfig, &["report"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("error: listing"), "{}", out.stderr);
    assert!(out.stdout.is_empty());

    // usage errors
    for args in [
        &["report", "-o", "xml"][..],
        &["report", "--require-driver-cache", "maybe"],
        &["report", "extra-argument"],
    ] {
        let out = volmig(&kubeconfig, args).await;
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
    }
}

const DRIVER_NAMESPACE: &str = "vmware-system-csi";
const SYNCER_LEASE: &str = "vsphere-syncer";
const SYNCER_HOLDER: &str = "vsphere-csi-controller-abc";

/// The line of the table that starts with `Registrar: `.
fn registrar_line(table: &str) -> &str {
    table
        .lines()
        .find(|l| l.starts_with("Registrar: "))
        .unwrap_or_else(|| panic!("no Registrar line:\n{table}"))
}

/// Plays the CSI driver's syncer leading: its namespace and a Lease held by
/// [`SYNCER_HOLDER`], renewed now, for 30 s.
async fn create_syncer_lease(cluster: &Cluster) {
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": DRIVER_NAMESPACE}})).unwrap();
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create namespace {DRIVER_NAMESPACE}: {e}"),
    }
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), DRIVER_NAMESPACE);
    let now = MicroTime(jiff::Timestamp::now());
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": SYNCER_LEASE},
        "spec": {
            "holderIdentity": SYNCER_HOLDER,
            "leaseDurationSeconds": 30,
            "acquireTime": now,
            "renewTime": now,
        }
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_names_the_registrar_from_the_driver_syncer_lease() {
    let cluster = Cluster::start_test_server().await;
    let kc = cluster.kubeconfig.clone();
    cluster.create_pv("pv-b", PATH_B).await;
    create_migration(&cluster, PATH_B, registered("id-b")).await;

    // --- no syncer Lease: volmig registers ---
    let out = volmig(&kc, &["report"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let line = registrar_line(&out.stdout);
    assert!(line.starts_with("Registrar: own — "), "{line}");
    assert!(
        line.contains(&format!("{DRIVER_NAMESPACE}/{SYNCER_LEASE}")),
        "{line}"
    );
    let (code, report) = report_json(&cluster, &[]).await;
    assert_eq!(code, 0);
    assert_eq!(report["registrar"]["mode"], "own", "{report:#}");
    assert_eq!(report["registrar"]["holder"], Value::Null);

    // --- the driver's syncer leads: volmig follows ---
    create_syncer_lease(&cluster).await;
    let writes = cluster.writes();
    let out = volmig(&kc, &["report"]).await;
    assert_eq!(
        out.code, 0,
        "the exit code is the PVs' only: {}",
        out.stderr
    );
    let line = registrar_line(&out.stdout);
    assert!(line.starts_with("Registrar: follow — "), "{line}");
    assert!(line.contains(SYNCER_HOLDER), "{line}");
    assert!(
        line.contains(&format!("Lease {DRIVER_NAMESPACE}/{SYNCER_LEASE}")),
        "{line}"
    );
    assert!(line.contains("30 s"), "{line}");
    assert!(
        out.stdout
            .starts_with("PersistentVolumes: 1 in-tree vSphere, 0 other (ignored), 1 in all"),
        "the registrar line comes after the summary:\n{}",
        out.stdout
    );
    let (code, report) = report_json(&cluster, &[]).await;
    assert_eq!(code, 0);
    let registrar = &report["registrar"];
    assert_eq!(registrar["mode"], "follow", "{report:#}");
    assert_eq!(registrar["holder"], SYNCER_HOLDER);
    assert_eq!(registrar["leaseDurationSeconds"], 30);
    assert!(registrar["renewTime"].as_str().is_some(), "{registrar:#}");
    assert!(
        registrar["why"].as_str().unwrap().contains(SYNCER_HOLDER),
        "{registrar:#}"
    );
    // CSV stays rows only
    let out = volmig(&kc, &["report", "-o", "csv"]).await;
    assert_eq!(out.code, 0);
    assert!(!out.stdout.contains("Registrar") && !out.stdout.contains(SYNCER_HOLDER));
    assert_eq!(parse_csv(&out.stdout).len(), 2);
    assert_eq!(cluster.writes(), writes, "reading the Lease writes nothing");

    // --- the flags (and their environment variables) name another Lease: none there ---
    let out = volmig(&kc, &["report", "--driver-syncer-lease", "no-such-lease"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = registrar_line(&out.stdout);
    assert!(line.starts_with("Registrar: own — "), "{line}");
    assert!(line.contains("vmware-system-csi/no-such-lease"), "{line}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_volmig"))
        .args(["report", "-o", "json"])
        .env_remove("VOLMIG_KUBECONFIG")
        .env("KUBECONFIG", &kc)
        .env("VOLMIG_DRIVER_NAMESPACE", "no-such-namespace")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["registrar"]["mode"], "own", "{report:#}");
    assert!(
        report["registrar"]["why"]
            .as_str()
            .unwrap()
            .contains("no-such-namespace/vsphere-syncer"),
        "{report:#}"
    );

    // --- a Lease that stopped being renewed: volmig registers ---
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), DRIVER_NAMESPACE);
    let an_hour_ago = MicroTime(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1));
    leases
        .patch(
            SYNCER_LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewTime": an_hour_ago}})),
        )
        .await
        .unwrap();
    let out = volmig(&kc, &["report"]).await;
    assert_eq!(out.code, 0);
    let line = registrar_line(&out.stdout);
    assert!(line.starts_with("Registrar: own — "), "{line}");
    assert!(line.contains("expired at"), "{line}");

    // --- an identity that may not read that Lease: said, not a failure ---
    if cluster.daemon_kubeconfig != cluster.kubeconfig {
        // the chart's Role reads the one Lease `vsphere-syncer` by name
        let out = volmig(
            &cluster.daemon_kubeconfig,
            &["report", "--driver-syncer-lease", "another-lease"],
        )
        .await;
        assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
        let line = registrar_line(&out.stdout);
        assert!(line.starts_with("Registrar: unknown — "), "{line}");
        assert!(line.contains("403"), "{line}");
    }
}

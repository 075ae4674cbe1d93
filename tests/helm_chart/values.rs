//! Credentials handling and refusal of contradictory values.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::json;

use crate::helm::{self, render, template};

#[test]
fn credentials_never_appear_in_args_or_env() {
    let username = "svc-volmig@vsphere.local";
    let password = "Pa55: w0rd{with},\"quotes\" & #hash";
    let dir = tempfile::tempdir().expect("tempdir");
    let values = dir.path().join("values.yaml");
    let doc = json!({"vcenter": {"credentials": {"username": username, "password": password}}});
    std::fs::write(&values, doc.to_string()).expect("write values");
    let rendered = render(&["--values", values.to_str().expect("utf-8")]);

    let deployment = rendered.deployment().to_string();
    for secret in [password, username] {
        assert!(
            !deployment.contains(secret),
            "{secret:?} appears in the Deployment"
        );
        let encoded =
            serde_json::to_string(&ByteString(secret.as_bytes().to_vec())).expect("base64-encode");
        assert!(
            !deployment.contains(encoded.trim_matches('"')),
            "{secret:?} appears base64-encoded in the Deployment"
        );
    }
    let container = helm::volmig_container(rendered.deployment());
    for var in container["env"].as_array().expect("env") {
        let name = var["name"].as_str().expect("env name");
        assert!(
            !name.contains("PASSWORD") && !name.contains("USERNAME"),
            "env {name}"
        );
        assert!(var["value"].is_null() || name != "POD_NAME", "{var}");
    }
    // The credentials live in the Secret, as the file --vc-credentials-file reads.
    let secret = rendered.get("Secret", "volmig-vcenter-credentials");
    assert!(
        secret["stringData"].is_null(),
        "credentials must not be stringData: {secret}"
    );
    let secret: Secret = serde_json::from_value(secret.clone()).expect("a valid Secret");
    let data = secret.data.expect("Secret data");
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["credentials"],
        "one key: the file"
    );
    let file = String::from_utf8(data["credentials"].0.clone()).expect("utf-8");
    assert_eq!(
        file,
        format!("username: {username}\npassword: {password}\n")
    );
    // ... and the daemon's own loader reads them back unchanged from the mounted file.
    let mounted = dir.path().join("credentials");
    std::fs::write(&mounted, &file).expect("write the credentials file");
    let loaded = volmig::credentials::load(Some(&mounted)).expect("volmig reads the file");
    assert_eq!(loaded.username, username);
    assert_eq!(loaded.password.expose(), password);
    let volumes = &rendered.deployment()["spec"]["template"]["spec"]["volumes"];
    assert_eq!(
        volumes[0]["secret"]["secretName"],
        "volmig-vcenter-credentials"
    );
    assert_eq!(volumes[0]["secret"]["items"][0]["path"], "credentials");

    // An existing Secret instead: the chart renders no Secret and mounts the named key.
    let existing = render(&[
        "--set-string",
        "vcenter.credentials.existingSecret=corp-vcenter",
        "--set-string",
        "vcenter.credentials.existingSecretKey=volmig.conf",
    ]);
    assert!(
        existing.of_kind("Secret").next().is_none(),
        "{:?}",
        existing.kind_names()
    );
    let secret_volume = &existing.deployment()["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(secret_volume["secret"]["secretName"], "corp-vcenter");
    assert_eq!(secret_volume["secret"]["items"][0]["key"], "volmig.conf");
    assert_eq!(secret_volume["secret"]["items"][0]["path"], "credentials");
}

#[test]
fn contradictory_values_are_refused() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--set",
                "vcenter.insecure=true",
                "--set-string",
                "vcenter.caBundle.pem=PEM",
            ],
            "vcenter.insecure cannot be combined",
        ),
        (
            &["--set", "leaderElection.enabled=false"],
            "allows one replica only",
        ),
        (
            &["--set", "http.probePort=8080"],
            "http.probePort must differ from http.port",
        ),
        (
            &[
                "--set-string",
                "vcenter.credentials.existingSecret=s",
                "--set-string",
                "vcenter.credentials.username=u",
                "--set-string",
                "vcenter.credentials.password=p",
            ],
            "either existingSecret or username/password",
        ),
        (
            &["--set-string", "vcenter.credentials.username=u"],
            "go together",
        ),
        (
            &[
                "--set-string",
                "vcenter.credentials.username=u",
                "--set-string",
                "vcenter.credentials.password=ends-with-quote\"",
            ],
            "cannot start or end with a blank or a quote",
        ),
        (
            &[
                "--set-string",
                "vcenter.caBundle.pem=PEM",
                "--set-string",
                "vcenter.caBundle.existingSecret=ca",
            ],
            "set only one of",
        ),
        (&["--set-string", "onPvDelete=delete"], "onPvDelete"),
        (&["--set-string", "logFormat=xml"], "logFormat"),
        (
            &["--set-string", "kubeRequestTimeout=70"],
            "kubeRequestTimeout",
        ),
        (
            &["--set-string", "fullSyncInterval=10 minutes"],
            "fullSyncInterval",
        ),
        (
            &["--set", "maxConcurrentRegistrations=0"],
            "maxConcurrentRegistrations",
        ),
        (&["--set-string", "vcenter.url=vc.example"], "url"),
        (&["--set", "unknownValue=1"], "unknownValue"),
    ];
    for (sets, message) in cases {
        match template(sets) {
            Ok(_) => panic!("helm template {sets:?} rendered; it must be refused"),
            Err(e) => assert!(
                e.contains(message),
                "helm template {sets:?}: {e:?} lacks {message:?}"
            ),
        }
    }
    // A single replica without leader election is allowed.
    let single = render(&[
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicaCount=1",
    ]);
    assert!(
        single
            .of_kind("Role")
            .filter(|r| r["metadata"]["name"] != "volmig-driver-syncer")
            .all(|r| !r["rules"].to_string().contains("leases")),
        "no access to volmig's own Lease without election"
    );
}

#[test]
fn notes_commands_run_as_printed() {
    let notes = helm::notes(&[]);
    // `port-forward` blocks: chained with `&&`, the command after it never runs.
    for line in notes.lines().filter(|l| l.contains("port-forward")) {
        assert!(!line.contains("&&"), "{line}");
        assert!(line.trim_end().ends_with('&'), "backgrounded: {line}");
    }
    assert!(notes.contains("curl -s localhost:"), "{notes}");
    assert!(
        notes.contains("kubectl -n volmig exec deploy/volmig -- volmig check"),
        "{notes}"
    );
    assert!(!notes.contains("as the CSI side does"), "{notes}");
}

#[test]
fn values_an_admin_gets_wrong_are_refused_by_the_schema() {
    assert_refused(
        &["--set-string", "driver.namespace="],
        &["/driver/namespace"],
    );
    assert_refused(&["--set-json", r#"clusterId="prod-1\n""#], &["/clusterId"]);
    assert_refused(&["--set-json", r#"clusterId="prod 1""#], &["/clusterId"]);
    for bad in ["30 s", "30sec", "1.5m", ""] {
        assert_refused(
            &["--set-string", &format!("serviceMonitor.interval={bad}")],
            &["/serviceMonitor/interval"],
        );
    }
    assert_refused(
        &["--set", "dryRun=true", "--set", "driver.holdSyncer=true"],
        &["/driver/holdSyncer"],
    );
    // What they may be.
    render(&["--set-string", "clusterId=prod-1"]);
    render(&["--set-string", "serviceMonitor.interval=1m30s"]);
    render(&["--set", "dryRun=true"]);
    render(&["--set", "driver.holdSyncer=true"]);
}

/// `helm template` with `sets` must fail, helm's message containing every one of `needles`.
fn assert_refused(sets: &[&str], needles: &[&str]) {
    match template(sets) {
        Ok(_) => panic!("helm template {sets:?} rendered; it must be refused"),
        Err(e) => {
            for needle in needles {
                assert!(
                    e.contains(needle),
                    "helm template {sets:?}: {e:?} lacks {needle:?}"
                );
            }
        }
    }
}

#[test]
fn a_vcenter_url_is_required_unless_the_drivers_config_supplies_it() {
    // Empty or absent: the schema refuses it at the value's path, and says what to set.
    for sets in [
        &["--set-string", "vcenter.url="][..],
        &["--set", "vcenter.url=null"][..],
        &[
            "--set-string",
            "vcenter.url=",
            "--set",
            "vcenter.csiConfig.enabled=false",
        ][..],
    ] {
        // An empty URL is refused at '/vcenter/url', a removed one as missing under '/vcenter'.
        assert_refused(sets, &["/vcenter", "url"]);
    }
    // The chart's own defaults (no URL, csiConfig off) are refused as well.
    let e =
        helm::template_without_base(&["--set-string", "image.repository=registry.example/volmig"])
            .expect_err("the default values name no vCenter");
    assert!(e.contains("/vcenter/url"), "{e}");
    // With the driver's config the URL may stay empty: csi-vsphere.conf names vCenter.
    let rendered = render(&[
        "--set",
        "vcenter.csiConfig.enabled=true",
        "--set-string",
        "vcenter.url=",
    ]);
    let args = rendered.args();
    assert!(!args.iter().any(|a| a.starts_with("--vc-url")), "{args:?}");
    // No clusterId is not an error: the driver's ConfigMap supplies it at run time.
    let rendered = render(&["--set-string", "clusterId="]);
    assert!(
        !rendered
            .args()
            .iter()
            .any(|a| a.starts_with("--cluster-id")),
        "{:?}",
        rendered.args()
    );
}

#[test]
fn duration_values_are_what_the_daemon_parses() {
    // (value, accepted by the schema, accepted by `volmig run`'s parser). The schema takes
    // the compact form Prometheus reads too (`leaderFor` becomes an alert's `for:`): the
    // daemon-only spellings (ISO 8601, blanks, spelled-out units, fractions) are refused
    // up front rather than passed on, and nothing the daemon refuses gets through.
    let table: &[(&str, bool, bool)] = &[
        ("250ms", true, true),
        ("30s", true, true),
        ("10m", true, true),
        ("1h", true, true),
        ("1h30m", true, true),
        ("1h30m15s", true, true),
        ("2m500ms", true, true),
        ("0s500ms", true, true),
        ("0h10m", true, true),
        ("010m", true, true),
        ("0s", false, false),
        ("0m", false, false),
        ("0h0m0s", false, false),
        ("0ms", false, false),
        ("30s10m", false, false),
        ("5m5m", false, false),
        ("10", false, false),
        ("m", false, false),
        ("", false, false),
        ("-10m", false, false),
        ("10 minutes", false, true),
        ("1h 30m", false, true),
        ("1.5h", false, true),
        ("PT10M", false, true),
        ("10x", false, false),
    ];
    let parses = |v: &str| volmig::cli::parse_duration(v).is_ok();
    for (value, expected, daemon) in table {
        assert_eq!(parses(value), *daemon, "volmig's parser on {value:?}");
        let accepted = template(&["--set-string", &format!("fullSyncInterval={value}")]).is_ok();
        assert_eq!(
            accepted,
            *expected,
            "fullSyncInterval={value:?}: the schema {} it",
            if accepted { "accepts" } else { "refuses" }
        );
        // Never a value the schema accepts and the daemon refuses (a CrashLoop).
        if accepted {
            assert!(parses(value), "{value:?} passes the schema, not the daemon");
        }
        if *expected {
            // The same pattern guards every duration value.
            for key in [
                "vcenter.requestTimeout",
                "vcenter.taskTimeout",
                "inFlightGrace",
                "leaderElection.leaseDuration",
                "kubeRequestTimeout",
                "prometheusRule.leaderFor",
            ] {
                template(&["--set-string", &format!("{key}={value}")])
                    .unwrap_or_else(|e| panic!("{key}={value:?} refused: {e}"));
            }
        } else if !value.is_empty() {
            for key in ["vcenter.requestTimeout", "leaderElection.leaseDuration"] {
                assert_refused(&["--set-string", &format!("{key}={value}")], &[]);
            }
        }
    }
}

#[test]
fn an_image_repository_without_a_registry_is_refused() {
    let message = "push the image to a registry and set image.repository";
    // The chart's default: a `helm install` with it would end in ImagePullBackOff.
    let e = helm::template_without_base(&["--set-string", "vcenter.url=https://vc/sdk"])
        .expect_err("the default image repository names no registry");
    assert!(e.contains(message), "{e}");
    for repository in ["volmig", "storage/volmig", "library/volmig/x"] {
        assert_refused(
            &["--set-string", &format!("image.repository={repository}")],
            &[message, repository],
        );
    }
    for repository in [
        "registry.example/volmig",
        "registry.example.com:5000/storage/volmig",
        "localhost/volmig",
        "localhost:5000/volmig",
        "10.0.0.5:5000/volmig",
    ] {
        let rendered = render(&["--set-string", &format!("image.repository={repository}")]);
        let image = helm::volmig_container(rendered.deployment())["image"].clone();
        assert_eq!(
            image,
            format!("{repository}:{}", env!("CARGO_PKG_VERSION")),
            "{repository}"
        );
    }
}

#[test]
fn notes_say_only_what_holds_for_the_values() {
    let plain = helm::notes(&["--set-string", "clusterId=c1"]);
    for absent in ["csi-vsphere.conf", "csiConfig", "WARNING: vcenter.url"] {
        assert!(!plain.contains(absent), "{absent:?} in NOTES:\n{plain}");
    }
    for present in [
        "probes on port 8081",
        "metrics on port 8080",
        "driver namespace vmware-system-csi",
        "follow mode",
        "vsphere-syncer",
    ] {
        assert!(
            plain.contains(present),
            "{present:?} not in NOTES:\n{plain}"
        );
    }
    // Without clusterId: the driver's ConfigMap must supply it.
    let no_id = helm::notes(&[
        "--set",
        "http.port=9090",
        "--set",
        "http.probePort=9091",
        "--set-string",
        "driver.namespace=csi",
        "--set-string",
        "driver.syncerLease=",
    ]);
    for present in [
        "ConfigMap csi/vsphere-csi-cluster-id",
        "probes on port 9091",
        "metrics on port 9090",
        "never follows",
    ] {
        assert!(
            no_id.contains(present),
            "{present:?} not in NOTES:\n{no_id}"
        );
    }
    assert!(!no_id.contains("follow mode"), "{no_id}");
    // With the driver's config: its file is named, not a vcenter.url to set.
    let csi = helm::notes(&["--set", "vcenter.csiConfig.enabled=true"]);
    assert!(csi.contains("csi-vsphere.conf"), "{csi}");
    assert!(!csi.contains("--set vcenter.url"), "{csi}");
    assert!(!csi.contains("vcenter-credentials"), "{csi}");
    // A dry run says so.
    let dry = helm::notes(&["--set", "dryRun=true"]);
    assert!(dry.contains("dry run"), "{dry}");
    // Hold mode says so, and not follow mode.
    let hold = helm::notes(&[
        "--set-string",
        "clusterId=c1",
        "--set",
        "driver.holdSyncer=true",
    ]);
    assert!(hold.contains("hold mode"), "{hold}");
    assert!(!hold.contains("follow mode:"), "{hold}");
    assert!(!plain.contains("hold mode"), "{plain}");
}

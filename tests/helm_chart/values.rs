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

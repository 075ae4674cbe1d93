//! The chart's `vcenter.csiConfig` values (docs/design.md §8.5): the vSphere CSI driver's Secret
//! mounted as it is and passed with `--csi-config`, rendered by the real helm binary and
//! read by the real `volmig` command line and configuration code.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/helm.rs"]
mod helm;

use clap::Parser;
use serde_json::Value;
use volmig::cli::{Cli, Command, RunArgs};
use volmig::credentials::CredentialSource;

use helm::{Rendered, render, template, volmig_container};

const MOUNTED: &str = "/etc/volmig/csi-config/csi-vsphere.conf";

fn run_args(args: &[String]) -> RunArgs {
    let argv = std::iter::once("volmig".to_owned())
        .chain(args.iter().map(|a| a.replace("$(POD_NAME)", "volmig-0")));
    match Cli::try_parse_from(argv) {
        Ok(cli) => match cli.command {
            Command::Run(args) => *args,
            other => panic!("not run: {other:?}"),
        },
        Err(e) => panic!("volmig rejects the chart's args {args:?}:\n{e}"),
    }
}

fn pod_spec(rendered: &Rendered) -> &Value {
    &rendered.deployment()["spec"]["template"]["spec"]
}

fn volume<'a>(rendered: &'a Rendered, name: &str) -> Option<&'a Value> {
    pod_spec(rendered)["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == name))
}

fn mount<'a>(rendered: &'a Rendered, name: &str) -> Option<&'a Value> {
    volmig_container(rendered.deployment())["volumeMounts"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == name))
}

#[test]
fn the_drivers_secret_is_mounted_as_it_is_and_replaces_url_credentials_and_cluster_id() {
    let rendered = render(&["--set", "vcenter.csiConfig.enabled=true"]);
    let args = rendered.args();
    assert!(
        args.contains(&format!("--csi-config={MOUNTED}")),
        "{args:?}"
    );
    for absent in ["--vc-url", "--cluster-id", "--vc-credentials-file"] {
        assert!(
            !args.iter().any(|a| a.starts_with(absent)),
            "{absent} rendered without a value for it: {args:?}"
        );
    }
    let secret = &volume(&rendered, "csi-config").expect("csi-config volume")["secret"];
    assert_eq!(secret["secretName"], "vsphere-config-secret");
    assert_eq!(secret["items"][0]["key"], "csi-vsphere.conf");
    assert_eq!(secret["items"][0]["path"], "csi-vsphere.conf");
    let m = mount(&rendered, "csi-config").expect("csi-config mount");
    assert_eq!(m["mountPath"], "/etc/volmig/csi-config");
    assert_eq!(m["readOnly"], true);
    assert!(
        m.get("subPath").is_none(),
        "a subPath mount never sees a rotated Secret: {m}"
    );
    assert!(volume(&rendered, "vcenter-credentials").is_none());
    assert!(mount(&rendered, "vcenter-credentials").is_none());

    // The daemon accepts these arguments, and with the driver's file at the mounted path's
    // place it has everything it needs.
    let mut parsed = run_args(&args);
    assert_eq!(parsed.csi_config.as_deref(), Some(MOUNTED.as_ref()));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("csi-vsphere.conf");
    std::fs::write(
        &file,
        "[Global]\ncluster-id = \"prod\"\n[VirtualCenter \"vc.example.com\"]\nuser = \"k8s@vsphere.local\"\npassword = \"s3cr;t\"\ndatacenters = \"DC0\"\n",
    )
    .unwrap();
    parsed.csi_config = Some(file.clone());
    let settings = volmig::vcenter_config::resolve_with(&parsed, false).unwrap();
    assert_eq!(settings.url.as_str(), "https://vc.example.com/sdk");
    assert_eq!(settings.cluster_id.map(|c| c.id).as_deref(), Some("prod"));
    assert_eq!(settings.datacenters, ["DC0"]);
    assert_eq!(settings.credentials, CredentialSource::CsiConfig(file));
    assert_eq!(
        settings.credentials.load().unwrap().password.expose(),
        "s3cr;t"
    );
}

#[test]
fn secret_name_and_key_are_values_and_explicit_settings_still_apply() {
    let rendered = render(&[
        "--set",
        "vcenter.csiConfig.enabled=true",
        "--set-string",
        "vcenter.csiConfig.secretName=copied-csi-config",
        "--set-string",
        "vcenter.csiConfig.key=vsphere.conf",
        "--set-string",
        "vcenter.credentials.existingSecret=volmig-user",
        "--set-string",
        "clusterId=override",
    ]);
    let secret = &volume(&rendered, "csi-config").expect("csi-config volume")["secret"];
    assert_eq!(secret["secretName"], "copied-csi-config");
    assert_eq!(secret["items"][0]["key"], "vsphere.conf");
    assert_eq!(secret["items"][0]["path"], "csi-vsphere.conf");
    let args = rendered.args();
    assert!(
        args.contains(&format!("--csi-config={MOUNTED}")),
        "{args:?}"
    );
    assert!(
        args.contains(&"--vc-credentials-file=/etc/volmig/vcenter/credentials".to_owned()),
        "explicit credentials override the file's: {args:?}"
    );
    assert!(volume(&rendered, "vcenter-credentials").is_some());
    let parsed = run_args(&args);
    assert_eq!(parsed.cluster_id.as_deref(), Some("override"));
}

#[test]
fn off_by_default() {
    let rendered = render(&[
        "--set-string",
        "vcenter.url=https://vc.example/sdk",
        "--set-string",
        "clusterId=c",
    ]);
    assert!(volume(&rendered, "csi-config").is_none());
    assert!(mount(&rendered, "csi-config").is_none());
    let args = rendered.args();
    assert!(
        !args.iter().any(|a| a.starts_with("--csi-config")),
        "{args:?}"
    );
    assert!(volume(&rendered, "vcenter-credentials").is_some());
    assert_eq!(run_args(&args).csi_config, None);
}

#[test]
fn values_are_validated() {
    let e = template(&["--set-string", "vcenter.url=http://vc.example/sdk"]).unwrap_err();
    assert!(e.contains("vcenter.url") || e.contains("url"), "{e}");
    let e = template(&["--set", "vcenter.csiConfig.typo=1"]).unwrap_err();
    assert!(e.contains("typo"), "{e}");
    let e = template(&[
        "--set",
        "vcenter.csiConfig.enabled=true",
        "--set-string",
        "vcenter.csiConfig.key=",
    ])
    .unwrap_err();
    assert!(e.contains("key"), "{e}");
}

use std::path::Path;

use clap::Parser;

use super::*;
use crate::cli::{Cli, Command, RunArgs};

fn args(extra: &[&str]) -> RunArgs {
    let cli = Cli::try_parse_from(["volmig", "run"].iter().chain(extra)).unwrap();
    match cli.command {
        Command::Run(args) => *args,
        other => panic!("not run: {other:?}"),
    }
}

fn write_conf(dir: &Path, text: &str) -> String {
    let path = dir.join("csi-vsphere.conf");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

const CONF: &str = r#"
[Global]
cluster-id = "csi-cluster"
cluster-distribution = "Anthos"
[VirtualCenter "vc.example.com"]
user = "csi@vsphere.local"
password = "pw"
port = "8443"
datacenters = "DC1, DC2"
ca-file = "/etc/ssl/vc-ca.pem"
"#;

#[test]
fn the_csi_config_supplies_everything() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), CONF);
    let s = resolve_with(&args(&["--csi-config", &conf]), false).unwrap();
    assert_eq!(s.url.as_str(), "https://vc.example.com:8443/sdk");
    assert_eq!(
        s.cluster_id,
        Some(ConfiguredClusterId {
            id: "csi-cluster".to_owned(),
            source: ClusterIdSource::CsiConfig(PathBuf::from(&conf)),
        })
    );
    assert_eq!(s.cluster_distribution.as_deref(), Some("Anthos"));
    assert_eq!(s.ca_file, Some(PathBuf::from("/etc/ssl/vc-ca.pem")));
    assert!(!s.insecure);
    assert_eq!(s.datacenters, ["DC1", "DC2"]);
    assert_eq!(
        s.credentials,
        CredentialSource::CsiConfig(PathBuf::from(&conf))
    );
    let creds = s.credentials.load().unwrap();
    assert_eq!(creds.username, "csi@vsphere.local");
    assert_eq!(creds.password.expose(), "pw");
}

#[test]
fn explicit_flags_override_the_csi_config() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), CONF);
    let s = resolve_with(
        &args(&[
            "--csi-config",
            &conf,
            "--vc-url",
            "https://other.example/sdk",
            "--cluster-id",
            "flag-cluster",
            "--vc-insecure",
            "--datacenters",
            "X",
            "--vc-credentials-file",
            "/etc/volmig/credentials",
        ]),
        false,
    )
    .unwrap();
    assert_eq!(s.url.as_str(), "https://other.example/sdk");
    assert_eq!(
        s.cluster_id,
        Some(ConfiguredClusterId {
            id: "flag-cluster".to_owned(),
            source: ClusterIdSource::Flag,
        })
    );
    assert_eq!((s.ca_file, s.insecure), (None, true));
    assert_eq!(s.datacenters, ["X"]);
    assert_eq!(
        s.credentials,
        CredentialSource::File(PathBuf::from("/etc/volmig/credentials"))
    );
    // A CA flag beats the file's insecure-flag.
    let conf = write_conf(
        dir.path(),
        "[Global]\ncluster-id=c\n[VirtualCenter \"vc\"]\ninsecure-flag = true\nca-file = /x\n",
    );
    let s = resolve_with(&args(&["--csi-config", &conf]), false).unwrap();
    assert_eq!((s.ca_file.clone(), s.insecure), (None, true));
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    let s = resolve_with(
        &args(&["--csi-config", &conf, "--vc-ca-file", "/ca"]),
        false,
    )
    .unwrap();
    assert_eq!((s.ca_file, s.insecure), (Some(PathBuf::from("/ca")), false));
    // VOLMIG_VC_USERNAME set: the environment's credentials win over the file's.
    let s = resolve_with(&args(&["--csi-config", &conf]), true).unwrap();
    assert_eq!(s.credentials, CredentialSource::Environment);
}

#[test]
fn missing_settings_name_the_flag_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(
        dir.path(),
        "[VirtualCenter \"vc\"]\nuser = u\npassword = p\n",
    );
    // No cluster ID is no error here: the driver's ConfigMap may supply it at start-up.
    let s = resolve_with(&args(&["--csi-config", &conf]), false).unwrap();
    assert_eq!(s.cluster_id, None);
    let s = resolve_with(&args(&["--csi-config", &conf, "--cluster-id", "c"]), false).unwrap();
    assert_eq!(s.url.as_str(), "https://vc/sdk");
    assert_eq!(s.cluster_id.map(|c| c.id).as_deref(), Some("c"));
    let s = resolve_with(&args(&["--vc-url", "https://vc/sdk"]), false).unwrap();
    assert_eq!(s.cluster_id, None);

    let e = resolve_with(&args(&["--csi-config", "/nonexistent/csi.conf"]), false).unwrap_err();
    assert!(e.0.contains("/nonexistent/csi.conf"), "{e}");

    let two = write_conf(
        dir.path(),
        "[VirtualCenter \"a\"]\nuser=u\n[VirtualCenter \"b\"]\nuser=u\n",
    );
    let e = resolve_with(&args(&["--csi-config", &two]), false).unwrap_err();
    assert!(e.0.contains("exactly one vCenter"), "{e}");
}

#[test]
fn only_https_urls_are_used() {
    assert!(check_url(&Url::parse("https://vc/sdk").unwrap()).is_ok());
    let e = check_url(&Url::parse("http://vc/sdk").unwrap()).unwrap_err();
    assert!(e.contains("plain http"), "{e}");
    let e = check_url(&Url::parse("http://admin:hunter2@vc/sdk").unwrap()).unwrap_err();
    assert!(!e.contains("hunter2") && !e.contains("admin"), "{e}");
    assert!(check_url(&Url::parse("ftp://vc/sdk").unwrap()).is_err());
}

#[test]
fn urls_with_credentials_are_refused_naming_neither_user_nor_password() {
    for url in [
        "https://admin:hunter2@vc/sdk",
        "https://admin@vc/sdk",
        "https://:hunter2@vc/sdk",
        "http://admin:hunter2@vc/sdk",
    ] {
        let e = check_url(&Url::parse(url).unwrap()).unwrap_err();
        assert!(e.contains("must not contain credentials"), "{url}: {e}");
        assert!(!e.contains("hunter2") && !e.contains("admin"), "{url}: {e}");
    }
}

#[test]
fn a_csi_config_host_with_credentials_is_refused_without_showing_them() {
    let dir = tempfile::tempdir().unwrap();
    for host in ["admin:hunter2@vc", "admin@vc", "admin:hunter2@fd00::1"] {
        let conf = write_conf(
            dir.path(),
            &format!("[Global]\ncluster-id = c\n[VirtualCenter \"{host}\"]\nuser = u\n"),
        );
        let e = resolve_with(&args(&["--csi-config", &conf]), false).unwrap_err();
        assert!(e.0.contains("credentials"), "{host}: {e}");
        assert!(
            !e.0.contains("hunter2") && !e.0.contains("admin"),
            "{host}: {e}"
        );
    }
}

#[test]
fn the_csi_config_secret_excludes_the_file_flags_and_defaults_to_the_drivers() {
    let a = args(&["--csi-config-secret"]);
    assert_eq!(
        a.csi_config_secret
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some(secret::DEFAULT_SECRET)
    );
    assert_eq!(a.vc_url, None, "the Secret names the vCenter");
    for other in [
        ["--csi-config", "/etc/csi/csi-vsphere.conf"],
        ["--vc-credentials-file", "/etc/volmig/credentials"],
    ] {
        let e = Cli::try_parse_from(
            ["volmig", "run", "--csi-config-secret", "ns/s"]
                .iter()
                .chain(&other),
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot be used with"), "{e}");
    }
    let e =
        Cli::try_parse_from(["volmig", "run", "--csi-config-secret", "no-namespace"]).unwrap_err();
    assert!(e.to_string().contains("NAMESPACE/NAME"), "{e}");
}

#[test]
fn the_csi_config_secret_supplies_everything_and_its_credentials_follow_it() {
    let a = args(&["--csi-config-secret", secret::DEFAULT_SECRET]);
    let Some(reference) = a.csi_config_secret.clone() else {
        panic!("no secret");
    };
    let e = resolve_with(&args(&["--csi-config-secret", "other/secret"]), false).unwrap_err();
    assert!(e.to_string().contains("has not been read"), "{e}");
    let store = secret::SecretConf::new(reference, Some(CONF.to_owned()));
    let mut flags = VcenterFlags::from(&a);
    flags.csi_config_secret_conf = Some(store.clone());
    let s = resolve_with(flags.clone(), false).unwrap();
    assert_eq!(s.url.as_str(), "https://vc.example.com:8443/sdk");
    assert_eq!(s.datacenters, ["DC1", "DC2"]);
    let Some(id) = s.cluster_id else {
        panic!("no cluster ID")
    };
    assert_eq!(id.id, "csi-cluster");
    assert!(
        id.source
            .to_string()
            .contains("--csi-config-secret vmware-system-csi/")
    );
    assert_eq!(s.credentials.load().unwrap().password.expose(), "pw");
    store.set(Some(CONF.replace("\"pw\"", "\"rotated\"")));
    assert_eq!(s.credentials.load().unwrap().password.expose(), "rotated");
    // VOLMIG_VC_USERNAME set: the environment wins, as with --csi-config.
    let s = resolve_with(flags, true).unwrap();
    assert_eq!(s.credentials, CredentialSource::Environment);
}

#[test]
fn the_thumbprint_is_kept_unless_a_flag_or_insecure_flag_decides() {
    let dir = tempfile::tempdir().unwrap();
    let t = "AF:F2:33:3D:9E:FA:D0:66:6B:50:F5:96:29:89:79:5E:4F:87:B9:14";
    let conf = write_conf(
        dir.path(),
        &format!("[VirtualCenter \"vc\"]\nuser = u\npassword = p\nthumbprint = \"{t}\"\n"),
    );
    let s = resolve_with(&args(&["--csi-config", &conf]), false).unwrap();
    assert_eq!(s.thumbprint.as_deref(), Some(t));
    let s = resolve_with(&args(&["--csi-config", &conf, "--vc-insecure"]), false).unwrap();
    assert_eq!(s.thumbprint, None);
    let s = resolve_with(
        &args(&["--csi-config", &conf, "--vc-ca-file", "/ca"]),
        false,
    )
    .unwrap();
    assert_eq!(s.thumbprint, None);
}

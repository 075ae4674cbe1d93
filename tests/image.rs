//! The release artifacts an admin builds without a container engine (mk/image.mk,
//! docs/operations.md "The container image"): `make image` writes an OCI image layout
//! with scripts/oci-image.sh, which skopeo and umoci read, holding the binary and running
//! as a non-root user; `make chart-package` runs `helm package`; `make krew` packs the
//! kubectl plugin and fills in krew/volmig.yaml.
//!
//! The layout is built here from the test binary (the same script `make image` runs on
//! the release build): the release build itself is left to `make image`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

use std::path::Path;
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(cmd: &mut Command) -> Output {
    let output = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        output.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn make(args: &[&str]) -> String {
    let output = run(Command::new("make").arg("-s").args(args).current_dir(ROOT));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn make_image_writes_an_oci_layout_skopeo_reads_with_the_binary_and_a_non_root_user() {
    make(&["image-tools"]);
    // `make image` builds the release binary and hands it to the script.
    let plan = make(&["-n", "image", "IMAGE_LAYOUT=/out/layout"]);
    assert!(
        plan.contains("cargo build --release --locked --bin volmig"),
        "{plan}"
    );
    assert!(
        plan.contains("scripts/oci-image.sh") && plan.contains("/release/volmig /out/layout 0.1.0"),
        "{plan}"
    );

    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    run(Command::new(Path::new(ROOT).join("scripts/oci-image.sh"))
        .arg(env!("CARGO_BIN_EXE_volmig"))
        .arg(&layout)
        .arg("test"));
    let reference = format!("oci:{}:test", layout.display());

    let config = run(Command::new("skopeo").args(["inspect", "--config", &reference]));
    let config: serde_json::Value = serde_json::from_slice(&config.stdout).unwrap();
    assert_eq!(config["os"], "linux");
    assert_eq!(config["config"]["User"], "65532:65532", "{config}");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/volmig"])
    );
    let manifest = run(Command::new("skopeo").args(["inspect", &reference]));
    let manifest: serde_json::Value = serde_json::from_slice(&manifest.stdout).unwrap();
    assert_eq!(
        manifest["Layers"].as_array().map(Vec::len),
        Some(1),
        "{manifest}"
    );

    // umoci reads it back: the binary, the user, and the binary runs in that root alone.
    let bundle = dir.path().join("bundle");
    run(Command::new("umoci")
        .args(["unpack", "--rootless", "--image"])
        .arg(format!("{}:test", layout.display()))
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");
    let binary = std::fs::metadata(rootfs.join("usr/local/bin/volmig")).unwrap();
    assert!(std::os::unix::fs::PermissionsExt::mode(&binary.permissions()) & 0o111 != 0);
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{passwd}"
    );
    let version = run(Command::new("unshare")
        .args(["--user", "--map-root-user"])
        .arg(format!("--root={}", rootfs.display()))
        .args(["/usr/local/bin/volmig", "--version"]));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("volmig {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn make_chart_package_runs_helm_package() {
    let dir = tempfile::tempdir().unwrap();
    make(&[
        "chart-package",
        &format!("CHART_PACKAGE_DIR={}", dir.path().display()),
    ]);
    let package = dir.path().join(format!("volmig-{}.tgz", chart_version()));
    assert!(package.is_file(), "no {}", package.display());
}

/// `version:` of charts/volmig/Chart.yaml.
fn chart_version() -> String {
    let chart = std::fs::read_to_string(Path::new(ROOT).join("charts/volmig/Chart.yaml")).unwrap();
    chart
        .lines()
        .find_map(|l| l.strip_prefix("version: "))
        .expect("Chart.yaml has a version")
        .trim()
        .to_owned()
}

#[test]
fn make_krew_packs_the_plugin_and_its_manifest_names_this_version_and_sha256() {
    let dir = tempfile::tempdir().unwrap();
    make(&[
        "krew-archive",
        &format!("IMAGE_BINARY={}", env!("CARGO_BIN_EXE_volmig")),
        &format!("KREW_DIR={}", dir.path().display()),
    ]);
    let version = env!("CARGO_PKG_VERSION");
    let archive = dir
        .path()
        .join(format!("volmig-v{version}-linux-amd64.tar.gz"));
    let listing = run(Command::new("tar").arg("-tzf").arg(&archive));
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert_eq!(listing.lines().collect::<Vec<_>>(), ["volmig", "LICENSE"]);
    let sum = run(Command::new("sha256sum").arg(&archive));
    let sum = String::from_utf8_lossy(&sum.stdout);
    let sum = sum.split_whitespace().next().unwrap();

    let text = std::fs::read_to_string(dir.path().join("volmig.yaml")).unwrap();
    let manifest: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "volmig");
    let spec = &manifest["spec"];
    assert_eq!(spec["version"], format!("v{version}"));
    assert_eq!(spec["homepage"], "https://github.com/volmig/volmig");
    let platform = &spec["platforms"][0];
    assert_eq!(platform["sha256"], sum);
    assert_eq!(platform["bin"], "volmig");
    assert!(
        platform["uri"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v{version}/volmig-v{version}-linux-amd64.tar.gz")),
        "{platform}"
    );
    // The plugin's commands are volmig's.
    for command in ["report", "lookup", "check"] {
        assert!(
            spec["description"]
                .as_str()
                .unwrap()
                .contains(&format!("kubectl volmig {command}")),
            "{command}"
        );
    }
}

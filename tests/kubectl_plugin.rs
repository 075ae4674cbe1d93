//! The `volmig` binary installed as `kubectl-volmig` is the kubectl plugin `kubectl volmig`:
//! the real kubectl finds it on PATH and runs it with the remaining arguments; its usage
//! names `kubectl volmig`, and `report` and `lookup` answer exactly as `volmig report` and
//! `volmig lookup` do, against the Kubernetes API test server.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::path::{Path, PathBuf};
use std::process::Output;

use e2e::{Cluster, volmig_bin};

/// A directory holding the binary under test as `kubectl-volmig`, as `make install` leaves
/// it (a symlink).
fn plugin_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("volmig-kubectl-plugin-")
        .tempdir()
        .expect("temp dir");
    std::os::unix::fs::symlink(volmig_bin(), dir.path().join("kubectl-volmig"))
        .expect("symlink kubectl-volmig");
    dir
}

/// PATH with `dir` first.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).expect("PATH")
}

/// Runs `program args` with `dir` first on PATH and no ambient cluster configuration.
fn run(program: &Path, dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(program)
        .args(args)
        .env("PATH", path_with(dir))
        .env_remove("KUBECONFIG")
        .env_remove("VOLMIG_KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("VOLMIG_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()))
}

fn kubectl() -> PathBuf {
    PathBuf::from("kubectl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exit code, stdout and stderr.
fn outcome(output: &Output) -> (Option<i32>, String, String) {
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

#[test]
fn kubectl_volmig_help_names_kubectl_volmig() {
    let dir = plugin_dir();
    let output = run(&kubectl(), dir.path(), &["volmig", "--help"]);
    let (code, stdout, stderr) = outcome(&output);
    assert_eq!(code, Some(0), "kubectl volmig --help:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("Usage: kubectl volmig <COMMAND>"),
        "kubectl volmig --help:\n{stdout}"
    );
    for command in ["report", "lookup"] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing from kubectl volmig --help:\n{stdout}"
        );
    }
    assert!(!stdout.contains("kubectl-volmig"), "{stdout}");

    let output = run(&kubectl(), dir.path(), &["volmig", "report", "--help"]);
    let (code, stdout, stderr) = outcome(&output);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Usage: kubectl volmig report [OPTIONS]"),
        "kubectl volmig report --help:\n{stdout}"
    );

    // A usage error names the plugin too, and exits 2 like `volmig`.
    let output = run(
        &kubectl(),
        dir.path(),
        &["volmig", "report", "--no-such-flag"],
    );
    let (code, _, stderr) = outcome(&output);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("Usage: kubectl volmig report"), "{stderr}");

    // Under its own name the binary still says `volmig`.
    let output = run(&volmig_bin(), dir.path(), &["--help"]);
    let (code, stdout, _) = outcome(&output);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("Usage: volmig <COMMAND>"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_volmig_report_and_lookup_answer_as_volmig_does() {
    let cluster = Cluster::start().await;
    cluster
        .create_pv("pv-a", "[LocalDS_0] kubevols/plugin-a.vmdk")
        .await;
    cluster.create_nfs_pv("pv-nfs").await;
    let dir = plugin_dir();
    let kubeconfig = cluster.kubeconfig.display().to_string();

    for args in [
        vec!["report", "--kubeconfig", &kubeconfig],
        vec!["report", "--kubeconfig", &kubeconfig, "-o", "json"],
        vec!["lookup", "--kubeconfig", &kubeconfig, "--pv", "pv-a"],
        vec![
            "lookup",
            "--kubeconfig",
            &kubeconfig,
            "[LocalDS_0] kubevols/plugin-a.vmdk",
        ],
    ] {
        let direct = outcome(&run(&volmig_bin(), dir.path(), &args));
        let mut through_kubectl = vec!["volmig"];
        through_kubectl.extend(&args);
        let plugin = outcome(&run(&kubectl(), dir.path(), &through_kubectl));
        assert_eq!(
            plugin, direct,
            "kubectl volmig {args:?} differs from volmig {args:?}"
        );
    }

    // What it answered: not ready (exit 1), the PV named; not registered yet (exit 3).
    let (code, stdout, _) = outcome(&run(
        &kubectl(),
        dir.path(),
        &["volmig", "report", "--kubeconfig", &kubeconfig],
    ));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("pv-a"), "{stdout}");
    assert!(
        stdout.trim_end().ends_with("are not Registered"),
        "{stdout}"
    );
    let (code, _, stderr) = outcome(&run(
        &kubectl(),
        dir.path(),
        &[
            "volmig",
            "lookup",
            "--kubeconfig",
            &kubeconfig,
            "--pv",
            "pv-a",
        ],
    ));
    assert_eq!(code, Some(3), "{stderr}");
}

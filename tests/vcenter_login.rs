//! How `volmig run` logs in to vCenter (docs/design.md §4.11, §8.5), end to end: the
//! real binary, the govmomi simulator harness (which counts SOAP calls per User-Agent) and
//! the Kubernetes API test server.
//!
//! - A wrong password is refused once and then not tried again for the backoff (1 min):
//!   one `Login` per backoff period across all workers, and every status says
//!   `InvalidLogin`, naming the vCenter and the user, never the password.
//! - A password rotated in vCenter and in the mounted `csi-vsphere.conf` together, with the
//!   sessions expired, needs no restart: registration continues, and no login is refused.
//! - A user and password inside `--vc-url` (or `VOLMIG_VC_URL`) are refused at once, and
//!   neither is printed.

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
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e::{Cluster, free_port, phase, volume_id, wait_for};
use tokio::process::{Child, Command};
use vcsim::{SimStats, Vcsim, VcsimOptions};
use volmig::volume_migration::Phase;

/// `volmig run` with exactly `flags` (plus kubeconfig, HTTP addresses and holder ID).
struct Volmig {
    child: Child,
    log: PathBuf,
    agent: String,
}

impl Volmig {
    fn spawn(cluster: &Cluster, name: &str, flags: &[String]) -> Volmig {
        let log = cluster.path(&format!("{name}.log"));
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut args = vec![
            "run".to_owned(),
            format!("--kubeconfig={}", cluster.daemon_kubeconfig.display()),
            format!("--http-addr=127.0.0.1:{}", free_port()),
            format!("--probe-addr=127.0.0.1:{}", free_port()),
            format!("--lease-holder-id={name}"),
            "--full-sync-interval=2s".to_owned(),
        ];
        args.extend_from_slice(flags);
        let child = Command::new(e2e::volmig_bin())
            .args(e2e::compat_args(args))
            .env("VOLMIG_LOG", "info,volmig=debug,kube_runtime=warn")
            .env_remove("VOLMIG_VC_USERNAME")
            .env_remove("VOLMIG_VC_PASSWORD")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn volmig");
        Volmig {
            child,
            log,
            agent: format!("({name})"),
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        assert!(
            self.child.try_wait().expect("try_wait").is_none(),
            "volmig exited:\n{}",
            self.log_text()
        );
    }

    /// Calls of `method` this daemon made (its User-Agent names its holder ID).
    fn calls(&self, stats: &SimStats, method: &str) -> u64 {
        stats
            .calls_by_user_agent
            .iter()
            .filter(|(ua, _)| ua.contains(&self.agent))
            .map(|(_, m)| m.get(method).copied().unwrap_or(0))
            .sum()
    }

    fn faults(&self, stats: &SimStats, method: &str) -> u64 {
        stats
            .faults_by_user_agent
            .iter()
            .filter(|(ua, _)| ua.contains(&self.agent))
            .map(|(_, m)| m.get(method).copied().unwrap_or(0))
            .sum()
    }
}

/// Replaces `path` the way the kubelet updates a mounted Secret: a new file renamed over.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn csi_conf(sim: &Vcsim, user: &str, password: &str) -> String {
    let (host, port) = sim.host_port().rsplit_once(':').unwrap();
    format!(
        "[Global]\ncluster-id = \"login-e2e\"\n\n[VirtualCenter {host:?}]\nuser = {user:?}\npassword = {password:?}\nport = \"{port}\"\ndatacenters = \"{}\"\n",
        sim.datacenters.join(",")
    )
}

async fn all_registered(cluster: &Cluster, paths: &[String], timeout: Duration) {
    wait_for(timeout, "every VolumeMigration Registered", || async {
        for path in paths {
            let vm = cluster.migration(path).await?;
            if phase(&vm) != Some(Phase::Registered) || volume_id(&vm).is_none() {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_tried_once_per_backoff_and_reported_as_invalid_login() {
    const WRONG: &str = "wr0ng-Pa55";
    let sim = Vcsim::start(VcsimOptions::default().vmdks(12)).await;
    let cluster = Cluster::start().await;
    let paths: Vec<String> = (1..=12).map(|n| sim.vmdk_path("kubevols", n)).collect();
    let credentials = cluster.path("wrong-credentials");
    write_atomically(
        &credentials,
        &format!("username: {}\npassword: {WRONG}\n", sim.username),
    );
    let mut flags = vec![
        format!("--vc-url={}", sim.url),
        format!("--vc-credentials-file={}", credentials.display()),
        "--cluster-id=login-e2e".to_owned(),
        "--max-concurrent-registrations=8".to_owned(),
    ];
    if let Some(cert) = &sim.cert {
        flags.push(format!("--vc-ca-file={}", cert.display()));
    }
    let mut volmig = Volmig::spawn(&cluster, "wrong-password", &flags);

    let first_login = wait_for(Duration::from_secs(60), "the first Login", || async {
        (volmig.calls(&sim.stats().await, "Login") >= 1).then(Instant::now)
    })
    .await;
    // PVs appear while the daemon backs off (the start-up full sync could not list CNS,
    // so the PV watcher creates their VolumeMigrations); every worker wants vCenter.
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }

    // Every VolumeMigration reports the refusal clearly.
    let statuses = wait_for(
        Duration::from_secs(40),
        "an InvalidLogin error on every VolumeMigration",
        || async {
            let mut messages = Vec::new();
            for path in &paths {
                let vm = cluster.migration(path).await?;
                let error = vm.status.as_ref()?.last_error.clone()?;
                if !error.message.contains("InvalidLogin") {
                    return None;
                }
                messages.push(error.message);
            }
            Some(messages)
        },
    )
    .await;
    for message in &statuses {
        assert!(message.contains(&sim.url), "names the vCenter: {message}");
        assert!(
            message.contains(&format!("'{}'", sim.username)),
            "names the user: {message}"
        );
        assert!(!message.contains(WRONG), "shows the password: {message}");
    }

    // Inside the first backoff period (60 s): the one Login, however many workers and
    // full-sync passes (every 2 s) wanted vCenter meanwhile.
    tokio::time::sleep_until((first_login + Duration::from_secs(55)).into()).await;
    let stats = sim.stats().await;
    assert_eq!(
        volmig.calls(&stats, "Login"),
        1,
        "Login attempts within the first backoff period; stats: {:?}",
        stats.calls_by_user_agent
    );
    assert_eq!(volmig.faults(&stats, "Login"), 1);
    assert_eq!(
        volmig.calls(&stats, "CnsCreateVolume"),
        0,
        "no CNS call without a session"
    );
    volmig.assert_running();

    // After it, one more attempt (and then a 2 min wait).
    let stats = wait_for(Duration::from_secs(30), "the second Login", || async {
        let stats = sim.stats().await;
        (volmig.calls(&stats, "Login") >= 2).then_some(stats)
    })
    .await;
    let second = Instant::now();
    assert!(
        second.duration_since(first_login) >= Duration::from_secs(58),
        "second Login only {:?} after the first",
        second.duration_since(first_login)
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        volmig.calls(&sim.stats().await, "Login"),
        2,
        "{:?}",
        stats.calls_by_user_agent
    );
    let log = volmig.log_text();
    assert!(!log.contains(WRONG), "the password is in the log");
    assert!(log.contains("InvalidLogin"), "the log names the refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_in_the_csi_config_needs_no_restart() {
    let mut sim = Vcsim::start(VcsimOptions::default().vmdks(12)).await;
    let cluster = Cluster::start().await;
    let paths: Vec<String> = (1..=12).map(|n| sim.vmdk_path("kubevols", n)).collect();
    let conf = cluster.path("csi-vsphere.conf");
    let user = sim.username.clone();
    write_atomically(&conf, &csi_conf(&sim, &user, &sim.password));
    // Everything from the driver's file: URL, credentials, datacenters, cluster ID. Only
    // the simulator's CA is given as a flag.
    let mut flags = vec![format!("--csi-config={}", conf.display())];
    if let Some(cert) = &sim.cert {
        flags.push(format!("--vc-ca-file={}", cert.display()));
    }
    let mut volmig = Volmig::spawn(&cluster, "rotation", &flags);

    for (n, path) in paths[..4].iter().enumerate() {
        cluster.create_pv(&format!("before-{n}"), path).await;
    }
    all_registered(&cluster, &paths[..4], Duration::from_secs(90)).await;
    let before = sim.stats().await;
    assert_eq!(volmig.calls(&before, "Login"), 1);

    // Rotate: vCenter accepts only the new password, the mounted file has it, and every
    // session ends (as an idle timeout would).
    sim.set_credentials(&user, "r0tated\"Pa55'").await;
    write_atomically(&conf, &csi_conf(&sim, &user, "r0tated\"Pa55'"));
    sim.expire_sessions().await;

    for (n, path) in paths[4..].iter().enumerate() {
        cluster.create_pv(&format!("after-{n}"), path).await;
    }
    all_registered(&cluster, &paths, Duration::from_secs(90)).await;
    volmig.assert_running();
    let after = sim.stats().await;
    assert_eq!(
        volmig.faults(&after, "Login"),
        0,
        "a login with the old password was refused: {:?}",
        after.calls_by_user_agent
    );
    assert!(volmig.calls(&after, "Login") >= 2, "logged in again");
    assert_eq!(sim.volumes().await.len(), 12, "one CNS volume per vmdk");
    let log = volmig.log_text();
    assert!(!log.contains("r0tated"), "the password is in the log");
}

/// `volmig run` with a user and password inside `--vc-url` (the flag, then
/// `VOLMIG_VC_URL`): refused at once with a message that says where credentials go, and
/// neither the password nor the user appears in anything it prints. The cluster and
/// the credentials in the environment are there so that a volmig that took the URL
/// would go on to start (and log its vCenter configuration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_vc_url_are_refused_and_never_printed() {
    const SECRET: &str = "S3cretPw";
    let cluster = Cluster::start().await;
    let url = format!("https://admin:{SECRET}@127.0.0.1:1/sdk");
    for (name, from_env) in [("url-flag", false), ("url-env", true)] {
        let stdout = cluster.path(&format!("{name}.out"));
        let stderr = cluster.path(&format!("{name}.err"));
        let mut args = vec![
            "run".to_owned(),
            format!("--kubeconfig={}", cluster.daemon_kubeconfig.display()),
            format!("--http-addr=127.0.0.1:{}", free_port()),
            format!("--probe-addr=127.0.0.1:{}", free_port()),
            format!("--lease-holder-id={name}"),
            "--cluster-id=url-e2e".to_owned(),
        ];
        let mut command = Command::new(e2e::volmig_bin());
        if from_env {
            command.env("VOLMIG_VC_URL", &url);
        } else {
            args.push(format!("--vc-url={url}"));
            command.env_remove("VOLMIG_VC_URL");
        }
        let mut child = command
            .args(e2e::compat_args(args))
            .env("VOLMIG_LOG", "debug")
            .env("VOLMIG_VC_USERNAME", "env-user")
            .env("VOLMIG_VC_PASSWORD", "env-password")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn volmig");
        let status = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
        let _ = child.kill().await;
        let out = std::fs::read_to_string(&stdout).unwrap_or_default();
        let err = std::fs::read_to_string(&stderr).unwrap_or_default();
        for text in [&out, &err] {
            assert!(
                !text.contains(SECRET),
                "{name}: the password is printed:\n{text}"
            );
            assert!(
                !text.contains("admin"),
                "{name}: the user is printed:\n{text}"
            );
        }
        let status = status
            .unwrap_or_else(|_| panic!("{name}: still running after 15 s:\n{err}"))
            .expect("wait");
        assert!(!status.success(), "{name}: exit {status}:\n{err}");
        assert!(
            err.contains("--vc-url must not contain credentials (user:password@)")
                && err.contains("--vc-credentials-file or VOLMIG_VC_USERNAME/VOLMIG_VC_PASSWORD"),
            "{name}: {err}"
        );
    }
}

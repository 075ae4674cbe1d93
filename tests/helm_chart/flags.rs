//! Every `volmig run` flag is reachable through a chart value, and what the chart renders
//! is what volmig's own command line accepts.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use clap::Parser as _;
use volmig::cli::{Cli, Command as CliCommand, LogFormat, LogLevel, OnPvDelete, RunArgs};

use crate::helm::{describe, render, run};

/// Values every flag test starts from: the two flags the daemon requires.
const BASE: &[&str] = &[
    "--set-string",
    "vcenter.url=https://vc.base.example/sdk",
    "--set-string",
    "clusterId=base-cluster",
];

/// What a pod name looks like once Kubernetes substitutes `$(POD_NAME)`.
pub const POD_NAME: &str = "volmig-7d9c8b5f4-x2k8q";

/// Parses rendered container args with volmig's own command line, as the container would
/// (after Kubernetes substitutes `$(POD_NAME)`).
pub fn parse_run_args(args: &[String]) -> RunArgs {
    let argv = std::iter::once("volmig".to_owned())
        .chain(args.iter().map(|a| a.replace("$(POD_NAME)", POD_NAME)));
    let cli = Cli::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("volmig rejects the chart's args {args:?}:\n{e}"));
    match cli.command {
        CliCommand::Run(run_args) => *run_args,
        other => panic!("the chart's args run {other:?}, not `volmig run`"),
    }
}

/// The long flags `volmig run --help` lists (without --help).
pub fn run_flags() -> BTreeSet<String> {
    let output = run(Command::new(env!("CARGO_BIN_EXE_volmig")).args(["run", "-h"]));
    assert!(
        output.status.success(),
        "volmig run -h: {}",
        describe(&output)
    );
    let help = String::from_utf8_lossy(&output.stdout);
    let flags: BTreeSet<String> = help
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            // `-h, --help`, `-o, --output <OUTPUT>`: the long name after the short one.
            let line = match line.as_bytes() {
                [b'-', short, b',', b' ', ..] if short.is_ascii_alphanumeric() => &line[4..],
                _ => line,
            };
            let flag = line.strip_prefix("--")?;
            let end = flag.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'));
            Some(flag[..end.unwrap_or(flag.len())].to_owned())
        })
        .filter(|flag| flag != "help")
        .collect();
    assert!(
        flags.len() >= 15,
        "too few flags parsed from `volmig run -h`: {flags:?}\n{help}"
    );
    flags
}

type Check = fn(&RunArgs) -> bool;

/// `volmig run` flags with no chart value, and why: they make no sense in the Deployment.
const NOT_CHART_REACHABLE: &[(&str, &str)] = &[
    (
        "once",
        "one dry-run pass, then exit: a Deployment would restart the pod forever; run it by \
         hand or from a Job (extraArgs)",
    ),
    (
        "output",
        "the format of the --once plan only (needs --once)",
    ),
];

/// For each `volmig run` flag: the values that set it, the argument the chart must then
/// render, and what the daemon must then parse.
fn flag_table() -> Vec<(&'static str, Vec<&'static str>, &'static str, Check)> {
    vec![
        (
            "kubeconfig",
            vec!["--set-string", "kubeconfig.existingSecret=remote-cluster"],
            "--kubeconfig=/etc/volmig/kubeconfig/kubeconfig",
            |a| a.kube.kubeconfig.as_deref() == Some("/etc/volmig/kubeconfig/kubeconfig".as_ref()),
        ),
        (
            "vc-url",
            vec!["--set-string", "vcenter.url=https://vc.flag.example/sdk"],
            "--vc-url=https://vc.flag.example/sdk",
            |a| a.vc_url.as_ref().map(url::Url::as_str) == Some("https://vc.flag.example/sdk"),
        ),
        (
            "vc-credentials-file",
            vec![], // always: the credentials Secret is always mounted
            "--vc-credentials-file=/etc/volmig/vcenter/credentials",
            |a| {
                a.vc_credentials_file.as_deref() == Some("/etc/volmig/vcenter/credentials".as_ref())
            },
        ),
        (
            "vc-ca-file",
            vec!["--set-string", "vcenter.caBundle.existingConfigMap=vc-ca"],
            "--vc-ca-file=/etc/volmig/vcenter-ca/ca.crt",
            |a| a.vc_ca_file.as_deref() == Some("/etc/volmig/vcenter-ca/ca.crt".as_ref()),
        ),
        (
            "vc-insecure",
            vec!["--set", "vcenter.insecure=true"],
            "--vc-insecure",
            |a| a.vc_insecure,
        ),
        (
            "datacenters",
            vec!["--set-string", "vcenter.datacenters={/DC0,/Folder/DC1}"],
            "--datacenters=/DC0,/Folder/DC1",
            |a| a.datacenters == ["/DC0", "/Folder/DC1"],
        ),
        (
            "csi-config",
            vec!["--set", "vcenter.csiConfig.enabled=true"],
            "--csi-config=/etc/volmig/csi-config/csi-vsphere.conf",
            |a| a.csi_config.as_deref() == Some("/etc/volmig/csi-config/csi-vsphere.conf".as_ref()),
        ),
        (
            "csi-config-secret",
            vec![
                "--set-string",
                "vcenter.csiConfig.secretRef=vmware-system-csi/vsphere-config-secret",
            ],
            "--csi-config-secret=vmware-system-csi/vsphere-config-secret",
            |a| {
                a.csi_config_secret
                    .as_ref()
                    .map(ToString::to_string)
                    .as_deref()
                    == Some("vmware-system-csi/vsphere-config-secret")
                    && a.vc_credentials_file.is_none()
            },
        ),
        (
            "cluster-id",
            vec!["--set-string", "clusterId=prod-cluster-7"],
            "--cluster-id=prod-cluster-7",
            |a| a.cluster_id.as_deref() == Some("prod-cluster-7"),
        ),
        (
            "full-sync-interval",
            vec!["--set-string", "fullSyncInterval=7m"],
            "--full-sync-interval=7m",
            |a| a.full_sync_interval == Duration::from_secs(420),
        ),
        (
            "max-concurrent-registrations",
            vec!["--set", "maxConcurrentRegistrations=16"],
            "--max-concurrent-registrations=16",
            |a| a.max_concurrent_registrations == 16,
        ),
        (
            "in-flight-grace",
            vec!["--set-string", "inFlightGrace=2m"],
            "--in-flight-grace=2m",
            |a| a.in_flight_grace == Some(Duration::from_secs(120)),
        ),
        (
            "vc-request-timeout",
            vec!["--set-string", "vcenter.requestTimeout=20s"],
            "--vc-request-timeout=20s",
            |a| a.vc_request_timeout == Duration::from_secs(20),
        ),
        (
            "kube-request-timeout",
            vec!["--set-string", "kubeRequestTimeout=2m"],
            "--kube-request-timeout=2m",
            |a| a.kube.kube_request_timeout == Duration::from_secs(120),
        ),
        (
            "vc-task-timeout",
            vec!["--set-string", "vcenter.taskTimeout=5m"],
            "--vc-task-timeout=5m",
            |a| a.vc_task_timeout == Duration::from_secs(300),
        ),
        (
            "publish-driver-cache",
            vec!["--set-string", "driverCache.publish=off"],
            "--publish-driver-cache=off",
            |a| a.publish_driver_cache == volmig::cli::PublishDriverCache::Off,
        ),
        (
            "driver-namespace",
            vec!["--set-string", "driver.namespace=csi-system"],
            "--driver-namespace=csi-system",
            |a| a.driver.driver_namespace == "csi-system",
        ),
        (
            "driver-syncer-lease",
            vec!["--set-string", "driver.syncerLease=csi-syncer"],
            "--driver-syncer-lease=csi-syncer",
            |a| a.driver.driver_syncer_lease == "csi-syncer",
        ),
        (
            "driver-deployment",
            vec!["--set-string", "driver.deployment=csi-controller"],
            "--driver-deployment=csi-controller",
            |a| a.driver.driver_deployment == "csi-controller",
        ),
        (
            "hold-driver-syncer",
            vec!["--set", "driver.holdSyncer=true"],
            "--hold-driver-syncer",
            |a| a.hold_driver_syncer,
        ),
        (
            "vc-requests-per-second",
            vec!["--set", "vcenter.requestsPerSecond=12.5"],
            "--vc-requests-per-second=12.5",
            |a| a.vc_requests_per_second == 12.5,
        ),
        (
            "on-pv-delete",
            vec!["--set-string", "onPvDelete=keep"],
            "--on-pv-delete=keep",
            |a| a.on_pv_delete == OnPvDelete::Keep,
        ),
        (
            "inline-pod-volumes",
            vec!["--set", "inlinePodVolumes=false"],
            "--inline-pod-volumes=false",
            |a| !a.inline_pod_volumes,
        ),
        (
            "gc-orphans",
            vec!["--set", "gcOrphans=true"],
            "--gc-orphans",
            |a| a.gc_orphans,
        ),
        ("dry-run", vec!["--set", "dryRun=true"], "--dry-run", |a| {
            a.dry_run
        }),
        (
            "leader-election",
            vec![
                "--set",
                "leaderElection.enabled=false",
                "--set",
                "replicaCount=1",
            ],
            "--leader-election=false",
            |a| !a.leader_election,
        ),
        (
            "lease-namespace",
            vec![
                "--set-string",
                "leaderElection.leaseNamespace=volmig-system",
            ],
            "--lease-namespace=volmig-system",
            |a| a.lease_namespace == "volmig-system",
        ),
        (
            "lease-name",
            vec!["--set-string", "leaderElection.leaseName=volmig-prod"],
            "--lease-name=volmig-prod",
            |a| a.lease_name == "volmig-prod",
        ),
        (
            "lease-holder-id",
            vec![],
            "--lease-holder-id=$(POD_NAME)",
            |a| a.lease_holder_id.as_deref() == Some(POD_NAME),
        ),
        (
            "lease-duration",
            vec!["--set-string", "leaderElection.leaseDuration=20s"],
            "--lease-duration=20s",
            |a| a.lease_duration == Duration::from_secs(20),
        ),
        (
            "http-addr",
            vec![
                "--set-string",
                "http.bindAddress=[::]",
                "--set",
                "http.port=9090",
            ],
            "--http-addr=[::]:9090",
            |a| a.http_addr.to_string() == "[::]:9090",
        ),
        (
            "probe-addr",
            vec!["--set", "http.probePort=9091"],
            "--probe-addr=0.0.0.0:9091",
            |a| a.probe_addr.to_string() == "0.0.0.0:9091",
        ),
        (
            "log-format",
            vec!["--set-string", "logFormat=json"],
            "--log-format=json",
            |a| a.log_format == LogFormat::Json,
        ),
        (
            "log-level",
            vec!["--set-string", "logLevel=debug"],
            "--log-level=debug",
            |a| a.log_level == LogLevel::Debug,
        ),
        (
            "events-namespace",
            vec!["--set-string", "events.namespace=kube-system"],
            "--events-namespace=kube-system",
            |a| a.events_namespace == "kube-system",
        ),
    ]
}

#[test]
fn every_run_flag_is_reachable_through_a_value() {
    let flags = run_flags();
    let table = flag_table();
    let covered: BTreeSet<String> = table.iter().map(|(f, ..)| (*f).to_owned()).collect();
    let exempt: BTreeSet<String> = NOT_CHART_REACHABLE
        .iter()
        .map(|(f, _)| (*f).to_owned())
        .collect();
    assert!(
        covered.is_disjoint(&exempt),
        "flags both in flag_table() and NOT_CHART_REACHABLE: {:?}",
        covered.intersection(&exempt).collect::<Vec<_>>()
    );
    let stale: Vec<&String> = exempt.difference(&flags).collect();
    assert!(
        stale.is_empty(),
        "NOT_CHART_REACHABLE lists flags volmig no longer has: {stale:?}"
    );
    let missing: Vec<&String> = flags
        .difference(&covered)
        .filter(|f| !exempt.contains(*f))
        .collect();
    assert!(
        missing.is_empty(),
        "`volmig run` flags with no chart value: {missing:?}; add a value in \
         charts/volmig/values.yaml, render it in templates/deployment.yaml, document it in \
         docs/operations.md and add it to flag_table()"
    );
    let stale: Vec<&String> = covered.difference(&flags).collect();
    assert!(
        stale.is_empty(),
        "flag_table() lists flags volmig no longer has: {stale:?}"
    );

    let defaults = render(BASE).args();
    for flag in &exempt {
        let prefix = format!("--{flag}");
        assert!(
            !defaults
                .iter()
                .any(|a| a.split('=').next() == Some(prefix.as_str())),
            "the chart renders {prefix}, listed as not chart-reachable: {defaults:?}"
        );
    }
    for (flag, sets, expected, check) in table {
        let mut extra: Vec<&str> = BASE.to_vec();
        extra.extend(sets.iter().copied());
        let args = render(&extra).args();
        assert!(
            args.iter().any(|a| a == expected),
            "--{flag}: with {sets:?} the Deployment args lack {expected:?}: {args:?}"
        );
        let prefix = format!("--{flag}");
        let rendered_flag: Vec<&String> = args
            .iter()
            .filter(|a| a.split('=').next() == Some(prefix.as_str()))
            .collect();
        assert_eq!(
            rendered_flag.len(),
            1,
            "--{flag} rendered more than once: {args:?}"
        );
        let parsed = parse_run_args(&args);
        assert!(
            check(&parsed),
            "--{flag}: volmig parsed {args:?} into {parsed:?}"
        );
        if !sets.is_empty() {
            assert!(
                !defaults.iter().any(|a| a == expected),
                "--{flag}: {expected:?} is rendered even without {sets:?}"
            );
        }
    }
    // Boolean opt-ins are absent by default.
    for off in [
        "--vc-insecure",
        "--gc-orphans",
        "--dry-run",
        "--vc-ca-file",
        "--kubeconfig",
    ] {
        assert!(
            !defaults.iter().any(|a| a.starts_with(off)),
            "{off} on by default: {defaults:?}"
        );
    }
}

/// stderr of `volmig run` against an API server that refuses connections (it fails within
/// milliseconds), with `extra` arguments and `VOLMIG_LOG` as given.
fn run_against_nothing(extra: &[&str], volmig_log: Option<&str>) -> String {
    let dir = std::env::temp_dir().join(format!("volmig-log-level-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap_or_else(|e| panic!("write {}: {e}", kubeconfig.display()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_volmig"));
    command
        .args(["run", "--vc-url=https://127.0.0.1:1/sdk", "--cluster-id=x"])
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args([
            "--leader-election=false",
            "--http-addr=127.0.0.1:0",
            "--probe-addr=127.0.0.1:0",
        ])
        .args(extra)
        .env_remove("VOLMIG_LOG")
        .env_remove("VOLMIG_LOG_LEVEL");
    if let Some(filter) = volmig_log {
        command.env("VOLMIG_LOG", filter);
    }
    let output = run(&mut command);
    assert!(
        !output.status.success(),
        "volmig run succeeded without an API server"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn log_level_flag_sets_the_level_and_volmig_log_wins() {
    let debug = run_against_nothing(&["--log-level=debug"], None);
    assert!(
        debug.contains(" DEBUG "),
        "no DEBUG line at debug:\n{debug}"
    );
    let info = run_against_nothing(&[], None);
    assert!(
        !info.contains(" DEBUG "),
        "DEBUG at the default info:\n{info}"
    );
    assert!(info.contains(" INFO "), "no INFO line at info:\n{info}");
    let error = run_against_nothing(&["--log-level=error"], None);
    assert!(
        !error.contains(" INFO ") && error.contains(" ERROR "),
        "{error}"
    );
    // The VOLMIG_LOG filter wins over --log-level.
    let filtered = run_against_nothing(&["--log-level=debug"], Some("error"));
    assert!(
        !filtered.contains(" DEBUG ") && !filtered.contains(" INFO "),
        "VOLMIG_LOG=error did not win over --log-level=debug:\n{filtered}"
    );
    let rejected =
        run(Command::new(env!("CARGO_BIN_EXE_volmig")).args(["run", "--log-level=verbose"]));
    assert!(!rejected.status.success());
}

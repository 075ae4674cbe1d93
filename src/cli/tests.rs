use super::*;

#[test]
fn durations() {
    assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
    assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(
        parse_duration("PT10M"),
        Ok(Duration::from_secs(600)),
        "ISO 8601"
    );
    for bad in ["", "10", "m", "10x", "0s", "-5s", "5 parsecs"] {
        assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn run_defaults_follow_the_contract() {
    let args = run_args(&["--vc-url", "https://vc.example/sdk", "--cluster-id", "c1"]).unwrap();
    assert_eq!(args.full_sync_interval, Duration::from_secs(600));
    assert_eq!(args.max_concurrent_registrations, 8);
    assert_eq!(args.on_pv_delete, OnPvDelete::Unregister);
    assert!(args.leader_election);
    assert_eq!(args.lease_namespace, "kube-system");
    assert_eq!(args.lease_name, "volmig");
    assert_eq!(args.http_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(args.log_format, LogFormat::Text);
    assert_eq!(
        args.kube.kube_request_timeout,
        crate::k8s::deadline::DEFAULT_KUBE_REQUEST_TIMEOUT
    );
    assert!(!args.vc_insecure);
    assert_eq!(
        args.effective_in_flight_grace(),
        (Duration::from_secs(660), false),
        "the grace covers the default request and task timeouts"
    );
}

#[test]
fn in_flight_grace_never_falls_below_the_longest_create() {
    let parse = |extra: &[&str]| {
        let mut argv = vec!["--vc-url", "https://vc/sdk", "--cluster-id", "c"];
        argv.extend_from_slice(extra);
        run_args(&argv).unwrap().effective_in_flight_grace()
    };
    let short = ["--vc-request-timeout", "2s", "--vc-task-timeout", "3s"];
    assert_eq!(parse(&short), (Duration::from_secs(5), false));
    let mut raised = short.to_vec();
    raised.extend(["--in-flight-grace", "1s"]);
    assert_eq!(parse(&raised), (Duration::from_secs(5), true));
    let mut longer = short.to_vec();
    longer.extend(["--in-flight-grace", "1m"]);
    assert_eq!(parse(&longer), (Duration::from_secs(60), false));
}

fn run_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
    let cli = Cli::try_parse_from(["volmig", "run"].iter().chain(extra))?;
    match cli.command {
        Command::Run(args) => Ok(*args),
        other => panic!("not run: {other:?}"),
    }
}

#[test]
fn url_is_required_without_csi_config_and_cluster_id_never() {
    let e = run_args(&["--cluster-id", "c"]).unwrap_err();
    assert!(e.to_string().contains("--vc-url"), "{e}");
    // The CSI driver's ConfigMap may supply the cluster ID (checked at start-up).
    let args = run_args(&["--vc-url", "https://vc/sdk"]).unwrap();
    assert_eq!(args.cluster_id, None);
    assert_eq!(args.driver.driver_namespace, "vmware-system-csi");
    let args = run_args(&["--csi-config", "/etc/csi/csi-vsphere.conf"]).unwrap();
    assert_eq!(args.vc_url, None);
    assert_eq!(args.cluster_id, None);
    assert_eq!(
        args.csi_config.as_deref(),
        Some(std::path::Path::new("/etc/csi/csi-vsphere.conf"))
    );
}

#[test]
fn plain_http_vcenter_urls_are_refused() {
    let e = run_args(&["--vc-url", "http://vc.example/sdk", "--cluster-id", "c"]).unwrap_err();
    assert!(e.to_string().contains("unencrypted"), "{e}");
    let e = run_args(&["--vc-url", "ftp://vc/sdk", "--cluster-id", "c"]).unwrap_err();
    assert!(e.to_string().contains("expected https"), "{e}");
    let e = run_args(&["--vc-url", "http://u:hunter2@vc/sdk", "--cluster-id", "c"]).unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    run_args(&[
        "--vc-url",
        "https://vc.example:8443/sdk",
        "--cluster-id",
        "c",
    ])
    .unwrap();
}

#[test]
fn requests_per_second_must_be_a_sane_positive_number() {
    for bad in ["1e-20", "0", "-1", "NaN", "inf", "-inf", "10001", "x", ""] {
        let flag = format!("--vc-requests-per-second={bad}");
        let e = run_args(&["--vc-url", "https://vc/sdk", "--cluster-id", "c", &flag]).unwrap_err();
        assert!(
            e.to_string().contains("vc-requests-per-second"),
            "{bad:?}: {e}"
        );
    }
    for (good, value) in [("0.5", 0.5), ("50", 50.0), ("10000", 10_000.0)] {
        let args = run_args(&[
            "--vc-url",
            "https://vc/sdk",
            "--cluster-id",
            "c",
            "--vc-requests-per-second",
            good,
        ])
        .unwrap();
        assert_eq!(args.vc_requests_per_second, value);
    }
}

#[test]
fn ca_file_and_insecure_conflict() {
    let r = run_args(&[
        "--vc-url",
        "https://vc/sdk",
        "--cluster-id",
        "c",
        "--vc-ca-file",
        "/ca.pem",
        "--vc-insecure",
    ]);
    assert!(r.is_err());
}

#[test]
fn credentials_in_the_vc_url_are_refused_without_repeating_them() {
    for url in [
        "https://admin:S3cretPw@vc.example/sdk",
        "https://admin@vc.example/sdk",
        "https://:S3cretPw@vc.example/sdk",
        "https://ad%6Din:S3cr%65tPw@vc.example:8443/sdk",
        "http://admin:S3cretPw@vc.example/sdk",
        " https://admin:S3cretPw@vc.example/sdk ",
    ] {
        let e = run_args(&["--vc-url", url, "--cluster-id", "c"]).unwrap_err();
        let shown = e.to_string();
        assert!(
            shown.contains("--vc-url must not contain credentials (user:password@)"),
            "{url:?}: {shown}"
        );
        assert!(
            shown.contains("--vc-credentials-file")
                && shown.contains("VOLMIG_VC_USERNAME/VOLMIG_VC_PASSWORD"),
            "{url:?}: says where credentials go: {shown}"
        );
        for secret in ["S3c", "cretPw", "ad%6D", "admin", "%65t", "vc.example"] {
            assert!(!shown.contains(secret), "{url:?} shows {secret:?}: {shown}");
        }
        assert!(parse_vc_url(url).is_err(), "{url:?}");
    }
}

#[test]
fn once_and_output_need_dry_run() {
    let base = ["--vc-url", "https://vc.example/sdk", "--cluster-id", "c"];
    let with = |extra: &[&str]| {
        let mut argv = base.to_vec();
        argv.extend_from_slice(extra);
        run_args(&argv)
    };
    let args = with(&["--dry-run", "--once"]).unwrap();
    assert!(args.dry_run && args.once);
    assert_eq!(args.output, crate::report::Format::Table);
    let args = with(&["--dry-run", "--once", "-o", "json"]).unwrap();
    assert_eq!(args.output, crate::report::Format::Json);
    let plain = with(&[]).unwrap();
    assert!(!plain.once, "off by default");
    let e = with(&["--once"]).unwrap_err();
    assert_eq!(
        e.kind(),
        clap::error::ErrorKind::MissingRequiredArgument,
        "{e}"
    );
    assert!(e.to_string().contains("--dry-run"), "{e}");
    let e = with(&["--dry-run", "--output", "json"]).unwrap_err();
    assert!(e.to_string().contains("--once"), "{e}");
}

#[test]
fn run_as_kubectl_volmig_names_the_program_kubectl_volmig() {
    for argv0 in [
        "kubectl-volmig",
        "/usr/local/bin/kubectl-volmig",
        "kubectl-volmig.exe",
    ] {
        let e = Cli::try_parse_invocation([argv0, "report", "--help"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = e.to_string();
        assert!(
            help.contains("Usage: kubectl volmig report [OPTIONS]"),
            "{argv0}: {help}"
        );
        let e = Cli::try_parse_invocation([argv0]).unwrap_err();
        assert!(
            e.to_string().contains("Usage: kubectl volmig <COMMAND>"),
            "{argv0}: {e}"
        );
        let cli = Cli::try_parse_invocation([argv0, "lookup", "--pv", "pv-a"]).unwrap();
        assert!(matches!(cli.command, Command::Lookup(l) if l.pv.as_deref() == Some("pv-a")));
    }
    for argv0 in [
        "volmig",
        "/usr/bin/volmig",
        "kubectl-volmig-old",
        "xkubectl-volmig",
    ] {
        let e = Cli::try_parse_invocation([argv0, "--help"]).unwrap_err();
        let help = e.to_string();
        assert!(!help.contains("kubectl volmig"), "{argv0}: {help}");
    }
}

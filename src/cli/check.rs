//! Flags of `volmig check` (docs/operations.md, "Preflight: `volmig check`"): those of
//! `volmig run`, read from the same `VOLMIG_*` variables (in the chart's pod, the
//! Deployment's env), and whose RBAC to check.

use clap::Args;

use super::RunArgs;

/// The `run` flags `check` accepts (so that the pod's env and a copied `run` command line
/// parse) but does not use: hidden from `volmig check --help`.
pub const DAEMON_ONLY: &[&str] = &[
    "full_sync_interval",
    "max_concurrent_registrations",
    "vc_requests_per_second",
    "in_flight_grace",
    "vc_task_timeout",
    "publish_driver_cache",
    "on_pv_delete",
    "gc_orphans",
    "dry_run",
    "once",
    "lease_holder_id",
    "lease_duration",
    "http_addr",
    "probe_addr",
    "log_format",
    "log_level",
];

/// The ServiceAccount whose rights `volmig check` reviews: `NAMESPACE/NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ServiceAccountRef {
    /// The user name Kubernetes authenticates it as: `system:serviceaccount:NS:NAME`.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups Kubernetes puts every token of it in.
    pub fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".to_owned(),
        ]
    }
}

impl std::fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Parses `NAMESPACE/NAME` (both non-empty, no further `/`).
pub fn parse_service_account(text: &str) -> Result<ServiceAccountRef, String> {
    match text.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(ServiceAccountRef {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
        }
        _ => Err(format!("{text:?} is not NAMESPACE/NAME")),
    }
}

/// Flags of `volmig check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The flags of `volmig run`.
    #[command(flatten)]
    pub run: RunArgs,

    /// NAMESPACE/NAME of the ServiceAccount the daemon runs as: its RBAC is checked (a
    /// SubjectAccessReview each; the caller needs `create` on subjectaccessreviews unless
    /// it is that ServiceAccount). The chart's pod sets it. Without it, the caller's own
    /// rights are checked, with a warning.
    #[arg(long, env = "VOLMIG_SERVICE_ACCOUNT", value_parser = parse_service_account,
          value_name = "NAMESPACE/NAME")]
    pub service_account: Option<ServiceAccountRef>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_is_namespace_slash_name() {
        let sa = parse_service_account("volmig/volmig-controller").unwrap();
        assert_eq!(
            sa.username(),
            "system:serviceaccount:volmig:volmig-controller"
        );
        assert!(
            sa.groups()
                .contains(&"system:serviceaccounts:volmig".to_owned())
        );
        for bad in ["volmig", "/x", "x/", "a/b/c", ""] {
            assert!(parse_service_account(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn check_help_lists_what_check_uses_and_no_daemon_only_flag() {
        use clap::CommandFactory as _;
        let mut cli = super::super::Cli::command();
        let help = cli
            .find_subcommand_mut("check")
            .unwrap()
            .render_long_help()
            .to_string();
        for absent in [
            "--once",
            "--http-addr",
            "--probe-addr",
            "--dry-run",
            "--gc-orphans",
            "csv",
        ] {
            assert!(!help.contains(absent), "{absent} in:\n{help}");
        }
        for present in [
            "--service-account",
            "--events-namespace",
            "--vc-url",
            "--output",
        ] {
            assert!(help.contains(present), "{present} missing:\n{help}");
        }
        // Still accepted: the pod's env and a copied `run` command line parse.
        let parsed = super::super::Cli::try_parse_invocation([
            "volmig",
            "check",
            "--vc-url=https://vc.example/sdk",
            "--http-addr=0.0.0.0:9090",
            "--service-account=volmig/volmig",
        ]);
        assert!(parsed.is_ok(), "{parsed:?}");
    }
}

//! The command line of the `volmig` binary (docs/design.md §3). Every `run` flag also reads an
//! environment variable `VOLMIG_<FLAG>`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// volmig registers in-tree vSphere vmdks as CNS volumes exactly once.
#[derive(Debug, Parser)]
#[command(name = "volmig", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The file name under which kubectl runs this binary as `kubectl volmig` (kubectl's plugin
/// convention: `kubectl volmig ARGS` executes `kubectl-volmig ARGS` found on PATH).
pub const KUBECTL_PLUGIN_FILE: &str = "kubectl-volmig";

/// The program name usage and help show when run as [`KUBECTL_PLUGIN_FILE`].
pub const KUBECTL_PLUGIN_NAME: &str = "kubectl volmig";

impl Cli {
    /// Parses a command line (`argv[0]` first) like [`Parser::try_parse_from`], except that
    /// when `argv[0]`'s file name is [`KUBECTL_PLUGIN_FILE`], usage, help and errors name
    /// the program [`KUBECTL_PLUGIN_NAME`].
    pub fn try_parse_invocation<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let mut args = args.into_iter().map(Into::into).peekable();
        let mut command = Cli::command();
        if args
            .peek()
            .is_some_and(|argv0| invoked_as_kubectl_plugin(argv0))
        {
            command = command.bin_name(KUBECTL_PLUGIN_NAME);
        }
        let matches = command.try_get_matches_from_mut(args)?;
        Cli::from_arg_matches(&matches).map_err(|e| e.with_cmd(&command))
    }

    /// [`Cli::try_parse_invocation`], printing help, version or the error and exiting as
    /// clap does.
    pub fn parse_invocation<I, T>(args: I) -> Cli
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Cli::try_parse_invocation(args).unwrap_or_else(|e| e.exit())
    }
}

/// Whether `argv0` (a path or a bare name) is the kubectl plugin's file name (`.exe` on
/// Windows).
fn invoked_as_kubectl_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .and_then(std::ffi::OsStr::to_str)
        .is_some_and(|name| name.strip_suffix(".exe").unwrap_or(name) == KUBECTL_PLUGIN_FILE)
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: watch PVs, register their vmdks, publish the mapping.
    Run(Box<RunArgs>),
    /// Print the VolumeMigration CustomResourceDefinition as YAML.
    Crd(CrdArgs),
    /// Print the CNS volume ID of a registered volume path (never registers).
    /// Exits 3 when the path is not registered yet.
    Lookup(LookupArgs),
    /// Read-only readiness report: every in-tree vSphere PV with its phase, volume ID and
    /// driver object. Exits 0 only when all are Registered (and published when required),
    /// 1 when not, 2 on errors.
    Report(ReportArgs),
    /// Read-only preflight (docs/operations.md, "Preflight: `volmig check`"): vCenter TLS,
    /// login, version, CNS, the datastores of the in-tree PVs, the cluster ID, the CSI
    /// driver and RBAC, one line each. Takes the flags and environment of `run`. Exits 0
    /// when no check fails, 1 otherwise.
    #[command(mut_arg("output", |arg| arg
        .requires(clap::builder::Resettable::<clap::Id>::Reset)
        .hide_possible_values(true)
        .help("Output format: table or json")))]
    #[command(mut_args(|arg| {
        let hide = check::DAEMON_ONLY.contains(&arg.get_id().as_str());
        arg.hide(hide)
    }))]
    Check(Box<CheckArgs>),
}

/// Flags of `volmig crd`.
#[derive(Debug, Clone, Args)]
pub struct CrdArgs {
    /// Print the vSphere CSI driver's CnsVSphereVolumeMigration CRD instead (for clusters
    /// where the driver has not installed it; the chart's driverCache.installCrd).
    #[arg(long)]
    pub driver: bool,
}

/// Where to find the Kubernetes API.
#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// Path of a kubeconfig file (default: in-cluster config, then KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "VOLMIG_KUBECONFIG", global = true)]
    pub kubeconfig: Option<PathBuf>,

    /// How long a Kubernetes request (other than a watch) may take, reply body included,
    /// before it fails and is retried; above the API server's own 60 s by default.
    #[arg(long, env = "VOLMIG_KUBE_REQUEST_TIMEOUT", global = true, default_value = "70s",
          value_parser = parse_duration)]
    pub kube_request_timeout: Duration,
}

impl From<&KubeArgs> for crate::k8s::client::KubeConnection {
    fn from(args: &KubeArgs) -> Self {
        Self {
            kubeconfig: args.kubeconfig.clone(),
            request_timeout: args.kube_request_timeout,
        }
    }
}

/// What to do when no PV references a registered vmdk any longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnPvDelete {
    /// Unregister the CNS volume (`deleteDisk=false`: the vmdk stays).
    Unregister,
    /// Keep the CNS volume registered.
    Keep,
}

impl From<OnPvDelete> for crate::controller::PvDeletePolicy {
    fn from(value: OnPvDelete) -> Self {
        match value {
            OnPvDelete::Unregister => Self::Unregister,
            OnPvDelete::Keep => Self::Keep,
        }
    }
}

impl From<&RunArgs> for crate::vcenter_config::VcenterFlags {
    fn from(args: &RunArgs) -> Self {
        Self {
            csi_config: args.csi_config.clone(),
            csi_config_secret: args.csi_config_secret.clone(),
            csi_config_secret_conf: None,
            vc_url: args.vc_url.clone(),
            vc_credentials_file: args.vc_credentials_file.clone(),
            vc_ca_file: args.vc_ca_file.clone(),
            vc_insecure: args.vc_insecure,
            datacenters: args.datacenters.clone(),
            cluster_id: args.cluster_id.clone(),
        }
    }
}

impl RunArgs {
    /// The in-flight grace in force: the flag, but never less than a create can take
    /// (request timeout + task timeout, docs/design.md §4.10). The bool is true when the flag
    /// was raised.
    pub fn effective_in_flight_grace(&self) -> (Duration, bool) {
        let floor = self.vc_request_timeout.saturating_add(self.vc_task_timeout);
        match self.in_flight_grace {
            Some(grace) if grace < floor => (floor, true),
            Some(grace) => (grace, false),
            None => (floor, false),
        }
    }
}

/// Whether to write the CSI driver's `CnsVSphereVolumeMigration` objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PublishDriverCache {
    /// Publish when the driver's CRD is served.
    Auto,
    /// Always publish (start-up fails when the CRD is not served).
    On,
    /// Never publish (existing driver objects are still adopted from).
    Off,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Least severe log level written (docs/operations.md "Logs"); the `VOLMIG_LOG` filter,
/// when set, wins over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Progress, warnings and errors.
    Info,
    /// Also each decision.
    Debug,
    /// Everything, HTTP exchanges included.
    Trace,
}

/// Flags of `volmig run` (the command-line contract of docs/design.md §3.1).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubernetes connection.
    #[command(flatten)]
    pub kube: KubeArgs,

    /// The vSphere CSI driver's csi-vsphere.conf (its Secret `vsphere-config-secret`,
    /// mounted as it is): supplies the vCenter URL, credentials (re-read on change), CA,
    /// datacenters and cluster ID; the flags below override each of them.
    #[arg(long, env = "VOLMIG_CSI_CONFIG")]
    pub csi_config: Option<PathBuf>,

    /// NAMESPACE/NAME of the vSphere CSI driver's Secret whose `csi-vsphere.conf` key is
    /// read through the Kubernetes API and watched (a rotated password is used at the next
    /// login); without a value, the driver's vmware-system-csi/vsphere-config-secret.
    /// Excludes --csi-config and --vc-credentials-file (docs/design.md §8.5).
    #[arg(long, env = "VOLMIG_CSI_CONFIG_SECRET", num_args = 0..=1,
          default_missing_value = crate::credentials::secret::DEFAULT_SECRET,
          value_parser = crate::credentials::secret::parse_ref,
          conflicts_with_all = ["csi_config", "vc_credentials_file"])]
    pub csi_config_secret: Option<crate::credentials::secret::SecretRef>,

    /// vCenter SDK URL, e.g. https://vc.example/sdk (https only). Required unless
    /// --csi-config names the vCenter.
    #[arg(long, env = "VOLMIG_VC_URL", value_parser = VcUrlParser,
          required_unless_present_any = ["csi_config", "csi_config_secret"])]
    pub vc_url: Option<url::Url>,

    /// File with `username` and `password` lines (a mounted Secret), or a directory with
    /// files `username` and `password` (a mounted kubernetes.io/basic-auth Secret). Without
    /// it, VOLMIG_VC_USERNAME and VOLMIG_VC_PASSWORD are read.
    #[arg(long, env = "VOLMIG_VC_CREDENTIALS_FILE")]
    pub vc_credentials_file: Option<PathBuf>,

    /// PEM bundle of CAs to trust for vCenter instead of the system roots.
    #[arg(long, env = "VOLMIG_VC_CA_FILE", conflicts_with = "vc_insecure")]
    pub vc_ca_file: Option<PathBuf>,

    /// Skip TLS verification of vCenter (explicit opt-in; logged as a warning).
    #[arg(long, env = "VOLMIG_VC_INSECURE")]
    pub vc_insecure: bool,

    /// Comma-separated datacenter paths to search for datastores (default: all).
    #[arg(long, env = "VOLMIG_DATACENTERS", value_delimiter = ',')]
    pub datacenters: Vec<String>,

    /// CNS container-cluster ID written on registrations. Optional: else `cluster-id` in
    /// the [Global] section of --csi-config, else the vSphere CSI driver's ConfigMap
    /// `vsphere-csi-cluster-id` in --driver-namespace. volmig refuses to start when it
    /// differs from that ConfigMap's, or when none of the three gives one.
    #[arg(long, env = "VOLMIG_CLUSTER_ID")]
    pub cluster_id: Option<String>,

    /// Interval of the full sync, e.g. 10m, 30s.
    #[arg(long, env = "VOLMIG_FULL_SYNC_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub full_sync_interval: Duration,

    /// Backend calls in flight at most.
    #[arg(long, env = "VOLMIG_MAX_CONCURRENT_REGISTRATIONS", default_value_t = 8,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max_concurrent_registrations: u16,

    /// Backend calls started per second at most.
    #[arg(long, env = "VOLMIG_VC_REQUESTS_PER_SECOND", default_value_t = 50.0,
          value_parser = parse_requests_per_second)]
    pub vc_requests_per_second: f64,

    /// How long a create may still complete in vCenter after it was sent (or after its
    /// Registering marker was first seen); a path in Registering is only looked at, never
    /// created again, during it. Never less than request timeout + task timeout (the
    /// default); a smaller value is raised to that with a warning.
    #[arg(long, env = "VOLMIG_IN_FLIGHT_GRACE", value_parser = parse_duration)]
    pub in_flight_grace: Option<Duration>,

    /// Timeout of one HTTP request to vCenter.
    #[arg(long, env = "VOLMIG_VC_REQUEST_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub vc_request_timeout: Duration,

    /// How long volmig waits for a vCenter task (e.g. a CNS create) to finish.
    #[arg(long, env = "VOLMIG_VC_TASK_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub vc_task_timeout: Duration,

    /// Write the CSI driver's CnsVSphereVolumeMigration objects for every Registered path
    /// (auto: when that CRD is served).
    #[arg(long, env = "VOLMIG_PUBLISH_DRIVER_CACHE", value_enum, default_value_t = PublishDriverCache::Auto)]
    pub publish_driver_cache: PublishDriverCache,

    /// Where the vSphere CSI driver runs.
    #[command(flatten)]
    pub driver: DriverArgs,

    /// Hold the CSI driver syncer's Lease (docs/design.md §8.7): the leading replica takes it
    /// (waiting while the driver's syncer holds it live), so the driver registers nothing
    /// on a miss; when every in-tree path is Registered and published it releases the Lease
    /// and follows the driver. For migrations before the driver runs.
    #[arg(long, env = "VOLMIG_HOLD_DRIVER_SYNCER")]
    pub hold_driver_syncer: bool,

    /// Watch pods for inline `vsphereVolume`s (no PV): their vmdks are registered,
    /// published and kept like PVs' (docs/design.md §8.9). Needs list/watch of pods
    /// cluster-wide; turn off only where no pod names a vmdk inline.
    #[arg(long, env = "VOLMIG_INLINE_POD_VOLUMES", default_value_t = true, action = clap::ArgAction::Set)]
    pub inline_pod_volumes: bool,

    /// What to do when no PV references a vmdk any longer.
    #[arg(long, env = "VOLMIG_ON_PV_DELETE", value_enum, default_value_t = OnPvDelete::Unregister)]
    pub on_pv_delete: OnPvDelete,

    /// Unregister volmig-named CNS volumes that no VolumeMigration or PV references.
    #[arg(long, env = "VOLMIG_GC_ORPHANS")]
    pub gc_orphans: bool,

    /// Decide and log what would be done (with counts in `volmig_dry_run_actions`), every
    /// --full-sync-interval, without taking the Lease and without writing to Kubernetes
    /// or vCenter.
    #[arg(long, env = "VOLMIG_DRY_RUN")]
    pub dry_run: bool,

    /// With --dry-run: one pass, then print the plan (what would be registered, repaired,
    /// published, unregistered) on stdout and exit 0 when nothing would be done, 1 when
    /// something would, 2 on errors. No HTTP endpoints.
    #[arg(long, env = "VOLMIG_ONCE", requires = "dry_run")]
    pub once: bool,

    /// Format of the --once plan.
    #[arg(short = 'o', long = "output", env = "VOLMIG_OUTPUT", value_enum,
          default_value_t = crate::report::Format::Table, requires = "once")]
    pub output: crate::report::Format,

    /// Use Lease-based leader election (turn off only for a single replica).
    #[arg(long, env = "VOLMIG_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    /// Namespace of the leader-election Lease (the Helm chart sets its release namespace).
    #[arg(long, env = "VOLMIG_LEASE_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, env = "VOLMIG_LEASE_NAME", default_value = "volmig")]
    pub lease_name: String,

    /// This replica's identity in the Lease (default: $POD_NAME, else hostname + random suffix).
    #[arg(long, env = "VOLMIG_LEASE_HOLDER_ID")]
    pub lease_holder_id: Option<String>,

    /// Lease duration; a follower takes over at most this long after the leader stops renewing.
    #[arg(long, env = "VOLMIG_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "VOLMIG_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,

    /// Address of the kubelet's probes /healthz and /readyz only, apart from --http-addr so
    /// that no client of the metrics port can delay a probe. Must differ from --http-addr.
    #[arg(long, env = "VOLMIG_PROBE_ADDR", default_value = "0.0.0.0:8081")]
    pub probe_addr: SocketAddr,

    /// Log format.
    #[arg(long, env = "VOLMIG_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level. The `VOLMIG_LOG` filter (e.g. `info,volmig=debug`), when set, wins.
    #[arg(long, env = "VOLMIG_LOG_LEVEL", value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// Namespace of the Events about (cluster-scoped) VolumeMigrations and PVs.
    #[arg(long, env = "VOLMIG_EVENTS_NAMESPACE", default_value = "default",
          value_parser = crate::k8s::events::EVENTS_NAMESPACES)]
    pub events_namespace: String,
}

/// Flags of `volmig lookup`.
#[derive(Debug, Clone, Args)]
pub struct LookupArgs {
    /// Kubernetes connection.
    #[command(flatten)]
    pub kube: KubeArgs,

    /// The in-tree volume path, e.g. "[LocalDS_0] kubevols/disk-1.vmdk".
    #[arg(required_unless_present = "pv", conflicts_with = "pv")]
    pub volume_path: Option<String>,

    /// Look up the in-tree vSphere PV of this name instead of a path.
    #[arg(long, value_name = "NAME")]
    pub pv: Option<String>,
}

/// Flags of `volmig report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Kubernetes connection.
    #[command(flatten)]
    pub kube: KubeArgs,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = crate::report::Format::Table)]
    pub output: crate::report::Format,

    /// Whether PVs must also be published to the vSphere CSI driver's cache
    /// (CnsVSphereVolumeMigration objects): auto = when that CRD is served.
    #[arg(long, value_enum, default_value_t = crate::report::DriverCacheRequirement::Auto)]
    pub require_driver_cache: crate::report::DriverCacheRequirement,

    /// Print only the PVs that are not ready (totals still count all).
    #[arg(long)]
    pub not_ready: bool,

    /// Where the vSphere CSI driver runs.
    #[command(flatten)]
    pub driver: DriverArgs,
}

impl ReportArgs {
    /// What the report reads and prints, as these flags ask.
    pub fn options(&self) -> crate::report::ReportOptions {
        crate::report::ReportOptions {
            output: self.output,
            require_driver_cache: self.require_driver_cache,
            not_ready: self.not_ready,
            syncer: self.driver.syncer_lease(),
        }
    }
}

mod check;
mod driver;
mod parse;

pub use check::{CheckArgs, ServiceAccountRef, parse_service_account};
pub use driver::DriverArgs;
pub use parse::{
    MAX_REQUESTS_PER_SECOND, VcUrlParser, parse_duration, parse_requests_per_second, parse_vc_url,
};

#[cfg(test)]
mod tests;

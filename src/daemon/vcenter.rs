//! The vCenter side of the daemon: the flags with the CSI config Secret read, the settings
//! resolved once per run, and the CNS backend built from them (`volmig run`, `--dry-run`
//! and `volmig check` share it).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::user_agent;
use crate::backend::VolumeBackend;
use crate::backend::cns::{CnsBackend, CnsConfig, CnsOptions};
use crate::backend::metered::MeteredBackend;
use crate::backend::on_demand::OnDemandBackend;
use crate::cli::RunArgs;
use crate::metrics::Metrics;
use crate::vcenter_config::{VcenterFlags, VcenterSettings};

/// The CNS backend's connection for `settings` with these credentials: URL, trust (CA
/// file, insecure, thumbprint), datacenters and cluster distribution. One place for
/// `volmig run` and `volmig check`, so the preflight connects exactly as the daemon does.
pub(crate) fn cns_connection(
    settings: &crate::vcenter_config::VcenterSettings,
    username: impl Into<String>,
    password: impl Into<crate::credentials::Password>,
) -> (CnsConfig, CnsOptions) {
    let mut config = CnsConfig::new(settings.url.clone(), username, password);
    config.ca_file = settings.ca_file.clone();
    config.insecure = settings.insecure;
    config.thumbprint = settings.thumbprint.clone();
    config.datacenters = settings.datacenters.clone();
    let options = CnsOptions {
        cluster_distribution: settings.cluster_distribution.clone().unwrap_or_default(),
    };
    (config, options)
}

/// The vCenter flags of `args` with `--csi-config-secret` read: once, or, with `watch`,
/// kept current until that token is cancelled (docs/design.md §8.5). Everything that
/// resolves the vCenter settings takes them from here.
pub(crate) async fn vcenter_flags(
    client: &kube::Client,
    args: &RunArgs,
    watch: Option<CancellationToken>,
) -> anyhow::Result<VcenterFlags> {
    let mut flags = VcenterFlags::from(args);
    if let Some(secret) = &args.csi_config_secret {
        flags.csi_config_secret_conf = Some(match watch {
            Some(shutdown) => crate::credentials::secret::start(client, secret, shutdown).await?,
            None => crate::credentials::secret::read(client, secret).await?,
        });
    }
    Ok(flags)
}

/// The vCenter settings of this run, resolved once (their warnings logged once); the
/// cluster ID check and the CNS backend both take them from here.
pub(super) fn vcenter_settings(vcenter: &VcenterFlags) -> anyhow::Result<VcenterSettings> {
    let settings = crate::vcenter_config::resolve(vcenter.clone())?;
    for warning in &settings.warnings {
        warn!("{warning}");
    }
    Ok(settings)
}

pub(super) fn cns_backend(
    args: &RunArgs,
    settings: &VcenterSettings,
    metrics: &Metrics,
    holder_id: &str,
) -> anyhow::Result<Arc<dyn VolumeBackend>> {
    let source = settings.credentials.clone();
    // Unreadable credentials are a start-up error; later they are read again at each login.
    let first = source.load()?;
    info!(
        vcenter = %settings.url,
        user = %first.username,
        credentials = %source.describe(),
        "vCenter configuration"
    );
    let (mut template, options) = cns_connection(settings, first.username, first.password);
    template.user_agent = user_agent(holder_id);
    template.request_timeout = args.vc_request_timeout;
    template.task_timeout = args.vc_task_timeout;
    let probe = crate::credentials::VersionProbe::new(source.clone(), Duration::from_secs(1));
    let connect = move || {
        let mut config = template.clone();
        let options = options.clone();
        let source = source.clone();
        async move {
            let credentials = source.load().map_err(|e| {
                crate::backend::BackendError::new(
                    crate::backend::ErrorClass::Transient,
                    "Login",
                    "CredentialsUnreadable",
                    e.to_string(),
                )
            })?;
            config.username = credentials.username;
            config.password = credentials.password;
            let backend = CnsBackend::connect_with(config, options).await?;
            Ok(Arc::new(backend) as Arc<dyn VolumeBackend>)
        }
    };
    let on_demand: Arc<dyn VolumeBackend> = Arc::new(OnDemandBackend::new(
        connect,
        move || probe.current(),
        crate::backend::on_demand::LoginBackoff::default(),
    ));
    Ok(Arc::new(MeteredBackend::new(on_demand, metrics.clone())))
}

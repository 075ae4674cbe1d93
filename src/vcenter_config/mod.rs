//! How volmig reaches vCenter, from the flags of `volmig run` and the vSphere CSI driver's
//! `csi-vsphere.conf` (`--csi-config`, parsed by [`crate::credentials::csi`], or
//! `--csi-config-secret`, read through the API by [`crate::credentials::secret`];
//! docs/design.md §8.5): the configuration supplies URL, credentials, CA, datacenters and
//! cluster ID; explicit flags override each of them. The cluster ID is then checked against
//! the CSI driver's at start-up (src/daemon/cluster_id.rs).
//! Only the credentials are read again later (at every login); the rest is fixed at start.

use std::path::PathBuf;

use url::Url;

use crate::credentials::csi::CsiConfig;
use crate::credentials::{CredentialSource, secret};

/// The flags of `volmig run` that say how to reach vCenter; the command line builds them
/// from its arguments (`cli::RunArgs`), so this module knows nothing of the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VcenterFlags {
    /// `--csi-config`: the driver's `csi-vsphere.conf` file.
    pub csi_config: Option<PathBuf>,
    /// `--csi-config-secret`: the Secret holding the driver's `csi-vsphere.conf`.
    pub csi_config_secret: Option<secret::SecretRef>,
    /// That Secret's content as the caller read it (and, in the daemon, keeps current):
    /// [`resolve`] reads nothing from the API itself.
    pub csi_config_secret_conf: Option<secret::SecretConf>,
    /// `--vc-url`.
    pub vc_url: Option<Url>,
    /// `--vc-credentials-file`.
    pub vc_credentials_file: Option<PathBuf>,
    /// `--vc-ca-file`.
    pub vc_ca_file: Option<PathBuf>,
    /// `--vc-insecure`.
    pub vc_insecure: bool,
    /// `--datacenters`.
    pub datacenters: Vec<String>,
    /// `--cluster-id`.
    pub cluster_id: Option<String>,
}

/// Everything the CNS backend and the registrar need to know about vCenter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcenterSettings {
    /// The SDK URL (`https` only).
    pub url: Url,
    /// The CNS container-cluster ID volmig is configured with (`--cluster-id`, else
    /// `[Global] cluster-id` of `--csi-config`), if any. The daemon checks it against the
    /// CSI driver's own at start-up, and takes the driver's when this is `None`
    /// (src/daemon/cluster_id.rs).
    pub cluster_id: Option<ConfiguredClusterId>,
    /// `[Global] cluster-distribution` of the CSI config, if any.
    pub cluster_distribution: Option<String>,
    /// CA bundle to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification.
    pub insecure: bool,
    /// `thumbprint` of the CSI config (`AA:BB:...`): the one server certificate to trust,
    /// unless `--vc-ca-file`, `--vc-insecure` or `insecure-flag` decide (docs/design.md §8.5).
    pub thumbprint: Option<String>,
    /// Datacenters to search; empty means all.
    pub datacenters: Vec<String>,
    /// Where the credentials are read from at each login.
    pub credentials: CredentialSource,
    /// Things worth a warning at start-up (never secrets).
    pub warnings: Vec<String>,
}

/// Where a configured cluster ID came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterIdSource {
    /// `--cluster-id` (`VOLMIG_CLUSTER_ID`).
    Flag,
    /// `[Global] cluster-id` of the `--csi-config` file at this path.
    CsiConfig(PathBuf),
    /// `[Global] cluster-id` of the `--csi-config-secret` Secret (`NAMESPACE/NAME`).
    CsiConfigSecret(String),
}

impl std::fmt::Display for ClusterIdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterIdSource::Flag => f.write_str("--cluster-id"),
            ClusterIdSource::CsiConfig(path) => {
                write!(f, "[Global] cluster-id of --csi-config {}", path.display())
            }
            ClusterIdSource::CsiConfigSecret(secret) => {
                write!(f, "[Global] cluster-id of --csi-config-secret {secret}")
            }
        }
    }
}

/// A cluster ID from volmig's own configuration, with where it came from (the cluster ID
/// is not a secret: messages show it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredClusterId {
    /// The ID.
    pub id: String,
    /// The flag or file that gave it.
    pub source: ClusterIdSource,
}

/// Why the settings are incomplete or unusable; the message says which flag or key to set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// Combines the flags with `--csi-config` (read now). Credentials: `--vc-credentials-file`,
/// else `VOLMIG_VC_USERNAME`/`VOLMIG_VC_PASSWORD` when set, else the CSI config, else
/// the environment (which then reports what is missing).
pub fn resolve(args: impl Into<VcenterFlags>) -> Result<VcenterSettings, SettingsError> {
    let env_user = std::env::var_os("VOLMIG_VC_USERNAME").is_some_and(|u| !u.is_empty());
    resolve_with(args, env_user)
}

/// [`resolve`] with the presence of `VOLMIG_VC_USERNAME` given (for tests).
pub fn resolve_with(
    args: impl Into<VcenterFlags>,
    env_user: bool,
) -> Result<VcenterSettings, SettingsError> {
    let args: VcenterFlags = args.into();
    let csi = match (&args.csi_config, &args.csi_config_secret) {
        (Some(path), _) => Some(Csi {
            label: format!("CSI config {}", path.display()),
            cluster_id_source: ClusterIdSource::CsiConfig(path.clone()),
            credentials: CredentialSource::CsiConfig(path.clone()),
            config: CsiConfig::load(path).map_err(SettingsError)?,
        }),
        (None, Some(secret)) => {
            let store = args
                .csi_config_secret_conf
                .clone()
                .filter(|c| c.secret() == secret)
                .ok_or_else(|| {
                    SettingsError(format!("--csi-config-secret {secret} has not been read"))
                })?;
            let text = store.text().ok_or_else(|| {
                SettingsError(format!("{} is missing or empty", store.describe()))
            })?;
            let config = CsiConfig::parse(&text)
                .map_err(|e| SettingsError(format!("{}: {e}", store.describe())))?;
            Some(Csi {
                label: format!("CSI config {}", store.describe()),
                cluster_id_source: ClusterIdSource::CsiConfigSecret(secret.to_string()),
                credentials: CredentialSource::CsiConfigSecret(store),
                config,
            })
        }
        (None, None) => None,
    };
    let mut warnings = Vec::new();
    let url = match (&args.vc_url, &csi) {
        (Some(url), _) => url.clone(),
        (None, Some(csi)) => csi
            .config
            .url()
            .map_err(|e| SettingsError(format!("{}: {e}", csi.label)))?,
        (None, None) => {
            return Err(SettingsError(
                "no vCenter URL: set --vc-url (VOLMIG_VC_URL) or --csi-config (VOLMIG_CSI_CONFIG)"
                    .to_owned(),
            ));
        }
    };
    check_url(&url).map_err(SettingsError)?;
    // A missing cluster ID is no error here: the CSI driver's ConfigMap may supply it.
    let cluster_id = match (&args.cluster_id, &csi) {
        (Some(id), _) if !id.trim().is_empty() => Some(ConfiguredClusterId {
            id: id.clone(),
            source: ClusterIdSource::Flag,
        }),
        (_, Some(csi)) => csi.config.cluster_id.clone().map(|id| ConfiguredClusterId {
            id,
            source: csi.cluster_id_source.clone(),
        }),
        (_, None) => None,
    };
    let (ca_file, insecure) = if let Some(ca) = &args.vc_ca_file {
        (Some(ca.clone()), false)
    } else if args.vc_insecure {
        (None, true)
    } else if let Some(Csi { label, config, .. }) = &csi {
        if config.insecure && config.ca_file.is_some() {
            warnings.push(format!(
                "{label}: insecure-flag is on, so ca-file is not used (as in the driver)"
            ));
        }
        if config.insecure {
            (None, true)
        } else {
            (config.ca_file.clone(), false)
        }
    } else {
        (None, false)
    };
    let thumbprint = match &csi {
        Some(c) if args.vc_ca_file.is_none() && !args.vc_insecure && !c.config.insecure => {
            c.config.thumbprint.clone()
        }
        _ => None,
    };
    let datacenters = if !args.datacenters.is_empty() {
        args.datacenters.clone()
    } else {
        csi.as_ref()
            .map(|c| c.config.datacenters.clone())
            .unwrap_or_default()
    };
    let credentials = match (&args.vc_credentials_file, &csi) {
        (Some(file), _) => CredentialSource::File(file.clone()),
        (None, Some(_)) if env_user => CredentialSource::Environment,
        (None, Some(csi)) => csi.credentials.clone(),
        (None, None) => CredentialSource::Environment,
    };
    Ok(VcenterSettings {
        url,
        cluster_id,
        cluster_distribution: csi.and_then(|c| c.config.cluster_distribution),
        ca_file,
        insecure,
        thumbprint,
        datacenters,
        credentials,
        warnings,
    })
}

/// The driver's configuration, from a file or a Secret.
struct Csi {
    /// `CSI config PATH` or `CSI config Secret NS/NAME key csi-vsphere.conf`, for messages.
    label: String,
    /// Where its cluster ID comes from.
    cluster_id_source: ClusterIdSource,
    /// Its `user` / `password`, read again at each login.
    credentials: CredentialSource,
    /// The parsed content (as at start-up).
    config: CsiConfig,
}

/// The refusal of a vCenter URL with a user or password in it (`user:password@`); it
/// shows neither.
pub const CREDENTIALS_IN_URL: &str = "--vc-url must not contain credentials (user:password@); put them in --vc-credentials-file or VOLMIG_VC_USERNAME/VOLMIG_VC_PASSWORD";

/// Refuses vCenter URLs volmig must not use: any with a user or password in it
/// ([`CREDENTIALS_IN_URL`]), anything but `https` (the password would go over the wire in
/// clear) and URLs without a host.
pub fn check_url(url: &Url) -> Result<(), String> {
    // First: the messages below show the URL, which then holds no user and no password.
    if !url.username().is_empty() || url.password().is_some() {
        return Err(CREDENTIALS_IN_URL.to_owned());
    }
    match url.scheme() {
        "https" => {}
        "http" => {
            return Err(format!(
                "vCenter URL {url} is plain http: volmig would send the vCenter password unencrypted; use https"
            ));
        }
        other => {
            return Err(format!(
                "vCenter URL {url} has scheme {other}; expected https"
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("vCenter URL {url} has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

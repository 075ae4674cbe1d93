//! How volmig reaches vCenter, from the flags of `volmig run` and the vSphere CSI driver's
//! `csi-vsphere.conf` (`--csi-config`, parsed by [`csi`]): the file supplies URL,
//! credentials, CA, datacenters and cluster ID; explicit flags override each of them.
//! Only the credentials are read again later (at every login); the rest is fixed at start.

use std::path::PathBuf;

use url::Url;

use crate::cli::RunArgs;
use crate::credentials::CredentialSource;

pub mod csi;

use csi::CsiConfig;

/// Everything the CNS backend and the registrar need to know about vCenter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcenterSettings {
    /// The SDK URL (`https` only).
    pub url: Url,
    /// CNS container-cluster ID written on registrations.
    pub cluster_id: String,
    /// `[Global] cluster-distribution` of the CSI config, if any.
    pub cluster_distribution: Option<String>,
    /// CA bundle to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification.
    pub insecure: bool,
    /// Datacenters to search; empty means all.
    pub datacenters: Vec<String>,
    /// Where the credentials are read from at each login.
    pub credentials: CredentialSource,
    /// Things worth a warning at start-up (never secrets).
    pub warnings: Vec<String>,
}

/// Why the settings are incomplete or unusable; the message says which flag or key to set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// Combines the flags with `--csi-config` (read now). Credentials: `--vc-credentials-file`,
/// else `VOLMIG_VC_USERNAME`/`VOLMIG_VC_PASSWORD` when set, else the CSI config, else
/// the environment (which then reports what is missing).
pub fn resolve(args: &RunArgs) -> Result<VcenterSettings, SettingsError> {
    let env_user = std::env::var_os("VOLMIG_VC_USERNAME").is_some_and(|u| !u.is_empty());
    resolve_with(args, env_user)
}

/// [`resolve`] with the presence of `VOLMIG_VC_USERNAME` given (for tests).
pub fn resolve_with(args: &RunArgs, env_user: bool) -> Result<VcenterSettings, SettingsError> {
    let csi = match &args.csi_config {
        Some(path) => Some((path, CsiConfig::load(path).map_err(SettingsError)?)),
        None => None,
    };
    let mut warnings = Vec::new();
    let url = match (&args.vc_url, &csi) {
        (Some(url), _) => url.clone(),
        (None, Some((path, config))) => config
            .url()
            .map_err(|e| SettingsError(format!("CSI config {}: {e}", path.display())))?,
        (None, None) => {
            return Err(SettingsError(
                "no vCenter URL: set --vc-url (VOLMIG_VC_URL) or --csi-config (VOLMIG_CSI_CONFIG)"
                    .to_owned(),
            ));
        }
    };
    check_url(&url).map_err(SettingsError)?;
    let cluster_id = match (&args.cluster_id, &csi) {
        (Some(id), _) if !id.trim().is_empty() => id.clone(),
        (_, Some((_, config))) if config.cluster_id.is_some() => {
            config.cluster_id.clone().unwrap_or_default()
        }
        (_, Some((path, _))) => {
            return Err(SettingsError(format!(
                "no CNS cluster ID: set --cluster-id (VOLMIG_CLUSTER_ID) or cluster-id in the [Global] section of {}",
                path.display()
            )));
        }
        (_, None) => {
            return Err(SettingsError(
                "no CNS cluster ID: set --cluster-id (VOLMIG_CLUSTER_ID) or --csi-config"
                    .to_owned(),
            ));
        }
    };
    let (ca_file, insecure) = if let Some(ca) = &args.vc_ca_file {
        (Some(ca.clone()), false)
    } else if args.vc_insecure {
        (None, true)
    } else if let Some((path, config)) = &csi {
        if config.insecure && config.ca_file.is_some() {
            warnings.push(format!(
                "CSI config {}: insecure-flag is on, so ca-file is not used (as in the driver)",
                path.display()
            ));
        }
        if config.has_thumbprint && config.ca_file.is_none() && !config.insecure {
            warnings.push(format!(
                "CSI config {}: thumbprint is not supported; the certificate is verified with the system roots (set ca-file or --vc-ca-file)",
                path.display()
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
    let datacenters = if !args.datacenters.is_empty() {
        args.datacenters.clone()
    } else {
        csi.as_ref()
            .map(|(_, c)| c.datacenters.clone())
            .unwrap_or_default()
    };
    let credentials = match (&args.vc_credentials_file, &csi) {
        (Some(file), _) => CredentialSource::File(file.clone()),
        (None, Some(_)) if env_user => CredentialSource::Environment,
        (None, Some((path, _))) => CredentialSource::CsiConfig((*path).clone()),
        (None, None) => CredentialSource::Environment,
    };
    Ok(VcenterSettings {
        url,
        cluster_id,
        cluster_distribution: csi.and_then(|(_, c)| c.cluster_distribution),
        ca_file,
        insecure,
        datacenters,
        credentials,
        warnings,
    })
}

/// Refuses vCenter URLs volmig must not use: anything but `https` (the password would go
/// over the wire in clear) and URLs without a host.
pub fn check_url(url: &Url) -> Result<(), String> {
    // Never repeat a password embedded in the URL.
    let mut shown = url.clone();
    let _ = shown.set_password(None);
    let url = &shown;
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

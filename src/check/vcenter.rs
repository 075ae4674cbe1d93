//! The vCenter checks of `volmig check` (docs/operations.md, "Preflight: `volmig check`";
//! docs/design.md §8.5): TLS, login, version and create path, CNS, and the datastores of
//! the in-tree PVs. Pure: [`super::probe`] makes the calls and hands their results here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::backend::cns::VcenterVersion;
use crate::backend::{BackendError, ErrorClass};

use super::model::Check;

/// Name of the TLS line.
pub const TLS: &str = "vCenter TLS";
/// Name of the login line.
pub const LOGIN: &str = "vCenter login";
/// Name of the version line.
pub const VERSION: &str = "vCenter version";
/// Name of the CNS line.
pub const CNS: &str = "CNS";
/// Name of the datastores line.
pub const DATASTORES: &str = "Datastores";

/// How vCenter's certificate is trusted (from `--vc-ca-file`, `--vc-insecure`,
/// `csi-vsphere.conf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The PEM bundle at this path.
    CaFile(PathBuf),
    /// The system's roots.
    SystemRoots,
    /// No verification.
    Insecure,
    /// Only the certificate with this thumbprint (`thumbprint` of `csi-vsphere.conf`).
    Thumbprint(String),
}

impl Trust {
    fn describe(&self) -> String {
        match self {
            Trust::CaFile(path) => format!("the CA file {}", path.display()),
            Trust::SystemRoots => "the system roots".to_owned(),
            Trust::Insecure => "nothing (--vc-insecure)".to_owned(),
            Trust::Thumbprint(thumbprint) => {
                format!("the certificate pinned by thumbprint {thumbprint}")
            }
        }
    }
}

/// The fix for an unverified certificate.
const WRONG_CA: &str = "wrong CA? set --vc-ca-file / vcenter.caBundle to the CA that signed \
                        vCenter's certificate";

/// Operations of a connect that run before the login: their failure means vCenter was not
/// reached (or its certificate not trusted).
const BEFORE_LOGIN: [&str; 2] = ["Connect", "RetrieveServiceContent"];

/// A line for a check that did not run because `because` failed.
pub fn not_checked(name: &str, because: &str) -> Check {
    Check::fail(
        name,
        format!("not checked: {because} failed"),
        format!("fix {because} first"),
    )
}

/// The TLS, login and version lines from connecting to `url` (which logs in and reads the
/// inventory): `Ok` with the version read, or the connect error. The bool says whether the
/// later checks can run.
pub fn connect_checks(
    url: &str,
    user: &str,
    trust: &Trust,
    result: Result<&VcenterVersion, &BackendError>,
) -> (Vec<Check>, bool) {
    let tls_ok = || match trust {
        Trust::Insecure => Check::warn(
            TLS,
            format!("{url} reached; certificate NOT verified (--vc-insecure)"),
            "set --vc-ca-file / vcenter.caBundle and drop --vc-insecure",
        ),
        _ => Check::pass(
            TLS,
            format!("{url}: certificate verified against {}", trust.describe()),
        ),
    };
    let login_ok = || Check::pass(LOGIN, format!("logged in as '{user}'"));
    match result {
        Ok(version) => (vec![tls_ok(), login_ok(), version_check(version)], true),
        Err(e) if e.operation == "Login" => {
            let fix = if e.fault == "InvalidLogin" || e.class == ErrorClass::NotAuthenticated {
                "InvalidLogin: check the credentials Secret (--vc-credentials-file, or user and \
                 password of csi-vsphere.conf)"
            } else {
                "check that vCenter answers logins (SessionManager)"
            };
            (
                vec![
                    tls_ok(),
                    Check::fail(LOGIN, format!("{}: {}", e.fault, e.message), fix),
                    not_checked(VERSION, "vCenter login"),
                ],
                false,
            )
        }
        Err(e) if BEFORE_LOGIN.contains(&e.operation) => {
            let fix = match e.fault.as_str() {
                "TlsCertificate" => WRONG_CA.to_owned(),
                "InvalidConfiguration" => {
                    format!("{WRONG_CA}; the configured trust is {}", trust.describe())
                }
                _ => "check --vc-url / the VirtualCenter section of csi-vsphere.conf and that \
                      this host reaches vCenter on 443 (NetworkPolicy, proxy)"
                    .to_owned(),
            };
            (
                vec![
                    Check::fail(
                        TLS,
                        format!("{}: {} (trusting {})", e.fault, e.message, trust.describe()),
                        fix,
                    ),
                    not_checked(LOGIN, "vCenter TLS"),
                    not_checked(VERSION, "vCenter TLS"),
                ],
                false,
            )
        }
        // After the login: the inventory (e.g. a configured datacenter that does not exist).
        Err(e) => (
            vec![
                tls_ok(),
                login_ok(),
                Check::fail(
                    VERSION,
                    format!("inventory not read: {}: {}", e.fault, e.message),
                    "check --datacenters / datacenters of csi-vsphere.conf",
                ),
            ],
            false,
        ),
    }
}

/// The TLS line with the configuration's trust warnings (e.g. a `thumbprint` in
/// csi-vsphere.conf, which volmig does not use): a passed line becomes a warning naming them.
pub fn with_config_warnings(mut tls: Check, warnings: &[String]) -> Check {
    if warnings.is_empty() {
        return tls;
    }
    tls.detail = format!("{}; {}", tls.detail, warnings.join("; "));
    if tls.ok {
        tls.warning = true;
        if tls.fix.is_empty() {
            tls.fix =
                "set ca-file in csi-vsphere.conf or --vc-ca-file / vcenter.caBundle".to_owned();
        }
    }
    tls
}

/// The informational version line: API version and build, the create path and
/// protection that apply (docs/design.md §8.5), and whether volmig may hand the driver
/// syncer's Lease over on this release (§8.7).
pub fn version_check(version: &VcenterVersion) -> Check {
    let create = if version.registers_disk_first() {
        "RegisterDisk, then CnsCreateVolume with backingDiskId"
    } else {
        "CnsCreateVolume with backingDiskUrlPath"
    };
    let protection = if version.registration_protects() {
        "protection by registration"
    } else {
        "protection by the VSLM keepAfterDeleteVm flag"
    };
    let mut detail = format!("{version}; creates with {create}; {protection}");
    if !version.refuses_re_registration() {
        // docs/design.md §8.7: every term of the driver's syncer starts cold and registers
        // what its cache has not listed; below 7.0 U1 each such call is a second volume.
        detail.push_str(
            "; below 7.0 Update 1 CNS registers a disk a second time as a second volume, so \
             volmig never hands the CSI driver's syncer Lease over (--hold-driver-syncer holds \
             it for good)",
        );
    }
    Check::pass(VERSION, detail)
}

/// The CNS line from one read-only `CnsQueryVolume`.
pub fn cns_check(result: Result<usize, &BackendError>) -> Check {
    match result {
        Ok(_) => Check::pass(CNS, "CnsQueryVolume answered"),
        Err(e) => Check::fail(
            CNS,
            format!("CnsQueryVolume failed: {}: {}", e.fault, e.message),
            "check that the vSAN health (CNS) service runs on vCenter and the user may query \
             CNS volumes (Cns.Searchable)",
        ),
    }
}

/// The datastores line: each distinct datastore of the in-tree PVs with the result of
/// resolving it in the configured datacenters; `skipped` counts PVs whose path is not a
/// valid in-tree path.
pub fn datastores_check(
    resolved: &BTreeMap<String, Result<(), BackendError>>,
    pvs: usize,
    skipped: usize,
) -> Check {
    let missing: Vec<String> = resolved
        .iter()
        .filter_map(|(name, result)| {
            result
                .as_ref()
                .err()
                .map(|e| format!("{name} ({}: {})", e.fault, e.message))
        })
        .collect();
    let skipped_note = if skipped > 0 {
        format!("; {skipped} PV(s) with an invalid volumePath skipped")
    } else {
        String::new()
    };
    if missing.is_empty() {
        let names: Vec<&str> = resolved.keys().map(String::as_str).collect();
        let found = if names.is_empty() {
            "no datastore to resolve".to_owned()
        } else {
            format!("{} found: {}", names.len(), names.join(", "))
        };
        return Check::pass(
            DATASTORES,
            format!("{pvs} in-tree PV(s); {found}{skipped_note}"),
        );
    }
    Check::fail(
        DATASTORES,
        format!(
            "not found in the configured datacenters: {}{skipped_note}",
            missing.join("; ")
        ),
        "set --datacenters / datacenters of csi-vsphere.conf to include the datacenter of \
         each datastore (or fix the PVs' volumePath)",
    )
}

#[cfg(test)]
#[path = "vcenter_tests.rs"]
mod tests;

//! How to reach and log in to vCenter: [`CnsConfig`] (its [`Password`] never prints).

use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use crate::credentials::Password;

/// The default time limit of one SOAP request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Default of [`CnsConfig::task_timeout`].
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(600);

/// How to reach and log in to vCenter.
#[derive(Debug, Clone)]
pub struct CnsConfig {
    /// The vCenter SDK URL, e.g. `https://vc.example/sdk` (a URL without path gets `/sdk`).
    pub url: Url,
    /// The vCenter user; also written as `vSphereUser` on registrations.
    pub username: String,
    /// The user's password.
    pub password: Password,
    /// Trust only the CA certificates of this PEM file (`--vc-ca-file`).
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification (`--vc-insecure`); logs a warning.
    pub insecure: bool,
    /// Trust only the certificate with this thumbprint (`AA:BB:...`, SHA-1; `thumbprint`
    /// of the driver's `csi-vsphere.conf`), instead of a CA (src/backend/cns/tls.rs).
    pub thumbprint: Option<String>,
    /// Datacenters (names or inventory paths) searched for datastores; empty means all.
    pub datacenters: Vec<String>,
    /// Time limit of one SOAP request.
    pub request_timeout: Duration,
    /// How long to wait for a vCenter task (a CNS create or delete) to finish.
    pub task_timeout: Duration,
    /// HTTP User-Agent; the daemon adds its lease holder ID so vCenter logs (and test
    /// harnesses) can tell replicas apart.
    pub user_agent: String,
}

/// The default User-Agent of vCenter requests.
pub const DEFAULT_USER_AGENT: &str = concat!("volmig/", env!("CARGO_PKG_VERSION"));

impl CnsConfig {
    /// A configuration that verifies TLS with the system roots, searches all datacenters
    /// and uses [`DEFAULT_REQUEST_TIMEOUT`].
    pub fn new(url: Url, username: impl Into<String>, password: impl Into<Password>) -> Self {
        Self {
            url,
            username: username.into(),
            password: password.into(),
            ca_file: None,
            insecure: false,
            thumbprint: None,
            datacenters: Vec::new(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            task_timeout: DEFAULT_TASK_TIMEOUT,
            user_agent: DEFAULT_USER_AGENT.to_owned(),
        }
    }
}

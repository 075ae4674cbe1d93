//! Options and JSON types of the vcsim test-support module (see `../vcsim.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// What to start the harness with. `VcsimOptions::default()` is one datacenter `DC0` with
/// one datastore `LocalDS_0`, HTTPS, user `user` / password `pass`, no vmdks, no delays.
#[derive(Debug, Clone)]
pub struct VcsimOptions {
    /// Number of vmdk files `disk-0001.vmdk`.. to create in each of `folders`.
    pub vmdks: usize,
    /// Datastore folders of the first datastore that get `vmdks` files (default `kubevols`).
    pub folders: Vec<String>,
    /// Per-method delays in milliseconds, e.g. `("CnsCreateVolume", 200)`.
    pub delays: Vec<(String, u64)>,
    /// Serve plain HTTP instead of HTTPS (then `Vcsim::cert` is `None`).
    pub plain_http: bool,
    /// The only user name the simulator accepts.
    pub username: String,
    /// The only password the simulator accepts.
    pub password: String,
    /// Put the datacenter inside an inventory folder of this name (`/NAME/DC0`).
    pub datacenter_folder: Option<String>,
    /// Number of local datastores (`LocalDS_0`..); at least 1.
    pub datastores: usize,
    /// `CnsCreateVolume` of a disk registered before the call arrived fails with
    /// `CnsAlreadyRegisteredFault` (overlapping calls still create duplicates).
    pub already_registered_fault: bool,
    /// Queries behave like govmomi's simulator: only `volumeIds` honoured, no paging.
    pub upstream_queries: bool,
    /// Cap on volumes per `CnsQueryVolume` page (0 = no cap).
    pub page_limit: usize,
    /// Log every SOAP request and response to the harness log (`Vcsim::log_file`).
    pub trace: bool,
}

impl Default for VcsimOptions {
    fn default() -> Self {
        Self {
            vmdks: 0,
            folders: vec!["kubevols".to_string()],
            delays: Vec::new(),
            plain_http: false,
            username: "user".to_string(),
            password: "pass".to_string(),
            datacenter_folder: None,
            datastores: 1,
            already_registered_fault: false,
            upstream_queries: false,
            page_limit: 0,
            trace: false,
        }
    }
}

impl VcsimOptions {
    /// `n` vmdks per folder.
    pub fn vmdks(mut self, n: usize) -> Self {
        self.vmdks = n;
        self
    }

    /// Adds a per-method delay.
    pub fn delay(mut self, method: &str, ms: u64) -> Self {
        self.delays.push((method.to_string(), ms));
        self
    }

    pub(crate) fn args(&self) -> Vec<String> {
        let mut args = vec![
            "-exit-on-stdin-eof".to_string(),
            format!("-username={}", self.username),
            format!("-password={}", self.password),
            format!("-datastores={}", self.datastores.max(1)),
            format!("-vmdks={}", self.vmdks),
            format!("-folders={}", self.folders.join(",")),
            format!("-cns-page-limit={}", self.page_limit),
        ];
        for (method, ms) in &self.delays {
            args.push(format!("-delay={method}={ms}"));
        }
        if self.plain_http {
            args.push("-plain-http".to_string());
        }
        if let Some(folder) = &self.datacenter_folder {
            args.push(format!("-datacenter-folder={folder}"));
        }
        if self.already_registered_fault {
            args.push("-cns-already-registered".to_string());
        }
        if self.upstream_queries {
            args.push("-cns-query=upstream".to_string());
        }
        if self.trace {
            args.push("-trace".to_string());
        }
        args
    }
}

/// One datastore of the simulator and the local directory behind it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Datastore {
    /// Datastore name, e.g. `LocalDS_0`.
    pub name: String,
    /// Absolute directory holding its files; creating `dir/f/x.vmdk` creates `[name] f/x.vmdk`.
    pub dir: PathBuf,
    /// Inventory path, e.g. `/DC0/datastore/LocalDS_0`.
    pub inventory_path: String,
}

/// The start line the harness prints.
#[derive(Debug, Deserialize)]
pub(crate) struct StartLine {
    pub url: String,
    pub datacenter: String,
    pub datacenters: Vec<String>,
    pub datastores: Vec<Datastore>,
    pub cert: String,
    pub admin: String,
}

/// One CNS volume as the simulator holds it (`GET /debug/cns/volumes`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimVolume {
    /// CNS volume ID.
    pub id: String,
    /// Volume name given at creation.
    pub name: String,
    /// `BLOCK` for registrations.
    pub volume_type: String,
    /// Registered disk as `[datastore] folder/file.vmdk` (empty for dynamic volumes).
    pub backing_path: String,
    /// The `backingDiskUrlPath` sent at creation.
    pub backing_disk_url_path: String,
    /// Datastore name.
    pub datastore: String,
    /// Container cluster ID from the volume metadata.
    pub cluster_id: String,
    /// Creation time, RFC 3339.
    pub create_time: String,
}

/// SOAP call counters of the harness (`GET /debug/stats`), counted as calls arrive.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimStats {
    /// Calls per SOAP method.
    #[serde(default)]
    pub calls: BTreeMap<String, u64>,
    /// Calls per method answered with an HTTP error (SOAP faults are HTTP 500).
    #[serde(default)]
    pub faults: BTreeMap<String, u64>,
    /// Calls per method in progress now.
    #[serde(default)]
    pub in_flight: BTreeMap<String, u64>,
    /// Most calls of a method in progress at once since start or reset.
    #[serde(default)]
    pub max_in_flight: BTreeMap<String, u64>,
    /// Calls per User-Agent, then per method.
    #[serde(default)]
    pub calls_by_user_agent: BTreeMap<String, BTreeMap<String, u64>>,
}

impl SimStats {
    /// Calls of `method` (0 when none).
    pub fn calls(&self, method: &str) -> u64 {
        self.calls.get(method).copied().unwrap_or(0)
    }

    /// Peak concurrency of `method` (0 when never called).
    pub fn max_in_flight(&self, method: &str) -> u64 {
        self.max_in_flight.get(method).copied().unwrap_or(0)
    }

    /// Calls of `method` made with User-Agent `ua`.
    pub fn calls_by(&self, ua: &str, method: &str) -> u64 {
        self.calls_by_user_agent
            .get(ua)
            .and_then(|m| m.get(method))
            .copied()
            .unwrap_or(0)
    }
}

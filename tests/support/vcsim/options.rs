//! Options and JSON types of the vcsim test-support module (see `../vcsim.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
    /// `CnsAlreadyRegisteredFault` (overlapping calls still create duplicates) whatever the
    /// reported release; the `7.0.3` and `8.0.3` releases answer so without it.
    pub already_registered_fault: bool,
    /// Queries behave like govmomi's simulator: only `volumeIds` honoured, no paging.
    pub upstream_queries: bool,
    /// Cap on volumes per `CnsQueryVolume` page (0 = no cap).
    pub page_limit: usize,
    /// Log every SOAP request and response to the harness log (`Vcsim::log_file`).
    pub trace: bool,
    /// `CnsCreateVolume` tasks stay `running` this long; the volume appears when the task
    /// completes (`None` = at once). Runtime: `Vcsim::set_cns_task_duration`.
    pub cns_task_duration: Option<Duration>,
    /// The next N `CnsCreateVolume` calls run but their reply is dropped (the connection
    /// is closed unanswered). Runtime: `Vcsim::set_drop_create_replies`.
    pub drop_create_replies: u32,
    /// The next N task polls answer HTTP 503. Runtime: `Vcsim::set_fail_task_polls`.
    pub fail_task_polls: u32,
    /// Task polls answer HTTP 503 for this long after each `CnsCreateVolume` arrives.
    /// Runtime: `Vcsim::set_fail_task_polls_window`.
    pub fail_task_polls_window: Option<Duration>,
    /// Reported vCenter release: `6.5` (govmomi's default, used when `None`), `6.7.3`,
    /// `6.7U3l`, `7.0.0`, `7.0.3` or `8.0.3`. Runtime: `Vcsim::set_vcenter_version`.
    pub vcenter_version: Option<String>,
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
            cns_task_duration: None,
            drop_create_replies: 0,
            fail_task_polls: 0,
            fail_task_polls_window: None,
            vcenter_version: None,
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

    /// Slow `CnsCreateVolume` tasks (see the field).
    pub fn cns_task_duration(mut self, d: Duration) -> Self {
        self.cns_task_duration = Some(d);
        self
    }

    /// Reported vCenter release (see the field).
    pub fn vcenter_version(mut self, version: &str) -> Self {
        self.vcenter_version = Some(version.to_string());
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
        if let Some(d) = self.cns_task_duration {
            args.push(format!("-cns-task-duration={}ms", d.as_millis()));
        }
        if self.drop_create_replies > 0 {
            args.push(format!("-drop-create-replies={}", self.drop_create_replies));
        }
        if self.fail_task_polls > 0 {
            args.push(format!("-fail-task-polls={}", self.fail_task_polls));
        }
        if let Some(d) = self.fail_task_polls_window {
            args.push(format!("-fail-task-polls-window={}ms", d.as_millis()));
        }
        if let Some(v) = &self.vcenter_version {
            args.push(format!("-vcenter-version={v}"));
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
    /// Whether the volume's FCD carries `keepAfterDeleteVm` (kept when a VM it is
    /// attached to is deleted).
    #[serde(default)]
    pub keep_after_delete_vm: bool,
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
    /// HTTP errors per User-Agent, then per method (a failed `Login` counts here).
    #[serde(default)]
    pub faults_by_user_agent: BTreeMap<String, BTreeMap<String, u64>>,
    /// Calls whose reply the harness dropped (`drop_create_replies`).
    #[serde(default)]
    pub dropped: BTreeMap<String, u64>,
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

    /// HTTP errors answered to `method` (0 when none).
    pub fn faults(&self, method: &str) -> u64 {
        self.faults.get(method).copied().unwrap_or(0)
    }

    /// HTTP errors answered to `method` called with User-Agent `ua`.
    pub fn faults_by(&self, ua: &str, method: &str) -> u64 {
        self.faults_by_user_agent
            .get(ua)
            .and_then(|m| m.get(method))
            .copied()
            .unwrap_or(0)
    }

    /// Calls of `method` whose reply was dropped.
    pub fn dropped(&self, method: &str) -> u64 {
        self.dropped.get(method).copied().unwrap_or(0)
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

/// The runtime modes of the harness (`GET /debug/modes`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimModes {
    /// How long `CnsCreateVolume` tasks stay running, in milliseconds.
    pub cns_task_duration_ms: u64,
    /// `CnsCreateVolume` replies still to drop.
    pub drop_create_replies: u32,
    /// Task polls still to fail with HTTP 503.
    pub fail_task_polls: u32,
    /// Window after each create in which task polls fail, in milliseconds.
    pub fail_task_polls_window_ms: u64,
    /// Reported release (`6.5`, `6.7.3`, `6.7U3l`, `7.0.0`, `7.0.3`, `8.0.3`).
    pub vcenter_version: String,
    /// `about.version` as reported.
    pub about_version: String,
    /// `about.apiVersion` as reported.
    pub about_api_version: String,
    /// `about.build` as reported.
    #[serde(default)]
    pub about_build: String,
    /// `VslmSetVStorageObjectControlFlags` answers success but sets nothing (a flag that
    /// does not stick). Runtime: `patch_modes({"vslmSetFlagsIgnored": true})`.
    #[serde(default)]
    pub vslm_set_flags_ignored: bool,
}

/// The container cluster of a recorded create spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimContainerCluster {
    /// `KUBERNETES`.
    pub cluster_type: String,
    /// Cluster ID.
    pub cluster_id: String,
    /// vSphere user named in the metadata.
    #[serde(rename = "vSphereUser")]
    pub vsphere_user: String,
    /// `VANILLA`, ...
    pub cluster_flavor: String,
    /// Distribution, e.g. `OpenShift`.
    pub cluster_distribution: String,
}

/// One `CnsCreateVolume` spec as the harness received it (`GET /debug/cns/creates`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimCreate {
    /// Volume name.
    pub name: String,
    /// `BLOCK`.
    pub volume_type: String,
    /// `metadata.containerCluster`, if sent.
    pub container_cluster: Option<SimContainerCluster>,
    /// `metadata.containerClusterArray`.
    pub container_cluster_array: Vec<SimContainerCluster>,
    /// `profile[].profileId`.
    pub profile_ids: Vec<String>,
    /// `backingObjectDetails.backingDiskUrlPath` (empty when not sent).
    pub backing_disk_url_path: String,
    /// `backingObjectDetails.backingDiskId` (empty when not sent).
    pub backing_disk_id: String,
    /// `datastores` MoRef values.
    pub datastores: Vec<String>,
    /// User-Agent of the request.
    pub user_agent: String,
    /// Arrival time, RFC 3339.
    pub time: String,
}

/// One FCD of the harness's VSLM endpoint (`GET /debug/vslm/objects`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimVslmObject {
    /// FCD ID (the CNS volume ID for registrations by URL).
    pub id: String,
    /// FCD name.
    pub name: String,
    /// `[datastore] folder/file.vmdk`.
    pub backing_path: String,
    /// The `keepAfterDeleteVm` control flag.
    pub keep_after_delete_vm: bool,
    /// Every control flag set.
    pub control_flags: Vec<String>,
    /// `RegisterDisk` or `CnsCreateVolume`.
    pub source: String,
    /// Creation time, RFC 3339.
    pub create_time: String,
}

//! Test support: the vCenter simulator harness of `tests/support/vcsim/` (a Go program over
//! govmomi's `simulator` and `cns/simulator`), started as a child process per test.
//!
//! Include it from an integration test with
//! `#[path = "support/vcsim.rs"] mod vcsim;`.
//!
//! The binary is `$VOLMIG_VCSIM_BIN` when set, else `target/vcsim/vcsim-harness` under the
//! crate root; when that is missing or older than its Go sources, `make -s vcsim` runs once
//! (under a file lock, so parallel test processes build it once), which makes
//! `cargo nextest run` work without a prior `make`.
//!
//! Everything the admin methods return is read from the simulator's own state over the
//! harness's `/debug/` endpoints, never through the client under test.
#![allow(dead_code, unused_imports)] // each test crate uses a different subset

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

#[path = "vcsim/locate.rs"]
mod locate;
#[path = "vcsim/options.rs"]
mod options;
#[path = "vcsim/raw_soap.rs"]
mod raw_soap;

pub use locate::harness_binary;
use options::StartLine;
pub use options::{
    Datastore, SimContainerCluster, SimCreate, SimModes, SimStats, SimVolume, SimVslmObject,
    VcsimOptions,
};
pub use raw_soap::{RawSoap, SessionVia, percent_encode, task_state, xml_escape, xml_texts};

/// How long the harness may take to print its start line.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// User agent of the admin and raw-SOAP requests made by this module.
pub const SUPPORT_USER_AGENT: &str = "volmig-test-support";

/// A running harness. Killed when dropped (its datastore files go with its temp dir).
pub struct Vcsim {
    /// SDK URL, `https://127.0.0.1:PORT/sdk` (`http://` with `plain_http`).
    pub url: String,
    /// Datacenter name (`DC0`).
    pub datacenter: String,
    /// Datacenter inventory paths (`/DC0`, or `/FOLDER/DC0`).
    pub datacenters: Vec<String>,
    /// Datastores, first one holds the generated vmdks.
    pub datastores: Vec<Datastore>,
    /// PEM file of the CA that signed the server certificate (`None` with plain HTTP).
    pub cert: Option<PathBuf>,
    /// Admin base URL, `https://127.0.0.1:PORT/debug`.
    pub admin: String,
    /// User name the simulator accepts.
    pub username: String,
    /// Password the simulator accepts.
    pub password: String,
    opts: VcsimOptions,
    listen: String,
    starts: usize,
    http: reqwest::Client,
    stdin: Option<ChildStdin>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Vcsim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vcsim")
            .field("url", &self.url)
            .field("datacenters", &self.datacenters)
            .field("datastores", &self.datastores)
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

impl Vcsim {
    /// Starts a fresh harness and waits for its start line. Panics with the harness log
    /// when it does not start.
    pub async fn start(opts: VcsimOptions) -> Vcsim {
        let dir = tempfile::Builder::new()
            .prefix("volmig-vcsim-")
            .tempdir()
            .unwrap_or_else(|e| panic!("vcsim: create temp dir: {e}"));
        let mut sim = Vcsim {
            url: String::new(),
            datacenter: String::new(),
            datacenters: Vec::new(),
            datastores: Vec::new(),
            cert: None,
            admin: String::new(),
            username: opts.username.clone(),
            password: opts.password.clone(),
            opts,
            listen: "127.0.0.1:0".to_string(),
            starts: 0,
            http: admin_client(None),
            stdin: None,
            child: None,
            dir,
        };
        sim.spawn().await;
        sim
    }

    /// The harness log of the current run (stderr; SOAP bodies with `trace`).
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join(format!("harness-{}.log", self.starts))
    }

    /// Host and port the harness listens on, e.g. `127.0.0.1:34567`.
    pub fn host_port(&self) -> &str {
        &self.listen
    }

    /// `[LocalDS_0] FOLDER/disk-NNNN.vmdk`, the path of the `n`-th generated vmdk (1-based).
    pub fn vmdk_path(&self, folder: &str, n: usize) -> String {
        format!("[{}] {folder}/disk-{n:04}.vmdk", self.datastores[0].name)
    }

    /// The local file behind a `[datastore] folder/file.vmdk` path, if the datastore exists.
    pub fn vmdk_file(&self, path: &str) -> Option<PathBuf> {
        let (ds, rel) = path.strip_prefix('[')?.split_once(']')?;
        let ds = self.datastores.iter().find(|d| d.name == ds)?;
        Some(ds.dir.join(rel.trim_start()))
    }

    async fn spawn(&mut self) {
        let bin = harness_binary();
        let mut args = self.opts.args();
        let ds_root = self.dir.path().join("datastores");
        args.push(format!("-datastore-dir={}", ds_root.display()));
        if !self.opts.plain_http {
            args.push(format!(
                "-cert-out={}",
                self.dir.path().join("ca.pem").display()
            ));
        }
        // A restart reuses the port; it was just freed, but retry in case the kernel is slow.
        let attempts = if self.starts == 0 { 1 } else { 50 };
        for attempt in 1..=attempts {
            self.starts += 1;
            let log = self.log_file();
            let log_file = std::fs::File::create(&log)
                .unwrap_or_else(|e| panic!("vcsim: create {}: {e}", log.display()));
            let mut child = Command::new(&bin)
                .args(&args)
                .arg(format!("-listen={}", self.listen))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(log_file)
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("vcsim: spawn {}: {e}", bin.display()));
            let stdout = child.stdout.take();
            let mut line = String::new();
            let read = async {
                match stdout {
                    Some(out) => BufReader::new(out).read_line(&mut line).await,
                    None => Ok(0),
                }
            };
            let got = tokio::time::timeout(START_TIMEOUT, read).await;
            if let Ok(Ok(n)) = got
                && n > 0
            {
                let start: StartLine = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("vcsim: bad start line {line:?}: {e}"));
                self.stdin = child.stdin.take();
                self.child = Some(child);
                self.apply_start(start);
                return;
            }
            let _ = child.kill().await;
            if attempt == attempts {
                let log_text = std::fs::read_to_string(&log).unwrap_or_default();
                panic!(
                    "vcsim: {} {:?} did not start ({got:?}); log:\n{log_text}",
                    bin.display(),
                    args
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn apply_start(&mut self, start: StartLine) {
        let host_port = start
            .url
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_default()
            .to_string();
        if self.starts > 1 && self.listen != host_port {
            panic!("vcsim: restarted on {host_port}, expected {}", self.listen);
        }
        self.listen = host_port;
        self.url = start.url;
        self.datacenter = start.datacenter;
        self.datacenters = start.datacenters;
        self.datastores = start.datastores;
        self.cert = (!start.cert.is_empty()).then(|| PathBuf::from(start.cert));
        self.admin = start.admin;
        self.http = admin_client(self.cert.as_deref());
    }

    /// Kills the harness (SIGKILL, like a crashed vCenter). Calls fail until `start_again`.
    pub async fn kill(&mut self) {
        self.stdin = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Stops the harness with SIGTERM (as `make demo` does) and returns its exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("vcsim: terminate: harness is not running"));
        let pid = child
            .id()
            .unwrap_or_else(|| panic!("vcsim: terminate: harness already exited"));
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .unwrap_or_else(|e| panic!("vcsim: run kill -TERM {pid}: {e}"));
        assert!(sent.success(), "vcsim: kill -TERM {pid} failed: {sent}");
        let status = tokio::time::timeout(START_TIMEOUT, child.wait())
            .await
            .unwrap_or_else(|_| panic!("vcsim: harness {pid} ignored SIGTERM"))
            .unwrap_or_else(|e| panic!("vcsim: wait for harness {pid}: {e}"));
        self.stdin = None;
        status
    }

    /// Starts the harness again after `kill` or `terminate`, with the same flags, port, CA and datastore
    /// directories (vmdk files survive; sessions and CNS registrations do not).
    pub async fn start_again(&mut self) {
        self.spawn().await;
    }

    /// Kill and start again: "vCenter forgets" every session and CNS registration.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.start_again().await;
    }

    async fn admin_request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
    ) -> (u16, String) {
        let url = format!("{}{path}", self.admin);
        let mut req = self
            .http
            .request(method.clone(), &url)
            .header(reqwest::header::USER_AGENT, SUPPORT_USER_AGENT);
        if let Some(body) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("vcsim admin: {method} {url}: {e}"));
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .unwrap_or_else(|e| panic!("vcsim admin: {method} {url}: read body: {e}"));
        (status, text)
    }

    /// Every CNS volume the simulator holds, oldest first.
    pub async fn volumes(&self) -> Vec<SimVolume> {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/cns/volumes", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: list volumes: {text}");
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("vcsim admin: volumes JSON {text:?}: {e}"))
    }

    /// The CNS volumes registered for `backing_path` (`[datastore] folder/file.vmdk`).
    pub async fn volumes_for(&self, backing_path: &str) -> Vec<SimVolume> {
        self.volumes()
            .await
            .into_iter()
            .filter(|v| v.backing_path == backing_path)
            .collect()
    }

    /// Backing paths that have more than one CNS volume, with their volume IDs.
    pub async fn duplicates(&self) -> BTreeMap<String, Vec<String>> {
        let mut by_path: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for v in self.volumes().await {
            if !v.backing_path.is_empty() {
                by_path.entry(v.backing_path).or_default().push(v.id);
            }
        }
        by_path.retain(|_, ids| ids.len() > 1);
        by_path
    }

    /// Removes a registration behind volmig's back (the vmdk stays). False if unknown.
    pub async fn delete_volume(&self, id: &str) -> bool {
        let (status, text) = self
            .admin_request(reqwest::Method::DELETE, &format!("/cns/volumes/{id}"), None)
            .await;
        match status {
            204 => true,
            404 => false,
            _ => panic!("vcsim admin: delete volume {id}: HTTP {status}: {text}"),
        }
    }

    /// Creates a vmdk file (`[LocalDS_0] folder/x.vmdk`); returns the local file.
    pub async fn create_vmdk(&self, path: &str) -> PathBuf {
        let body = serde_json::json!({ "path": path }).to_string();
        let (status, text) = self
            .admin_request(reqwest::Method::POST, "/vmdks", Some(body))
            .await;
        assert_eq!(status, 201, "vcsim admin: create vmdk {path}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("vcsim admin: create vmdk JSON {text:?}: {e}"));
        PathBuf::from(v["file"].as_str().unwrap_or_default())
    }

    /// Ends every session `Login` handed out (like an idle timeout in vCenter): their next
    /// call gets `NotAuthenticated`; CNS state stays. Returns how many were still alive.
    pub async fn expire_sessions(&self) -> u64 {
        let (status, text) = self
            .admin_request(reqwest::Method::POST, "/sessions/expire", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: expire sessions: {text}");
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("vcsim admin: expire sessions JSON {text:?}: {e}"));
        v["expired"].as_u64().unwrap_or_default()
    }

    /// SOAP call counters since start or the last `reset_stats`.
    pub async fn stats(&self) -> SimStats {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/stats", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: stats: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("vcsim admin: stats {text:?}: {e}"))
    }

    /// Clears the SOAP call counters.
    pub async fn reset_stats(&self) {
        let (status, text) = self
            .admin_request(reqwest::Method::POST, "/stats/reset", None)
            .await;
        assert_eq!(status, 204, "vcsim admin: reset stats: {text}");
    }

    /// The runtime modes (slow tasks, dropped replies, failing polls, version).
    pub async fn modes(&self) -> SimModes {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/modes", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: modes: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("vcsim admin: modes {text:?}: {e}"))
    }

    /// `POST /debug/modes` with a partial JSON object; panics when the harness refuses it.
    pub async fn patch_modes(&self, patch: serde_json::Value) -> SimModes {
        let (status, text) = self
            .admin_request(reqwest::Method::POST, "/modes", Some(patch.to_string()))
            .await;
        assert_eq!(status, 200, "vcsim admin: modes {patch}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("vcsim admin: modes {text:?}: {e}"))
    }

    /// `CnsCreateVolume` tasks stay `running` for `d` from now on (zero = complete at once).
    pub async fn set_cns_task_duration(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.patch_modes(serde_json::json!({ "cnsTaskDurationMs": ms }))
            .await;
    }

    /// How long `CnsCreateVolume` tasks stay `running`.
    pub async fn cns_task_duration(&self) -> Duration {
        Duration::from_millis(self.modes().await.cns_task_duration_ms)
    }

    /// The next `n` `CnsCreateVolume` calls run, but their replies are dropped.
    pub async fn set_drop_create_replies(&self, n: u32) {
        self.patch_modes(serde_json::json!({ "dropCreateReplies": n }))
            .await;
    }

    /// `CnsCreateVolume` replies still to be dropped.
    pub async fn drop_create_replies(&self) -> u32 {
        self.modes().await.drop_create_replies
    }

    /// The next `n` task polls answer HTTP 503.
    pub async fn set_fail_task_polls(&self, n: u32) {
        self.patch_modes(serde_json::json!({ "failTaskPolls": n }))
            .await;
    }

    /// Task polls still to fail.
    pub async fn fail_task_polls(&self) -> u32 {
        self.modes().await.fail_task_polls
    }

    /// Task polls answer HTTP 503 for `d` after each `CnsCreateVolume` (zero = off).
    pub async fn set_fail_task_polls_window(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.patch_modes(serde_json::json!({ "failTaskPollsWindowMs": ms }))
            .await;
    }

    /// The window after each create in which task polls fail.
    pub async fn fail_task_polls_window(&self) -> Duration {
        Duration::from_millis(self.modes().await.fail_task_polls_window_ms)
    }

    /// The next `count` calls of `method` get `answer` instead of the simulator's: `http503`
    /// (HTTP 503) or `NotAuthenticated` (the SOAP fault of a call without a session; the
    /// session stays valid, so a re-login works). `method` `"TaskPoll"` names every task
    /// poll (`RetrievePropertiesEx` etc. on a `Task`). Count 0 turns it off. What was
    /// answered is counted by [`Vcsim::injected`].
    pub async fn fail_calls(&self, method: &str, count: u32, answer: &str) {
        self.patch_modes(serde_json::json!({
            "failCalls": { method: { "count": count, "answer": answer } }
        }))
        .await;
    }

    /// The replies of `method` (`"TaskPoll"`: task polls) are held `d` after the simulator
    /// answered (a create's task already runs meanwhile); zero turns it off. Counted by
    /// [`Vcsim::delayed`].
    pub async fn delay_replies(&self, method: &str, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.patch_modes(serde_json::json!({ "replyDelaysMs": { method: ms } }))
            .await;
    }

    /// Calls of `method` answered with an injected failure ([`Vcsim::fail_calls`]) since
    /// start or `reset_stats`.
    pub async fn injected(&self, method: &str) -> u64 {
        self.raw_stats().await["injected"][method]
            .as_u64()
            .unwrap_or(0)
    }

    /// Replies of `method` held back ([`Vcsim::delay_replies`]) since start or `reset_stats`.
    pub async fn delayed(&self, method: &str) -> u64 {
        self.raw_stats().await["delayed"][method]
            .as_u64()
            .unwrap_or(0)
    }

    async fn raw_stats(&self) -> serde_json::Value {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/stats", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: stats: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("vcsim admin: stats {text:?}: {e}"))
    }

    /// Reports another vCenter release: `6.5`, `6.7.3`, `6.7U3l`, `7.0.0`, `7.0.3`, `8.0.3`.
    pub async fn set_vcenter_version(&self, version: &str) {
        self.patch_modes(serde_json::json!({ "vcenterVersion": version }))
            .await;
    }

    /// The reported release and its `about.version` / `about.apiVersion`.
    pub async fn vcenter_version(&self) -> (String, String, String) {
        let m = self.modes().await;
        (m.vcenter_version, m.about_version, m.about_api_version)
    }

    /// Hostile answers: from now on every SOAP call of `method` (every SOAP call with
    /// `None`) gets the answer `kind` instead of the simulator's: `malformed-xml`,
    /// `garbage-xml`, `huge-body`, `deep-nesting`, `html-login`, `redirect`, `slowloris`,
    /// `unknown-fault`; `""` turns it off (see `clear_hostile`). The admin endpoints are
    /// never affected. Parameters: `set_redirect`, `set_hostile_size`,
    /// `set_hostile_depth`, `set_slowloris_interval`, `set_unknown_fault_name`.
    pub async fn set_hostile(&self, kind: &str, method: Option<&str>) {
        self.patch_modes(
            serde_json::json!({ "hostile": kind, "hostileMethod": method.unwrap_or("") }),
        )
        .await;
    }

    /// Turns hostile answers off (the parameters stay).
    pub async fn clear_hostile(&self) {
        self.set_hostile("", None).await;
    }

    /// The hostile part of `GET /debug/modes`: `(hostile, hostileMethod)`.
    pub async fn hostile(&self) -> (String, String) {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/modes", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: modes: {text}");
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("vcsim admin: modes JSON {text:?}: {e}"));
        (
            v["hostile"].as_str().unwrap_or_default().to_string(),
            v["hostileMethod"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// The `redirect` answer: HTTP `status` (3xx) with `Location: {to}{request path}`.
    pub async fn set_redirect(&self, to: &str, status: u16) {
        self.patch_modes(serde_json::json!({ "redirectTo": to, "redirectStatus": status }))
            .await;
    }

    /// Size of the streamed `huge-body` answer (default 100 MiB).
    pub async fn set_hostile_size(&self, bytes: u64) {
        self.patch_modes(serde_json::json!({ "hostileSizeBytes": bytes }))
            .await;
    }

    /// Nesting of the `deep-nesting` answer (default 10,000 elements).
    pub async fn set_hostile_depth(&self, depth: u32) {
        self.patch_modes(serde_json::json!({ "hostileDepth": depth }))
            .await;
    }

    /// Pause between the bytes of a `slowloris` answer (default 2 s).
    pub async fn set_slowloris_interval(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        self.patch_modes(serde_json::json!({ "slowlorisIntervalMs": ms }))
            .await;
    }

    /// Fault type (`xsi:type`) of the `unknown-fault` answer (default
    /// `VolmigHarnessUnknownFault`).
    pub async fn set_unknown_fault_name(&self, name: &str) {
        self.patch_modes(serde_json::json!({ "faultName": name }))
            .await;
    }

    /// The server certificate for new TLS connections: `rsa1024` (an RSA-1024 key, right
    /// names, signed by the harness CA), `wrong-name` (signed by the CA, but only for
    /// `vcenter.wrong-name.example`) or `""` (the normal one). The admin client verifies
    /// the certificate too, so after `rsa1024`/`wrong-name` only admin requests on an
    /// already open connection work: set it last.
    pub async fn set_tls_cert(&self, kind: &str) {
        self.patch_modes(serde_json::json!({ "tlsCert": kind }))
            .await;
    }

    /// Changes what `Login` accepts (a password rotation); sessions already open stay.
    /// `Vcsim::username`/`password` (used by `soap()`) follow.
    pub async fn set_credentials(&mut self, username: &str, password: &str) {
        let body = serde_json::json!({ "username": username, "password": password }).to_string();
        let (status, text) = self
            .admin_request(reqwest::Method::POST, "/credentials", Some(body))
            .await;
        assert_eq!(status, 204, "vcsim admin: credentials: {text}");
        self.username = username.to_string();
        self.password = password.to_string();
        self.opts.username = username.to_string();
        self.opts.password = password.to_string();
    }

    /// The user name and password `Login` accepts now (read from the harness).
    pub async fn credentials(&self) -> (String, String) {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/credentials", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: credentials: {text}");
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("vcsim admin: credentials JSON {text:?}: {e}"));
        (
            v["username"].as_str().unwrap_or_default().to_string(),
            v["password"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// Every `CnsCreateVolume` spec received since start (or `clear_creates`), in order.
    pub async fn creates(&self) -> Vec<SimCreate> {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/cns/creates", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: creates: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("vcsim admin: creates {text:?}: {e}"))
    }

    /// Forgets the recorded create specs.
    pub async fn clear_creates(&self) {
        let (status, text) = self
            .admin_request(reqwest::Method::DELETE, "/cns/creates", None)
            .await;
        assert_eq!(status, 204, "vcsim admin: clear creates: {text}");
    }

    /// Every FCD the VSLM endpoint knows, with its control flags.
    pub async fn vslm_objects(&self) -> Vec<SimVslmObject> {
        let (status, text) = self
            .admin_request(reqwest::Method::GET, "/vslm/objects", None)
            .await;
        assert_eq!(status, 200, "vcsim admin: vslm objects: {text}");
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("vcsim admin: vslm objects {text:?}: {e}"))
    }

    /// A raw SOAP client for this harness (logs in with the configured credentials), for
    /// tests that act as "another client" — e.g. planting duplicate registrations.
    pub async fn soap(&self) -> RawSoap {
        let (user, password) = (self.username.clone(), self.password.clone());
        match self.soap_anonymous().login(&user, &password).await {
            Ok(soap) => soap,
            Err(e) => panic!("raw SOAP: {e}"),
        }
    }

    /// A raw SOAP client without a session (see `RawSoap::login`).
    pub fn soap_anonymous(&self) -> RawSoap {
        RawSoap::new(
            self.url.trim_end_matches("/sdk").to_string(),
            self.http.clone(),
        )
    }
}

impl Drop for Vcsim {
    fn drop(&mut self) {
        // Closing stdin makes the harness exit by itself; kill_on_drop covers the rest.
        self.stdin = None;
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// A reqwest client that trusts the harness CA (or nothing, for plain HTTP).
fn admin_client(ca: Option<&Path>) -> reqwest::Client {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        for cert in CertificateDer::pem_file_iter(ca)
            .unwrap_or_else(|e| panic!("vcsim: read {}: {e}", ca.display()))
        {
            let cert = cert.unwrap_or_else(|e| panic!("vcsim: parse {}: {e}", ca.display()));
            roots
                .add(cert)
                .unwrap_or_else(|e| panic!("vcsim: trust {}: {e}", ca.display()));
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap_or_else(|e| panic!("vcsim: TLS versions: {e}"))
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_else(|e| panic!("vcsim: build HTTP client: {e}"))
}

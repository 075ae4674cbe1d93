//! A test double of the vSphere CSI driver (kubernetes-sigs/vsphere-csi-driver @ bf80902),
//! as docs/design.md §8.8 describes it, bugs included, run as tokio tasks inside
//! the test process against the API test server and the simulator harness:
//!
//! - its cache of `CnsVSphereVolumeMigration` objects, Add and Delete only ([`cache`]);
//! - the syncer's leader election on the Lease `vsphere-syncer` ([`lease`]), with
//!   `replicas` pods campaigning (standbys retry with client-go's jitter), no release on
//!   SIGTERM, and a process exit when the Lease is lost;
//! - every leadership term cold: its cache informer starts with the term and is never
//!   waited for ([`run_term`]);
//! - while leading: registration on a cache miss on PV events, on pod adds (inline
//!   volumes) and in each full sync, the PV deletion that unregisters the volume, and the
//!   stale clean-up ([`syncer`]);
//! - the controller's look-ups, which never register ([`CsiDriverDouble::attach_lookup`]).
//!
//! Include with `#[path = "support/csi_driver/mod.rs"] mod csi_driver;` next to
//! `support/e2e.rs` (as `e2e`) and `support/vcsim.rs` (as `vcsim`).
#![allow(dead_code)] // each test crate uses a different subset
#![allow(
    clippy::expect_used,
    reason = "test support: a failed set-up step should fail the test loudly"
)]

pub mod cache;
pub mod lease;
pub mod syncer;
pub mod verdict;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use tokio::task::JoinSet;

use crate::e2e::Cluster;
use crate::vcsim::{RawSoap, Vcsim};
use cache::{Cache, CacheEvent, lock};
use lease::Elector;

/// How the double runs; durations are compressed from the stock manifest's.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// The driver's namespace (`vmware-system-csi`).
    pub namespace: String,
    /// The syncer's Lease (`vsphere-syncer`, cmd/syncer/main.go:214).
    pub lease_name: String,
    /// The holder identity (the pod name; kept across [`CsiDriverDouble::restart`], as a
    /// container restart keeps it).
    pub identity: String,
    /// `leaseDurationSeconds` written, and how long another holder is waited out.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops leading.
    pub renew_deadline: Duration,
    /// Pause between acquire or renew attempts.
    pub retry_period: Duration,
    /// Full sync period (30 min in the driver); the first pass runs on leading.
    pub full_sync_interval: Duration,
    /// Stale clean-up period (120 min in the driver); `None`: only [`CsiDriverDouble::run_cleanup`].
    pub cleanup_interval: Option<Duration>,
    /// `[Global] cluster-id`, written on creates and used by the clean-up query.
    pub cluster_id: String,
    /// Whether to campaign at all (false: cache and controller look-ups only).
    pub lead: bool,
    /// Register on a PV's watch ADDED too, standing for the PV controller's first status
    /// update (see [`syncer`]); off: only updates and full syncs register.
    pub register_on_pv_add: bool,
    /// Syncer replicas campaigning for the Lease (3 in the stock manifest,
    /// `manifests/vanilla/vsphere-csi-driver.yaml:185`); the first one's identity is
    /// `identity`, the others' `identity-<n>`.
    pub replicas: usize,
    /// client-go's `JitterFactor` (1.2): a candidate that did not get the Lease waits
    /// `retry_period × (1 + 1.2 × rand)` before it tries again (`acquire`'s
    /// `wait.JitterUntil`, client-go `tools/leaderelection/leaderelection.go`).
    pub retry_jitter: f64,
    /// How long the cache informer of a new term takes to deliver its first list (a large
    /// cluster, a loaded API server); look-ups never wait for it.
    pub cache_list_delay: Duration,
    /// Create the driver's controller Deployment (`vsphere-csi-controller`, syncer with
    /// `--leader-election`, `replicas` replicas) as the stock manifest installs it.
    pub deployment: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            namespace: "vmware-system-csi".into(),
            lease_name: "vsphere-syncer".into(),
            identity: "vsphere-csi-controller-5d9c7-x2x8q".into(),
            lease_duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(3),
            retry_period: Duration::from_secs(1),
            full_sync_interval: Duration::from_secs(10),
            cleanup_interval: Some(Duration::from_secs(60)),
            cluster_id: "e2e-cluster".into(),
            lead: true,
            register_on_pv_add: false,
            replicas: 1,
            retry_jitter: 1.2,
            cache_list_delay: Duration::ZERO,
            deployment: false,
        }
    }
}

/// What the double's tasks share.
pub struct Inner {
    client: kube::Client,
    soap: RawSoap,
    /// `[VirtualCenter "<host>"]`: the host of the backing URLs.
    host: String,
    /// `datacenters` of `csi-vsphere.conf`, tried in order.
    datacenters: Vec<String>,
    /// vCenter ≥ 8.0.3: a new registration is protected (migration.go:575-583).
    protect: bool,
    opts: DriverOptions,
    cache: Mutex<Cache>,
    creates: AtomicUsize,
    created_names: Mutex<Vec<String>>,
    attach_misses: AtomicUsize,
    full_syncs: AtomicUsize,
    /// Pods handled by `podAdded`.
    pod_adds: AtomicUsize,
    leading: AtomicBool,
    /// The identity of the pod whose syncer leads now.
    leader: Mutex<Option<String>>,
    /// Leadership terms started (each one cold).
    terms: AtomicUsize,
    /// Replacement pods created so far (their identities' suffixes).
    pods_created: AtomicUsize,
    path_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    log: Mutex<Vec<String>>,
    started: Instant,
}

impl Inner {
    /// Records a line of what the double did (see [`CsiDriverDouble::log`]).
    fn note(&self, line: String) {
        let at = self.started.elapsed().as_secs_f32();
        lock(&self.log).push(format!("{at:7.2}s {line}"));
    }
}

/// The running double.
pub struct CsiDriverDouble {
    inner: Arc<Inner>,
    tasks: JoinSet<()>,
    /// The syncer pods running now: identity and task.
    pods: Vec<(String, tokio::task::AbortHandle)>,
}

/// The controller Deployment's name in the stock manifest.
pub const DEPLOYMENT: &str = "vsphere-csi-controller";

impl CsiDriverDouble {
    /// Starts the driver: its cache informer and, with `opts.lead`, its syncer's campaign.
    pub async fn start(cluster: &Cluster, sim: &Vcsim, opts: DriverOptions) -> CsiDriverDouble {
        let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": opts.namespace}}))
                .expect("namespace");
        let _ = namespaces.create(&PostParams::default(), &ns).await;
        let (_, about_version, _) = sim.vcenter_version().await;
        let host = sim
            .host_port()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        let inner = Arc::new(Inner {
            client: cluster.client.clone(),
            soap: sim.soap().await,
            host,
            datacenters: sim
                .datacenters
                .iter()
                .map(|d| d.trim_start_matches('/').to_owned())
                .collect(),
            protect: at_least_803(&about_version),
            opts,
            cache: Mutex::default(),
            creates: AtomicUsize::new(0),
            created_names: Mutex::default(),
            attach_misses: AtomicUsize::new(0),
            full_syncs: AtomicUsize::new(0),
            pod_adds: AtomicUsize::new(0),
            leading: AtomicBool::new(false),
            leader: Mutex::default(),
            terms: AtomicUsize::new(0),
            pods_created: AtomicUsize::new(0),
            path_locks: Mutex::default(),
            log: Mutex::default(),
            started: Instant::now(),
        });
        if inner.opts.deployment {
            install_deployment(&inner).await;
        }
        let mut double = CsiDriverDouble {
            inner,
            tasks: JoinSet::new(),
            pods: Vec::new(),
        };
        double.spawn();
        double
    }

    /// The driver's pods: with `lead`, one syncer process per replica, each campaigning;
    /// without, the controller's cache only.
    fn spawn(&mut self) {
        let inner = Arc::clone(&self.inner);
        if !inner.opts.lead {
            self.tasks.spawn(async move {
                cache::run_informer(Api::all(inner.client.clone()), &inner.cache).await;
            });
            return;
        }
        for n in 0..inner.opts.replicas.max(1) {
            let identity = if n == 0 {
                inner.opts.identity.clone()
            } else {
                format!("{}-{n}", inner.opts.identity)
            };
            self.spawn_pod(identity);
        }
    }

    fn spawn_pod(&mut self, identity: String) {
        let handle = self
            .tasks
            .spawn(run_pod(Arc::clone(&self.inner), identity.clone()));
        self.pods.push((identity, handle));
    }

    /// The pod whose syncer leads now, if one does.
    pub fn leader(&self) -> Option<String> {
        lock(&self.inner.leader).clone()
    }

    /// Leadership terms started so far; each starts with an empty cache.
    pub fn terms(&self) -> usize {
        self.inner.terms.load(Ordering::SeqCst)
    }

    /// `kubectl delete pod <leader>` during a rollout: the leading syncer gets SIGTERM and
    /// exits at once without releasing its Lease (`cmd/syncer/main.go:139-150` @ bf80902:
    /// `os.Exit(0)` in the signal handler, so `ReleaseOnCancel` never runs); the ReplicaSet
    /// starts a replacement pod that campaigns like the others. Returns the deleted pod.
    pub async fn delete_leader_pod(&mut self) -> Option<String> {
        let leader = self.leader()?;
        let index = self.pods.iter().position(|(id, _)| *id == leader)?;
        let (_, handle) = self.pods.remove(index);
        handle.abort();
        while !handle.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        end_term(&self.inner, &leader);
        self.inner.note(format!(
            "pod {leader} deleted (SIGTERM: exit without release)"
        ));
        let n = self.inner.pods_created.fetch_add(1, Ordering::SeqCst);
        self.spawn_pod(format!("{}-r{n}", self.inner.opts.identity));
        Some(leader)
    }

    /// `kubectl delete deployment`: every pod exits without releasing the Lease and the
    /// Deployment is gone (the driver is uninstalled).
    pub async fn uninstall(&mut self) {
        self.kill().await;
        let api: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.inner.client.clone(), &self.inner.opts.namespace);
        let _ = api
            .delete(DEPLOYMENT, &kube::api::DeleteParams::default())
            .await;
        self.inner.note("uninstalled".into());
    }

    /// `CnsCreateVolume` calls the double sent (every datacenter attempt counts).
    pub fn creates(&self) -> usize {
        self.inner.creates.load(Ordering::SeqCst)
    }

    /// The CNS names of those creates (random UUIDs, as the driver's).
    pub fn created_names(&self) -> Vec<String> {
        lock(&self.inner.created_names).clone()
    }

    /// The cache now: raw path → volume ID.
    pub fn cache_snapshot(&self) -> BTreeMap<String, String> {
        lock(&self.inner.cache).snapshot()
    }

    /// Every event the cache applied, across restarts.
    pub fn cache_events(&self) -> Vec<CacheEvent> {
        lock(&self.inner.cache).events()
    }

    /// True once the current run's first list of objects was applied.
    pub fn cache_synced(&self) -> bool {
        lock(&self.inner.cache).synced()
    }

    /// The controller's `GetVolumeID(register=false)` at attach, detach or expand: the
    /// cached ID, or `None` — a retryable error — counted as a miss.
    pub fn attach_lookup(&self, raw: &str) -> Option<String> {
        let hit = lock(&self.inner.cache).get(raw);
        if hit.is_none() {
            self.inner.attach_misses.fetch_add(1, Ordering::SeqCst);
            self.inner.note(format!("attach miss {raw:?}"));
        }
        hit
    }

    /// Attach-time misses so far.
    pub fn attach_misses(&self) -> usize {
        self.inner.attach_misses.load(Ordering::SeqCst)
    }

    /// Whether the syncer leads now.
    pub fn is_leading(&self) -> bool {
        self.inner.leading.load(Ordering::SeqCst)
    }

    /// Completed full-sync passes.
    pub fn full_syncs(&self) -> usize {
        self.inner.full_syncs.load(Ordering::SeqCst)
    }

    /// Pods the syncer's `podAdded` has handled (each inline volume looked up).
    pub fn pod_adds(&self) -> usize {
        self.inner.pod_adds.load(Ordering::SeqCst)
    }

    /// One stale clean-up pass now: the names of the objects it deleted.
    pub async fn run_cleanup(&self) -> Result<Vec<String>, String> {
        syncer::cleanup(&self.inner).await
    }

    /// What the double did, one line per action, for failure messages.
    pub fn log(&self) -> Vec<String> {
        lock(&self.inner.log).clone()
    }

    /// A crash and a container restart of every pod (same pod names): every task stops at
    /// once without releasing the Lease, then each syncer campaigns again; whichever leads
    /// starts with an empty cache.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.inner.note("restarted".into());
        self.spawn();
    }

    /// A crash that stays down: every task stops at once, the Lease is left as it is (it
    /// runs out after its duration).
    pub async fn crash(&mut self) {
        self.kill().await;
        self.inner.note("crashed".into());
    }

    /// What `GetVolumeID(register=true)` does once its cache missed (migration.go:230-251):
    /// `registerVolume` (random CNS name, this cluster ID) and `saveVolumeInfo` for `raw`,
    /// whatever the cache holds — for tests that place the driver's registration at a
    /// chosen moment (a miss in a race). Returns the volume ID.
    pub async fn register_on_miss(&self, raw: &str) -> String {
        syncer::register_and_save(&self.inner, raw)
            .await
            .unwrap_or_else(|e| panic!("the driver registers {raw}: {e}"))
    }

    /// `GetVolumeID(raw, register)` as the syncer (true) or the controller (false) calls it.
    pub async fn get_volume_id(&self, raw: &str, register: bool) -> Result<String, String> {
        syncer::get_volume_id(&self.inner, raw, register).await
    }

    /// A graceful stop (SIGTERM to every pod): every task stops and the Lease is left as it
    /// is — the signal handler exits without releasing it (`cmd/syncer/main.go:139-150`).
    pub async fn stop(&mut self) {
        self.kill().await;
        self.inner.note("stopped".into());
    }

    async fn kill(&mut self) {
        self.tasks.shutdown().await;
        self.pods.clear();
        self.inner.leading.store(false, Ordering::SeqCst);
        *lock(&self.inner.leader) = None;
        lock(&self.inner.cache).forget();
    }
}

impl Drop for CsiDriverDouble {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// `about.version` ≥ 8.0.3 (`IsvSphereVersion80U3orAbove`).
fn at_least_803(version: &str) -> bool {
    let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    parts
        .get(..3)
        .is_some_and(|p| (p[0], p[1], p[2]) >= (8, 0, 3))
        || parts.first().is_some_and(|m| *m > 8)
}

/// The driver's controller Deployment as the stock manifest has it (syncer with
/// `--leader-election`), with every replica available.
async fn install_deployment(inner: &Inner) {
    let o = &inner.opts;
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(inner.client.clone(), &o.namespace);
    let replicas = i32::try_from(o.replicas.max(1)).unwrap_or(1);
    let lease = format!(
        "--leader-election-lease-duration={}s",
        o.lease_duration.as_secs()
    );
    let deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": DEPLOYMENT},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"app": DEPLOYMENT}},
                "spec": {"containers": [
                    {"name": "vsphere-csi-controller", "image": "csi-vsphere/driver:latest"},
                    {"name": "vsphere-syncer", "image": "csi-vsphere/syncer:latest",
                     "args": ["--leader-election", lease]},
                ]}
            }
        }
    }))
    .expect("the driver's Deployment");
    let _ = api.create(&PostParams::default(), &deployment).await;
    let status = serde_json::json!({"status": {
        "replicas": replicas, "availableReplicas": replicas, "readyReplicas": replicas}});
    api.patch_status(
        DEPLOYMENT,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .expect("the driver's Deployment status");
}

/// client-go's `wait.JitterUntil(…, RetryPeriod, JitterFactor=1.2, …)` pause.
fn jittered(retry: Duration, factor: f64) -> Duration {
    retry.mul_f64(1.0 + factor.max(0.0) * rand::random::<f64>())
}

/// One syncer pod (`cmd/syncer/main.go:207-257`): campaign; lead while renewing; on losing
/// the Lease `OnStoppedLeading` exits the process (L242-246) and the container restarts,
/// so every term starts from nothing.
async fn run_pod(inner: Arc<Inner>, identity: String) {
    loop {
        campaign_and_lead(&inner, &identity).await;
        end_term(&inner, &identity);
        inner.note(format!("{identity}: stopped leading: exit"));
    }
}

/// The term of `identity` ended (lost Lease, pod deleted): nothing of it survives.
fn end_term(inner: &Inner, identity: &str) {
    let mut leader = lock(&inner.leader);
    if leader.as_deref() == Some(identity) {
        *leader = None;
        inner.leading.store(false, Ordering::SeqCst);
        lock(&inner.cache).forget();
    }
}

/// Campaigns (a standby retries every retry period with jitter), then runs the syncer
/// while renewing every retry period; returns when leadership is lost.
async fn campaign_and_lead(inner: &Arc<Inner>, identity: &str) {
    let o = &inner.opts;
    let mut elector = Elector::new(
        inner.client.clone(),
        &o.namespace,
        &o.lease_name,
        identity,
        o.lease_duration,
    );
    while !elector.try_acquire_or_renew().await {
        tokio::time::sleep(jittered(o.retry_period, o.retry_jitter)).await;
    }
    // A new process leads: its caches are empty (the previous leader's were in another
    // process).
    lock(&inner.cache).forget();
    *lock(&inner.leader) = Some(identity.to_owned());
    inner.leading.store(true, Ordering::SeqCst);
    inner.terms.fetch_add(1, Ordering::SeqCst);
    inner.note(format!("{identity}: became leader"));
    let mut work = JoinSet::new();
    work.spawn(run_term(Arc::clone(inner)));
    let mut last_renewal = Instant::now();
    loop {
        tokio::time::sleep(o.retry_period).await;
        if elector.try_acquire_or_renew().await {
            last_renewal = Instant::now();
        } else if last_renewal.elapsed() > o.renew_deadline {
            work.shutdown().await;
            return;
        }
    }
}

/// One leadership term, started cold: the migration service creates its cache informer on
/// first use and does not wait for its list (`pkg/apis/migration/migration.go:160-205`,
/// `informer.Informer().Run` in a goroutine; `pkg/kubernetes/dynamicInformers.go:90-105`
/// only builds it), so the PV and pod informers and the first full sync (at once:
/// `for ; true; <-fullSyncTicker.C`, `pkg/syncer/metadatasyncer.go:869`) look up an empty
/// or partial cache and register what they miss.
async fn run_term(inner: Arc<Inner>) {
    let mut work = JoinSet::new();
    let informer = Arc::clone(&inner);
    work.spawn(async move {
        tokio::time::sleep(informer.opts.cache_list_delay).await;
        cache::run_informer(Api::all(informer.client.clone()), &informer.cache).await;
    });
    work.spawn(syncer::run_pv_informer(Arc::clone(&inner)));
    work.spawn(syncer::run_pod_informer(Arc::clone(&inner)));
    let full = Arc::clone(&inner);
    work.spawn(async move {
        loop {
            if let Err(e) = syncer::full_sync(&full).await {
                full.note(format!("full sync failed: {e}"));
            }
            tokio::time::sleep(full.opts.full_sync_interval).await;
        }
    });
    if let Some(every) = inner.opts.cleanup_interval {
        let clean = Arc::clone(&inner);
        work.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = syncer::cleanup(&clean).await {
                    clean.note(format!("cleanup failed: {e}"));
                }
            }
        });
    }
    while work.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_from_803_protect_new_registrations() {
        assert!(super::at_least_803("8.0.3"));
        assert!(super::at_least_803("9.0.0"));
        assert!(!super::at_least_803("8.0.2"));
        assert!(!super::at_least_803("7.0.3"));
        assert!(!super::at_least_803(""));
    }
}

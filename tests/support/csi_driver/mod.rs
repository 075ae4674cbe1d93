//! A test double of the vSphere CSI driver (kubernetes-sigs/vsphere-csi-driver @ bf80902),
//! as docs/design.md §8.8 describes it, bugs included, run as tokio tasks inside
//! the test process against the API test server and the simulator harness:
//!
//! - its cache of `CnsVSphereVolumeMigration` objects, Add and Delete only ([`cache`]);
//! - the syncer's leader election on the Lease `vsphere-syncer` ([`lease`]);
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
}

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
            path_locks: Mutex::default(),
            log: Mutex::default(),
            started: Instant::now(),
        });
        let mut double = CsiDriverDouble {
            inner,
            tasks: JoinSet::new(),
        };
        double.spawn();
        double
    }

    fn spawn(&mut self) {
        let inner = Arc::clone(&self.inner);
        self.tasks.spawn(run_process(inner));
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

    /// A crash and a container restart: every task stops at once without releasing the
    /// Lease, then the driver starts again with an empty cache rebuilt from a list.
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

    /// A graceful stop: every task stops and the Lease is released if held
    /// (`ReleaseOnCancel`, cmd/syncer/main.go:255).
    pub async fn stop(&mut self) {
        let was_leading = self.is_leading();
        self.kill().await;
        if was_leading {
            let o = &self.inner.opts;
            let mut elector = Elector::new(
                self.inner.client.clone(),
                &o.namespace,
                &o.lease_name,
                &o.identity,
                o.lease_duration,
            );
            elector.release().await;
        }
        self.inner.note("stopped".into());
    }

    async fn kill(&mut self) {
        self.tasks.shutdown().await;
        self.inner.leading.store(false, Ordering::SeqCst);
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

/// One driver process: the cache informer, and the syncer's campaign. Losing the Lease
/// exits the process (`OnStoppedLeading`, main.go:242-246): it starts again with an empty
/// cache.
async fn run_process(inner: Arc<Inner>) {
    loop {
        let mut process = JoinSet::new();
        let api = Api::all(inner.client.clone());
        let informer = Arc::clone(&inner);
        process.spawn(async move {
            cache::run_informer(api, &informer.cache).await;
        });
        if !inner.opts.lead {
            while process.join_next().await.is_some() {}
            return;
        }
        campaign_and_lead(&inner).await;
        inner.leading.store(false, Ordering::SeqCst);
        inner.note("stopped leading: exit".into());
        process.shutdown().await;
        lock(&inner.cache).forget();
    }
}

/// Campaigns, then runs the syncer while renewing; returns when leadership is lost.
async fn campaign_and_lead(inner: &Arc<Inner>) {
    let o = &inner.opts;
    let mut elector = Elector::new(
        inner.client.clone(),
        &o.namespace,
        &o.lease_name,
        &o.identity,
        o.lease_duration,
    );
    while !elector.try_acquire_or_renew().await {
        tokio::time::sleep(o.retry_period).await;
    }
    inner.leading.store(true, Ordering::SeqCst);
    inner.note("became leader".into());
    let mut work = JoinSet::new();
    work.spawn(run_syncer(Arc::clone(inner)));
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

/// The syncer's work while leading: wait for the cache's first list (the syncer's own
/// informers take longer to sync than one list), then the PV and pod informers, the full sync
/// (first pass at once: `for ; true; <-fullSyncTicker.C`, metadatasyncer.go:869) and the
/// stale clean-up ticker.
async fn run_syncer(inner: Arc<Inner>) {
    while !lock(&inner.cache).synced() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut work = JoinSet::new();
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

//! The Kubernetes API test server (`kube_testserver`), in this process on its own thread,
//! with the CRD installed, and bulk creation of the objects the scenarios start from.

use std::path::PathBuf;

use anyhow::Context as _;
use futures::{TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_testserver::{Options, Stats, TestServer, Verb};
use volmig::VolumePath;
use volmig::backend::VolumeId;
use volmig::k8s::driver_cache::{
    CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec, MANAGED_BY,
};
use volmig::registrar::StatusUpdate;
use volmig::volume_migration::{FIELD_MANAGER, Phase, VolumeMigration};

/// User agent of every request the benchmark itself makes, so that its own writes (PV
/// creation) are told apart from volmig's at the server.
pub const BENCH_USER_AGENT: &str = "volmig-bench";

/// Requests in flight while creating objects in bulk.
const BULK_CONCURRENCY: usize = 32;

/// A running API test server and a client for it.
pub struct Cluster {
    /// The server.
    pub server: TestServer,
    /// Kubeconfig for the daemon.
    pub kubeconfig: PathBuf,
    /// The benchmark's own client.
    pub client: kube::Client,
    _dir: tempfile::TempDir,
}

/// One volume as the scenarios create it: a PV and (optionally) its Registered migration.
#[derive(Debug, Clone)]
pub struct Volume {
    /// PV name.
    pub pv: String,
    /// In-tree volume path as written in the PV.
    pub path: String,
}

impl Cluster {
    /// Starts a server, installs the VolumeMigration CRD and the `kube-system` and
    /// `vmware-system-csi` namespaces.
    pub async fn start() -> anyhow::Result<Cluster> {
        let dir = tempfile::Builder::new()
            .prefix("volmig-bench-kube-")
            .tempdir()
            .context("creating the API server's temp dir")?;
        let server = TestServer::start(Options::default())
            .await
            .context("starting the API test server")?;
        let kubeconfig = dir.path().join("kubeconfig");
        server
            .write_kubeconfig(&kubeconfig)
            .context("writing the kubeconfig")?;
        let client = client(&kubeconfig).await?;
        let cluster = Cluster {
            server,
            kubeconfig,
            client,
            _dir: dir,
        };
        cluster.install().await?;
        Ok(cluster)
    }

    async fn install(&self) -> anyhow::Result<()> {
        let yaml = volmig::volume_migration::crd_yaml().context("rendering the CRD")?;
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&yaml).context("parsing the CRD")?;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        crds.create(&PostParams::default(), &crd)
            .await
            .context("installing the VolumeMigration CRD")?;
        // kube-system for volmig's Lease; the CSI driver's namespace for the driver
        // syncer's Lease, which volmig holds itself before it registers (no driver here).
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for name in ["kube-system", "vmware-system-csi"] {
            let ns: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
            match namespaces.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e).with_context(|| format!("creating namespace {name}")),
            }
        }
        Ok(())
    }

    /// Installs the vSphere CSI driver's `CnsVSphereVolumeMigration` CRD, as a cluster
    /// running the driver has it: volmig then indexes the driver's cache and publishes to it.
    pub async fn install_driver_crd(&self) -> anyhow::Result<()> {
        let yaml = volmig::k8s::driver_cache::crd_yaml().context("rendering the driver's CRD")?;
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&yaml).context("parsing the driver's CRD")?;
        Api::<CustomResourceDefinition>::all(self.client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .context("installing the CnsVSphereVolumeMigration CRD")?;
        let api = self.driver_objects();
        for _ in 0..300 {
            if api.list(&ListParams::default().limit(1)).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        anyhow::bail!("the CnsVSphereVolumeMigration CRD is not served after 30 s")
    }

    /// The CSI driver's cache objects.
    pub fn driver_objects(&self) -> Api<CnsVSphereVolumeMigration> {
        Api::all(self.client.clone())
    }

    /// Creates, for each `(volume, id)`, the driver cache object volmig publishes for a
    /// Registered path with one PV: named after the ID, labelled as volmig's.
    pub async fn create_driver_objects(
        &self,
        volumes: &[(Volume, VolumeId)],
    ) -> anyhow::Result<()> {
        let api = self.driver_objects();
        stream::iter(volumes.iter().map(Ok))
            .try_for_each_concurrent(BULK_CONCURRENCY, |(v, id)| {
                let api = api.clone();
                async move {
                    let spec = CnsVSphereVolumeMigrationSpec {
                        volumepath: v.path.clone(),
                        volumeid: id.0.clone(),
                        protectvolumefromvmdelete: true,
                    };
                    let mut object = CnsVSphereVolumeMigration::new(&id.0, spec);
                    object.metadata.labels =
                        Some([(MANAGED_BY.to_owned(), "volmig".to_owned())].into());
                    let params = PostParams {
                        field_manager: Some(FIELD_MANAGER.to_owned()),
                        ..Default::default()
                    };
                    api.create(&params, &object)
                        .await
                        .with_context(|| format!("creating CnsVSphereVolumeMigration {}", id.0))
                        .map(drop)
                }
            })
            .await
    }

    /// The PV API.
    pub fn pvs(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// The VolumeMigration API.
    pub fn migrations(&self) -> Api<VolumeMigration> {
        Api::all(self.client.clone())
    }

    /// Creates in-tree vSphere PVs (Retain), `BULK_CONCURRENCY` at a time.
    pub async fn create_pvs(&self, volumes: &[Volume]) -> anyhow::Result<()> {
        let api = self.pvs();
        stream::iter(volumes.iter().map(Ok))
            .try_for_each_concurrent(BULK_CONCURRENCY, |v| {
                let api = api.clone();
                async move {
                    api.create(&PostParams::default(), &pv(&v.pv, &v.path)?)
                        .await
                        .with_context(|| format!("creating PV {}", v.pv))
                        .map(drop)
                }
            })
            .await
    }

    /// Creates, for each `(volume, id)`, the VolumeMigration volmig would have after
    /// registering it: volmig's finalizer and label, then one status patch under volmig's
    /// field manager with phase Registered, the volume ID, a disk UUID and the PV.
    pub async fn create_registered(&self, volumes: &[(Volume, VolumeId)]) -> anyhow::Result<()> {
        let api = self.migrations();
        let now = jiff::Timestamp::now();
        stream::iter(volumes.iter().enumerate().map(Ok))
            .try_for_each_concurrent(BULK_CONCURRENCY, |(i, (v, id))| {
                let api = api.clone();
                async move {
                    let path = VolumePath::parse(&v.path)
                        .with_context(|| format!("parsing {}", v.path))?;
                    let name = path.object_name();
                    let params = PostParams {
                        field_manager: Some(FIELD_MANAGER.to_owned()),
                        ..Default::default()
                    };
                    api.create(&params, &volmig::k8s::migrations::new_migration(&path))
                        .await
                        .with_context(|| format!("creating VolumeMigration {name}"))?;
                    let update = StatusUpdate::Registered {
                        volume_id: id.clone(),
                        disk_uuid: Some(volmig::backend::memory::disk_uuid_as_vcenter_spells_it(
                            i as u64,
                        )),
                        adopted: false,
                        attempts: 1,
                        protected: true,
                    };
                    let mut patch = volmig::k8s::status::status_patch(
                        &volmig::k8s::status::StatusChange::Registrar(update),
                        now,
                    );
                    patch["status"]["persistentVolumes"] = serde_json::json!([v.pv]);
                    patch["status"]["observedGeneration"] = serde_json::json!(1);
                    api.patch_status(
                        &name,
                        &PatchParams::apply(FIELD_MANAGER),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .with_context(|| format!("writing the status of {name}"))
                    .map(drop)
                }
            })
            .await
    }

    /// Number of VolumeMigrations in phase Registered, and in all.
    pub async fn registered_count(&self) -> anyhow::Result<(usize, usize)> {
        let mut registered = 0;
        let mut all = 0;
        let api = self.migrations();
        let mut params = ListParams::default().limit(500);
        loop {
            let page = api
                .list(&params)
                .await
                .context("listing VolumeMigrations")?;
            all += page.items.len();
            registered += page
                .items
                .iter()
                .filter(|vm| vm.status.as_ref().and_then(|s| s.phase) == Some(Phase::Registered))
                .count();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok((registered, all)),
            }
        }
    }

    /// A snapshot of the request counters.
    pub fn stats(&self) -> Stats {
        self.server.stats()
    }
}

/// Writes made by anyone but the benchmark, split into (leases, events, everything else).
pub fn daemon_writes(stats: &Stats) -> (u64, u64, u64) {
    let bench = stats
        .writes_by_user_agent
        .get(BENCH_USER_AGENT)
        .copied()
        .unwrap_or(0);
    let leases = stats.writes_to("leases");
    let events = stats.writes_to("events");
    let total = stats.writes.saturating_sub(bench);
    (leases, events, total.saturating_sub(leases + events))
}

/// Requests of `verb` on any resource.
pub fn count_verb(stats: &Stats, verb: Verb) -> u64 {
    stats
        .requests
        .iter()
        .filter(|r| r.verb == verb)
        .map(|r| r.count)
        .sum()
}

/// `verb resource[/subresource]` → count, for the JSON results.
pub fn by_verb(stats: &Stats, keep: impl Fn(Verb) -> bool) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for r in stats.requests.iter().filter(|r| keep(r.verb)) {
        let verb = serde_json::to_value(r.verb)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let key = match &r.subresource {
            Some(sub) => format!("{verb} {}/{sub}", r.resource),
            None => format!("{verb} {}", r.resource),
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += r.count,
            None => out.push((key, r.count)),
        }
    }
    out
}

/// A client for `kubeconfig` that identifies itself as the benchmark.
pub async fn client(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .context("loading the kubeconfig")?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(BENCH_USER_AGENT),
    ));
    kube::Client::try_from(config).context("creating the Kubernetes client")
}

fn pv(name: &str, path: &str) -> anyhow::Result<PersistentVolume> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "vsphereVolume": {"volumePath": path, "fsType": "ext4"}
        }
    }))?)
}

/// Volumes `pv-N` for `[datastore] kubevols/disk-NNNN.vmdk`, N in `range` (1-based).
pub fn volumes(datastore: &str, range: std::ops::Range<usize>) -> Vec<Volume> {
    range
        .map(|n| Volume {
            pv: format!("pv-{n}"),
            path: format!("[{datastore}] kubevols/disk-{n:04}.vmdk"),
        })
        .collect()
}

//! Full sync (docs/design.md §6): at start-up, on becoming leader and every interval, one pass
//! that lists PVs and CNS volumes, joins them with the VolumeMigration cache, and repairs
//! every difference. One bad vmdk never aborts a pass; a pass with nothing to repair writes
//! nothing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::{Context, MigrationCache};
use crate::backend::selection::date_possible_duplicates;
use crate::backend::{BackendError, list_all_volumes};
use crate::k8s::inline_volumes::for_each_inline_volume;
use crate::k8s::paged::{PvPath, for_each_item_page};
use crate::volume_migration::{Phase, VolumeMigration};
use crate::volume_path::VolumePath;

mod driver_repairs;
pub mod plan;
mod repair;

pub use plan::{MigrationRecord, PassPlan, Repair, plan};
pub use repair::RepairError;

/// Why a pass could not run at all (a listing failed). Single repairs never fail a pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing PersistentVolumes failed.
    #[error("full sync: listing PersistentVolumes")]
    ListPvs(#[source] kube::Error),
    /// Listing pods (for inline vSphere volumes) failed.
    #[error("full sync: listing pods (inline vSphere volumes)")]
    ListPods(#[source] kube::Error),
    /// Listing CNS volumes failed.
    #[error("full sync: listing CNS volumes")]
    ListVolumes(#[source] BackendError),
}

/// Page size of the PV list.
pub const PAGE_SIZE: u32 = 500;

/// What one pass saw and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassSummary {
    /// In-tree PVs with a valid path.
    pub pvs: usize,
    /// VolumeMigrations.
    pub migrations: usize,
    /// CNS volumes.
    pub volumes: usize,
    /// Repairs attempted.
    pub repairs: usize,
    /// Repairs that failed (retried next pass).
    pub failed: usize,
    /// Disks with duplicate CNS volumes.
    pub duplicate_disks: usize,
    /// Orphaned volmig volumes.
    pub orphans: usize,
}

/// The full-sync engine.
pub struct FullSync {
    ctx: Arc<Context>,
    pvs: Api<PersistentVolume>,
    /// Pods, when inline vSphere volumes are watched (docs/design.md §8.9).
    pods: Option<Api<Pod>>,
    migrations: Arc<MigrationCache>,
    gc_orphans: bool,
    concurrency: usize,
    absent: Mutex<HashSet<VolumePath>>,
    /// Once cancelled, no new repair starts (in-flight ones finish).
    shutdown: CancellationToken,
}

impl FullSync {
    /// A full sync acting through `ctx`, reading VolumeMigrations from the controller's
    /// cache. Once `shutdown` is cancelled no new pass or repair starts (in-flight repairs
    /// finish).
    pub fn new(
        ctx: Arc<Context>,
        pvs: Api<PersistentVolume>,
        migrations: Arc<MigrationCache>,
        gc_orphans: bool,
        concurrency: usize,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            ctx,
            pvs,
            pods: None,
            migrations,
            gc_orphans,
            concurrency: concurrency.max(1),
            absent: Mutex::new(HashSet::new()),
            shutdown,
        }
    }

    /// Counts the inline vSphere volumes of `pods` as users of their paths: a path only
    /// pods name is in use, never unused (docs/design.md §8.9).
    pub fn with_pods(mut self, pods: Api<Pod>) -> Self {
        self.pods = Some(pods);
        self
    }

    /// Runs passes: when leadership is gained and then every `interval`, until shutdown.
    /// A pass in progress finishes its in-flight repairs but starts no new one.
    pub async fn run(self: Arc<Self>, interval: Duration, mut leader: watch::Receiver<bool>) {
        let shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                became = leader.wait_for(|l| *l) => if became.is_err() { return },
            }
            // A new term starts the two-pass deletion rule afresh: what an earlier term saw
            // missing may be long out of date (docs/design.md §5.3).
            self.begin_term();
            loop {
                if let Err(e) = self.run_pass().await {
                    warn!(error = %crate::error_chain(&e), "full sync pass failed; retrying at the next interval");
                }
                // A closed signal (a single replica that always leads) never ends the term.
                let lost = async { leader.wait_for(|l| !*l).await.is_ok() };
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                    true = lost => break,
                }
            }
        }
    }

    /// Starts a leadership term: forgets which paths earlier passes found without PVs, so
    /// that the two-pass deletion rule counts passes of this term only.
    pub fn begin_term(&self) {
        self.absent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// One pass: list, join, repair.
    pub async fn run_pass(&self) -> Result<PassSummary, Error> {
        let started = Instant::now();
        let result = self.pass().instrument(info_span!("full_sync")).await;
        self.ctx
            .metrics
            .full_sync_pass(started.elapsed(), result.is_ok());
        match &result {
            Ok(s) => info!(
                pvs = s.pvs,
                migrations = s.migrations,
                cns_volumes = s.volumes,
                repairs = s.repairs,
                failed = s.failed,
                duplicate_disks = s.duplicate_disks,
                orphans = s.orphans,
                duration_ms = started.elapsed().as_millis() as u64,
                "full sync pass"
            ),
            Err(e) => warn!(error = %crate::error_chain(e), "full sync pass aborted"),
        }
        result
    }

    async fn pass(&self) -> Result<PassSummary, Error> {
        super::pv_watcher::report_invalid_paths(&self.ctx).await;
        let pvs = self.list_pvs().await?;
        let backend = self.ctx.registrar.backend();
        let mut volumes = list_all_volumes(backend.as_ref())
            .await
            .map_err(Error::ListVolumes)?;
        date_possible_duplicates(backend.as_ref(), &mut volumes).await;
        let migrations: Vec<MigrationRecord> = self.migrations.records();
        self.publish_phases(&migrations);

        let absent_before = self
            .absent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let driver_ids = self.driver_ids(&pvs);
        let in_use = self.ctx.index.csi().ids_in_use();
        let planned = plan(&plan::PassInputs {
            pvs: &pvs,
            migrations: &migrations,
            volumes: &volumes,
            absent_before: &absent_before,
            gc_orphans: self.gc_orphans,
            cluster_id: self.ctx.registrar.cluster_id(),
            driver_ids: &driver_ids,
            in_use: &in_use,
        });
        *self.absent.lock().unwrap_or_else(PoisonError::into_inner) = planned.absent.clone();
        self.ctx
            .metrics
            .set_duplicate_volumes(planned.duplicate_disks);
        self.ctx.metrics.set_orphan_volumes(planned.orphans);

        // Bounded concurrency without closures over borrowed data (keeps the future Send).
        // `None`: skipped, leadership was lost before the repair's turn came.
        let mut outcomes: Vec<Option<bool>> = Vec::with_capacity(planned.repairs.len());
        let mut running = FuturesUnordered::new();
        for repair in &planned.repairs {
            if !self.may_write() {
                info!("shutting down or no longer the leader: the pass makes no more repairs");
                break;
            }
            if running.len() >= self.concurrency
                && let Some(ok) = running.next().await
            {
                outcomes.push(ok);
            }
            running.push(self.repair(repair, &pvs));
        }
        while let Some(ok) = running.next().await {
            outcomes.push(ok);
        }
        let outcomes: Vec<bool> = outcomes.into_iter().flatten().collect();
        // Paths repaired in this pass may have changed their mapping: the snapshot is stale
        // for them (their reconcile publishes the new one).
        let repaired: HashSet<&VolumePath> =
            planned.repairs.iter().filter_map(Repair::path).collect();
        let published = self.publish_all(&migrations, &repaired).await;
        Ok(PassSummary {
            pvs: pvs.values().map(Vec::len).sum(),
            migrations: migrations.len(),
            volumes: volumes.len(),
            repairs: outcomes.len() + published,
            failed: outcomes.iter().filter(|ok| !**ok).count(),
            duplicate_disks: planned.duplicate_disks,
            orphans: planned.orphans,
        })
    }

    /// Lists PVs (and pods, when watched) page by page: the users of every valid in-tree
    /// path.
    async fn list_pvs(&self) -> Result<HashMap<VolumePath, Vec<String>>, Error> {
        let mut users = list_pvs_by_path(&self.pvs).await?;
        if let Some(pods) = &self.pods {
            add_inline_pod_users(pods, &mut users).await?;
        }
        Ok(users)
    }

    /// IDs the CSI driver's cache holds for the paths in use.
    fn driver_ids(
        &self,
        pvs: &HashMap<VolumePath, Vec<String>>,
    ) -> HashMap<VolumePath, Vec<String>> {
        let Some(driver) = &self.ctx.cluster.driver else {
            return HashMap::new();
        };
        pvs.keys()
            .filter_map(|p| {
                let ids: Vec<String> = driver.index.ids_for(p).into_iter().map(|id| id.0).collect();
                (!ids.is_empty()).then(|| (p.clone(), ids))
            })
            .collect()
    }

    /// Keeps every Registered mapping published in the CSI driver's cache (no API call for
    /// those in sync). Returns how many mappings needed writes.
    async fn publish_all(
        &self,
        migrations: &[MigrationRecord],
        repaired: &HashSet<&VolumePath>,
    ) -> usize {
        if self
            .ctx
            .cluster
            .driver
            .as_ref()
            .is_none_or(|d| !d.publish || !d.index.is_served())
        {
            return 0;
        }
        let mut changed = 0;
        let mut missing = 0;
        for m in migrations {
            let (Some(path), Some(Phase::Registered), Some(id), false) =
                (&m.path, m.phase, &m.volume_id, m.deleting)
            else {
                continue;
            };
            if !self.may_write() {
                return changed;
            }
            if repaired.contains(path) {
                continue;
            }
            let id = crate::backend::VolumeId(id.clone());
            match super::publish::publish(&self.ctx, path, &id, m.protected).await {
                Ok(0) => {}
                Ok(_) => changed += 1,
                Err(e) => {
                    missing += 1;
                    warn!(%path, error = %e, "could not publish to the CSI driver's cache");
                }
            }
        }
        self.ctx.metrics.set_driver_objects_missing(missing);
        changed
    }

    /// Whether this pass may still write: not shutting down, and still the leader. Checked
    /// before each write, not only when the term began: a replica paused past its Lease
    /// (docs/design.md §4.2) must not act on a snapshot while another replica leads.
    fn may_write(&self) -> bool {
        !self.shutdown.is_cancelled() && self.ctx.leader.is_open()
    }

    fn publish_phases(&self, migrations: &[MigrationRecord]) {
        let mut counts: HashMap<Phase, i64> = HashMap::new();
        for m in migrations {
            *counts.entry(m.phase.unwrap_or(Phase::Pending)).or_default() += 1;
        }
        let all = [
            Phase::Pending,
            Phase::Registering,
            Phase::Registered,
            Phase::Failed,
            Phase::Unregistering,
        ];
        let counts: Vec<(Phase, i64)> = all
            .iter()
            .map(|p| (*p, counts.get(p).copied().unwrap_or(0)))
            .collect();
        self.ctx.metrics.set_volumes_by_phase(&counts);
    }
}

/// Lists PVs page by page: the names of the PVs of every valid in-tree path (sorted).
/// Only names and paths are decoded (see [`crate::k8s::paged`]).
pub async fn list_pvs_by_path(
    api: &Api<PersistentVolume>,
) -> Result<HashMap<VolumePath, Vec<String>>, Error> {
    let mut by_path: HashMap<VolumePath, Vec<String>> = HashMap::new();
    let client = api.clone().into_client();
    for_each_item_page(
        &client,
        api.resource_url(),
        PAGE_SIZE,
        |items: Vec<PvPath>| {
            for (name, raw) in items.into_iter().filter_map(PvPath::into_in_tree) {
                if let Ok(path) = VolumePath::parse(&raw) {
                    by_path.entry(path).or_default().push(name);
                }
            }
        },
    )
    .await
    .map_err(Error::ListPvs)?;
    for names in by_path.values_mut() {
        names.sort();
    }
    Ok(by_path)
}

/// Adds the inline vSphere volumes of every pod to `users` (keys of
/// [`crate::k8s::inline_volumes::pod_user_key`]), page by page, keeping each list sorted.
pub async fn add_inline_pod_users(
    api: &Api<Pod>,
    users: &mut HashMap<VolumePath, Vec<String>>,
) -> Result<(), Error> {
    let client = api.clone().into_client();
    for_each_inline_volume(&client, PAGE_SIZE, |volume| {
        if let Ok(path) = VolumePath::parse(&volume.raw) {
            users.entry(path).or_default().push(volume.key);
        }
    })
    .await
    .map_err(Error::ListPods)?;
    for names in users.values_mut() {
        names.sort();
    }
    Ok(())
}

/// What full sync needs of a cached VolumeMigration. An object whose name is not its
/// path's (a name collision, docs/design.md §2.6) gets no path: full sync never acts through it.
pub fn record(vm: &VolumeMigration) -> MigrationRecord {
    // Field by field: cloning the whole status would copy what the record drops.
    let status = vm.status.as_ref();
    let mut duplicates = status
        .and_then(|s| s.duplicate_volume_ids.clone())
        .unwrap_or_default();
    duplicates.sort();
    let name = vm.metadata.name.clone().unwrap_or_default();
    MigrationRecord {
        path: VolumePath::parse(&vm.spec.volume_path)
            .ok()
            .filter(|p| p.object_name() == name),
        name,
        version: vm.metadata.resource_version.clone(),
        phase: status.and_then(|s| s.phase),
        volume_id: status.and_then(|s| s.volume_id.clone()),
        pvs: status
            .and_then(|s| s.persistent_volumes.clone())
            .unwrap_or_default(),
        duplicates,
        protected: status.is_some_and(|s| s.protected_from_vm_delete == Some(true)),
        deleting: vm.metadata.deletion_timestamp.is_some(),
    }
}

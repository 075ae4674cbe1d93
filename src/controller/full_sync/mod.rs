//! Full sync (DESIGN.md §6): at start-up, on becoming leader and every interval, one pass
//! that lists PVs and CNS volumes, joins them with the VolumeMigration cache, and repairs
//! every difference. One bad vmdk never aborts a pass; a pass with nothing to repair writes
//! nothing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::{Phase, VolumeMigration};
use crate::backend::{BackendError, VolumeId, list_all_volumes};
use crate::events::reason as event_reason;
use crate::metrics::SyncAction;
use crate::migrations::{delete_migration, ensure_migration};
use crate::pv_index::{PvVolume, pv_volume};
use crate::reconcile::{Context, register_and_report};
use crate::volume_path::VolumePath;

pub mod plan;

pub use plan::{MigrationRecord, PassPlan, Repair, plan};

/// Why a pass could not run at all (a listing failed). Single repairs never fail a pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing PersistentVolumes failed.
    #[error("full sync: listing PersistentVolumes: {0}")]
    ListPvs(#[source] kube::Error),
    /// Listing CNS volumes failed.
    #[error("full sync: listing CNS volumes: {0}")]
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
    migrations: Store<VolumeMigration>,
    gc_orphans: bool,
    concurrency: usize,
    absent: Mutex<HashSet<VolumePath>>,
    /// Once cancelled, no new repair starts (in-flight ones finish).
    shutdown: CancellationToken,
}

impl FullSync {
    /// A full sync acting through `ctx`, reading VolumeMigrations from the controller's cache.
    pub fn new(
        ctx: Arc<Context>,
        pvs: Api<PersistentVolume>,
        migrations: Store<VolumeMigration>,
        gc_orphans: bool,
        concurrency: usize,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            ctx,
            pvs,
            migrations,
            gc_orphans,
            concurrency: concurrency.max(1),
            absent: Mutex::new(HashSet::new()),
            shutdown,
        }
    }

    /// Runs passes: when leadership is gained and then every `interval`, until `shutdown`.
    /// A pass in progress finishes its in-flight repairs but starts no new one.
    pub async fn run(
        self: Arc<Self>,
        interval: Duration,
        mut leader: watch::Receiver<bool>,
        shutdown: CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                became = leader.wait_for(|l| *l) => if became.is_err() { return },
            }
            if let Err(e) = self.run_pass().await {
                warn!(error = %e, "full sync pass failed; retrying at the next interval");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
                _ = leader.wait_for(|l| !*l) => {}
            }
        }
    }

    /// One pass: list, join, repair.
    pub async fn run_pass(&self) -> Result<PassSummary, Error> {
        let started = Instant::now();
        let result = self.pass().await;
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
            Err(e) => warn!(error = %e, "full sync pass aborted"),
        }
        result
    }

    async fn pass(&self) -> Result<PassSummary, Error> {
        crate::pv_watcher::report_invalid_paths(&self.ctx).await;
        let pvs = self.list_pvs().await?;
        let volumes = list_all_volumes(self.ctx.registrar.backend().as_ref())
            .await
            .map_err(Error::ListVolumes)?;
        let migrations: Vec<MigrationRecord> = self
            .migrations
            .state()
            .iter()
            .map(|vm| record(vm))
            .collect();
        self.publish_phases(&migrations);

        let absent_before = self
            .absent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let planned = plan(&plan::PassInputs {
            pvs: &pvs,
            migrations: &migrations,
            volumes: &volumes,
            absent_before: &absent_before,
            gc_orphans: self.gc_orphans,
        });
        *self.absent.lock().unwrap_or_else(PoisonError::into_inner) = planned.absent.clone();
        self.ctx
            .metrics
            .set_duplicate_volumes(planned.duplicate_disks);
        self.ctx.metrics.set_orphan_volumes(planned.orphans);

        // Bounded concurrency without closures over borrowed data (keeps the future Send).
        let mut outcomes: Vec<bool> = Vec::with_capacity(planned.repairs.len());
        let mut running = FuturesUnordered::new();
        for repair in &planned.repairs {
            if self.shutdown.is_cancelled() {
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
        Ok(PassSummary {
            pvs: pvs.values().map(Vec::len).sum(),
            migrations: migrations.len(),
            volumes: volumes.len(),
            repairs: outcomes.len(),
            failed: outcomes.iter().filter(|ok| !**ok).count(),
            duplicate_disks: planned.duplicate_disks,
            orphans: planned.orphans,
        })
    }

    /// Lists PVs page by page, keeping only valid in-tree paths.
    async fn list_pvs(&self) -> Result<HashMap<VolumePath, Vec<String>>, Error> {
        let mut by_path: HashMap<VolumePath, Vec<String>> = HashMap::new();
        let mut params = ListParams::default().limit(PAGE_SIZE);
        loop {
            let page = self.pvs.list(&params).await.map_err(Error::ListPvs)?;
            for pv in &page.items {
                if let (Some(PvVolume::Valid(path)), Some(name)) =
                    (pv_volume(pv), &pv.metadata.name)
                {
                    by_path.entry(path).or_default().push(name.clone());
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        for names in by_path.values_mut() {
            names.sort();
        }
        Ok(by_path)
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

    fn cached(&self, name: &str) -> Option<Arc<VolumeMigration>> {
        self.migrations.get(&ObjectRef::new(name))
    }

    /// Makes one repair; returns false when it failed (logged; retried next pass).
    async fn repair(&self, repair: &Repair, pvs: &HashMap<VolumePath, Vec<String>>) -> bool {
        let ctx = &self.ctx;
        let result: Result<(), String> = match repair {
            Repair::CreateMigration(path) => {
                ctx.metrics.full_sync_action(SyncAction::CreateMigration, 1);
                ensure_migration(&ctx.migrations, path)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
            Repair::Retry(path) => {
                ctx.metrics.full_sync_action(SyncAction::RetryFailed, 1);
                match self.cached(&path.object_name()) {
                    Some(vm) => {
                        let users = pvs.get(path).cloned().unwrap_or_default();
                        register_and_report(ctx, &vm, path, &users)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    None => Ok(()),
                }
            }
            Repair::ReRegister { path, missing_id } => {
                ctx.metrics.full_sync_action(SyncAction::Reregister, 1);
                self.reregister(path, missing_id).await
            }
            Repair::SetPvs { name, pvs } => {
                ctx.metrics.full_sync_action(SyncAction::RemovePv, 1);
                let patch = serde_json::json!({"status": {"persistentVolumes": pvs}});
                crate::reconcile::patch_status(ctx, name, patch)
                    .await
                    .map_err(|e| e.to_string())
            }
            Repair::Duplicates {
                name,
                path,
                keep,
                others,
            } => {
                ctx.metrics.full_sync_action(SyncAction::Duplicate, 1);
                self.report_duplicates(name, path, keep, others).await
            }
            Repair::DeleteMigration { name, path } => {
                ctx.metrics.full_sync_action(SyncAction::DeleteMigration, 1);
                info!(%path, %name, "no PV for two passes; deleting the VolumeMigration");
                delete_migration(&ctx.migrations, name)
                    .await
                    .map_err(|e| e.to_string())
            }
            Repair::Orphan { id, path, collect } => {
                ctx.metrics.full_sync_action(SyncAction::Orphan, 1);
                if *collect {
                    ctx.metrics.full_sync_action(SyncAction::GcOrphan, 1);
                    self.collect_orphan(id, path.as_ref()).await
                } else {
                    warn!(volume_id = %id, "orphaned volmig CNS volume (kept; see --gc-orphans)");
                    Ok(())
                }
            }
        };
        match result {
            Ok(()) => true,
            Err(e) => {
                warn!(?repair, error = %e, "full sync repair failed");
                false
            }
        }
    }

    async fn reregister(&self, path: &VolumePath, missing_id: &str) -> Result<(), String> {
        let missing = VolumeId::from(missing_id);
        let registration = self
            .ctx
            .registrar
            .reregister(path, &missing)
            .await
            .map_err(|e| e.to_string())?;
        if registration.volume_id != missing
            && let Some(vm) = self.cached(&path.object_name())
        {
            let note = format!(
                "CNS volume {missing} of {path} no longer exists; registered again as {}",
                registration.volume_id
            );
            warn!(%path, old = %missing, new = %registration.volume_id, "re-registered");
            self.ctx
                .events
                .migration(&vm, true, event_reason::RE_REGISTERED, note)
                .await;
        }
        Ok(())
    }

    async fn report_duplicates(
        &self,
        name: &str,
        path: &VolumePath,
        keep: &str,
        others: &[String],
    ) -> Result<(), String> {
        let patch = serde_json::json!({"status": {"duplicateVolumeIDs": others}});
        crate::reconcile::patch_status(&self.ctx, name, patch)
            .await
            .map_err(|e| e.to_string())?;
        warn!(%path, keep, ?others, "duplicate CNS volumes for one disk");
        if let Some(vm) = self.cached(name) {
            let note = format!(
                "{} CNS volumes exist for {path}: keeping {keep}, duplicates {}",
                others.len() + 1,
                others.join(", ")
            );
            self.ctx
                .events
                .migration(&vm, true, event_reason::DUPLICATE_VOLUMES, note)
                .await;
        }
        Ok(())
    }

    async fn collect_orphan(&self, id: &str, path: Option<&VolumePath>) -> Result<(), String> {
        let Some(path) = path else {
            return Err(format!("orphan {id} has no backing path; not collected"));
        };
        // Through the registrar: serialized with any registration of the same path.
        self.ctx
            .registrar
            .unregister(path)
            .await
            .map_err(|e| e.to_string())?;
        info!(volume_id = id, %path, "unregistered orphaned CNS volume (disk kept)");
        Ok(())
    }
}

/// What full sync needs of a cached VolumeMigration.
pub fn record(vm: &VolumeMigration) -> MigrationRecord {
    let status = vm.status.clone().unwrap_or_default();
    let mut duplicates = status.duplicate_volume_ids.unwrap_or_default();
    duplicates.sort();
    MigrationRecord {
        name: vm.metadata.name.clone().unwrap_or_default(),
        path: VolumePath::parse(&vm.spec.volume_path).ok(),
        phase: status.phase,
        volume_id: status.volume_id,
        pvs: status.persistent_volumes.unwrap_or_default(),
        duplicates,
        deleting: vm.metadata.deletion_timestamp.is_some(),
    }
}

//! `volmig run --dry-run`: every full-sync interval, read what the daemon reads (PVs,
//! VolumeMigrations, CNS volumes, the CSI driver's cache), run the same pure decisions
//! (the reconciler's [`decide`], full sync's [`plan`], publishing's [`publish_changes`]),
//! and log and count what they would do. No Lease is taken and nothing is written to
//! Kubernetes or vCenter: a dry run can watch beside a running deployment.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;
use tracing::{info, warn};

use crate::api::{Phase, VolumeMigration};
use crate::backend::selection::date_possible_duplicates;
use crate::backend::{VolumeBackend, VolumeId, list_all_volumes};
use crate::cli::RunArgs;
use crate::controller::PvIndex;
use crate::controller::decide::{Observed, Step, decide};
use crate::controller::full_sync::{self, MigrationRecord, PAGE_SIZE, plan, record};
use crate::controller::publish::{DriverCache, publish_changes};
use crate::k8s::client::for_each_page;
use crate::k8s::driver_cache::DriverChange;
use crate::metrics::Metrics;
use crate::volume_path::VolumePath;

/// What one dry-run pass would do: counts by (source, action).
type Counts = BTreeMap<(&'static str, &'static str), usize>;

/// Runs dry-run passes until SIGTERM or SIGINT.
pub async fn run(args: RunArgs, holder_id: String) -> anyhow::Result<()> {
    let super::Started {
        client,
        metrics,
        health,
        shutdown,
        http_task,
    } = super::start(&args, &holder_id, "no dry-run pass completed yet").await?;
    warn!(
        "dry run: no Lease, no writes to Kubernetes or vCenter; logging what would be done \
         every --full-sync-interval"
    );
    let backend = super::cns_backend(&args, &metrics, &holder_id)?;
    let driver = super::driver::start(&client, args.publish_driver_cache, shutdown.clone()).await?;
    let pass = DryRun {
        pvs: Api::all(client.clone()),
        migrations: Api::all(client),
        backend,
        driver,
        metrics: metrics.clone(),
        on_pv_delete: args.on_pv_delete.into(),
        gc_orphans: args.gc_orphans,
    };

    let mut absent = HashSet::new();
    let mut seen_actions: BTreeSet<(&'static str, &'static str)> = BTreeSet::new();
    let signal = super::wait_for_signal();
    tokio::pin!(signal);
    loop {
        let started = Instant::now();
        match pass.once(&absent).await {
            Ok((counts, now_absent)) => {
                absent = now_absent;
                seen_actions.extend(counts.keys().copied());
                for key in &seen_actions {
                    metrics.set_dry_run_actions(
                        key.0,
                        key.1,
                        counts.get(key).copied().unwrap_or(0),
                    );
                }
                metrics.full_sync_pass(started.elapsed(), true);
                let total: usize = counts.values().sum();
                info!(
                    actions = total,
                    duration_ms = started.elapsed().as_millis() as u64,
                    "dry run: pass done"
                );
                health.set_ready(true);
            }
            Err(e) => {
                metrics.full_sync_pass(started.elapsed(), false);
                warn!(error = %crate::error_chain(e.as_ref()), "dry run: pass failed; retrying at the next interval");
            }
        }
        tokio::select! {
            _ = &mut signal => break,
            _ = tokio::time::sleep(args.full_sync_interval) => {}
        }
    }
    info!("dry run stopped");
    shutdown.cancel();
    let _ = http_task.await;
    Ok(())
}

struct DryRun {
    pvs: Api<PersistentVolume>,
    migrations: Api<VolumeMigration>,
    backend: Arc<dyn VolumeBackend>,
    driver: Option<Arc<DriverCache>>,
    metrics: Metrics,
    on_pv_delete: crate::controller::PvDeletePolicy,
    gc_orphans: bool,
}

impl DryRun {
    /// One pass: read everything, decide, log. Returns the counts and the paths found
    /// without PVs (the two-pass deletion rule counts dry-run passes too).
    async fn once(
        &self,
        absent_before: &HashSet<VolumePath>,
    ) -> Result<(Counts, HashSet<VolumePath>), Box<dyn std::error::Error + Send + Sync>> {
        let index = PvIndex::default();
        for_each_page(&self.pvs, PAGE_SIZE, |items| {
            for pv in &items {
                index.upsert_pv(pv);
            }
        })
        .await
        .map_err(full_sync::Error::ListPvs)?;
        let mut migrations = Vec::new();
        for_each_page(&self.migrations, PAGE_SIZE, |items| {
            migrations.extend(items)
        })
        .await?;
        let mut volumes = list_all_volumes(self.backend.as_ref())
            .await
            .map_err(full_sync::Error::ListVolumes)?;
        date_possible_duplicates(self.backend.as_ref(), &mut volumes).await;
        if let Some(driver) = &self.driver {
            while !driver.index.is_synced() {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        self.metrics.set_pvs_tracked(index.len());

        let mut counts = Counts::new();
        for (pv, error) in index.take_unreported_invalid() {
            would(&mut counts, "pv_watcher", "invalid_path_event");
            info!(pv, %error, "dry run: would record an InvalidVolumePath Warning Event on the PV");
        }
        let by_path: HashMap<VolumePath, Vec<String>> = index.paths().into_iter().collect();
        self.reconcile_steps(&migrations, &by_path, &mut counts);

        let records: Vec<MigrationRecord> = migrations.iter().map(record).collect();
        let driver_ids: HashMap<VolumePath, Vec<String>> = match &self.driver {
            Some(driver) => by_path
                .keys()
                .filter_map(|p| {
                    let ids: Vec<String> =
                        driver.index.ids_for(p).into_iter().map(|id| id.0).collect();
                    (!ids.is_empty()).then(|| (p.clone(), ids))
                })
                .collect(),
            None => HashMap::new(),
        };
        let planned = plan(&full_sync::plan::PassInputs {
            pvs: &by_path,
            migrations: &records,
            volumes: &volumes,
            absent_before,
            gc_orphans: self.gc_orphans,
            driver_ids: &driver_ids,
        });
        for repair in &planned.repairs {
            would(&mut counts, "full_sync", repair.kind());
            info!(
                action = repair.kind(),
                ?repair,
                "dry run: full sync would repair"
            );
        }
        self.publish_steps(&records, &index, &mut counts);
        // Nothing is deleted in a dry run: a path due for deletion stays due.
        let mut absent = planned.absent;
        absent.extend(planned.repairs.iter().filter_map(|r| match r {
            full_sync::Repair::DeleteMigration { path, .. } => Some(path.clone()),
            _ => None,
        }));
        Ok((counts, absent))
    }

    /// What the reconciler would do for each VolumeMigration now.
    fn reconcile_steps(
        &self,
        migrations: &[VolumeMigration],
        by_path: &HashMap<VolumePath, Vec<String>>,
        counts: &mut Counts,
    ) {
        let now = jiff::Timestamp::now();
        for vm in migrations {
            let pvs = VolumePath::parse(&vm.spec.volume_path)
                .ok()
                .and_then(|p| by_path.get(&p).cloned())
                .unwrap_or_default();
            let decided = decide(&Observed {
                migration: vm,
                pvs: &pvs,
                now,
                on_pv_delete: self.on_pv_delete,
            });
            let name = vm.metadata.name.as_deref().unwrap_or_default();
            if decided.add_finalizer {
                would(counts, "reconcile", "add_finalizer");
                info!(name, "dry run: would add the finalizer");
            }
            if let Some(pvs) = &decided.set_pvs {
                would(counts, "reconcile", "set_pvs");
                info!(name, ?pvs, "dry run: would write the status PV list");
            }
            let action = match &decided.step {
                Step::Register(_) => "register",
                Step::RecordInvalidPath(_) => "record_invalid_path",
                Step::RecordNameCollision(_) => "record_name_collision",
                Step::Finalize {
                    unregister: Some(_),
                    ..
                } => "unregister_and_finalize",
                Step::Finalize { .. } => "finalize",
                Step::RetryAfter(_) | Step::Idle => continue,
            };
            would(counts, "reconcile", action);
            info!(name, path = %vm.spec.volume_path, action, step = ?decided.step, "dry run: reconcile would act");
        }
    }

    /// What publishing to the CSI driver's cache would write for Registered mappings.
    fn publish_steps(&self, records: &[MigrationRecord], index: &PvIndex, counts: &mut Counts) {
        let Some(driver) = self.driver.as_ref().filter(|d| d.publish) else {
            return;
        };
        for m in records {
            let (Some(path), Some(Phase::Registered), Some(id), false) =
                (&m.path, m.phase, &m.volume_id, m.deleting)
            else {
                continue;
            };
            let id = VolumeId(id.clone());
            for change in publish_changes(&driver.index, index, path, &id, m.protected) {
                let (action, object) = match &change {
                    DriverChange::Create(name, _) => ("create_object", name),
                    DriverChange::Update(name, _) => ("update_object", name),
                    DriverChange::Delete(name) => ("delete_object", name),
                };
                would(counts, "publish", action);
                info!(%path, object, action, "dry run: would change the CSI driver's cache");
            }
        }
    }
}

fn would(counts: &mut Counts, source: &'static str, action: &'static str) {
    *counts.entry((source, action)).or_default() += 1;
}

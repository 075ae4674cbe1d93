//! `volmig run --dry-run`: every full-sync interval, read what the daemon reads (PVs,
//! VolumeMigrations, CNS volumes, the CSI driver's cache), run the same pure decisions
//! (the reconciler's [`decide`], full sync's [`full_sync::plan()`], publishing's
//! [`publish_changes`]), and log and count what they would do. No Lease is taken and
//! nothing is written to Kubernetes or vCenter: a dry run can watch beside a running
//! deployment.
//!
//! `--once` ([`run_once`]) makes one pass and returns its [`Plan`] rendered for stdout.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::Api;
use tracing::{info, warn};

use crate::backend::selection::date_possible_duplicates;
use crate::backend::{VolumeBackend, VolumeId, list_all_volumes};
use crate::cli::RunArgs;
use crate::controller::decide::{Observed, Step, decide};
use crate::controller::full_sync::{self, MigrationRecord, PAGE_SIZE, Repair, record};
use crate::controller::publish::{DriverCache, publish_changes};
use crate::controller::{PvDeletePolicy, PvIndex};
use crate::k8s::client::for_each_page;
use crate::k8s::driver_cache::DriverChange;
use crate::k8s::inline_volumes::{inline_volumes, pod_created};
use crate::metrics::Metrics;
use crate::volume_migration::{Phase, VolumeMigration};
use crate::volume_path::VolumePath;

use super::dry_run_plan::{Action, Group, Inputs, Plan};

/// `volmig run --dry-run --once`: one pass, rendered as `args.output` asks. The HTTP
/// endpoints are not served; a path without PVs counts as gone at once (the daemon waits
/// for a second pass before it acts on it).
pub async fn run_once(args: RunArgs) -> anyhow::Result<crate::report::Rendered> {
    let holder_id = args
        .lease_holder_id
        .clone()
        .unwrap_or_else(crate::leader::default_holder_id);
    let client = super::kube_client_as(&args.kube, &super::user_agent(&holder_id)).await?;
    let metrics = Metrics::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let vcenter =
        super::vcenter::vcenter_settings(&super::vcenter_flags(&client, &args, None).await?)?;
    let cluster_id =
        super::cluster_id::resolve(&client, &args, vcenter.cluster_id.as_ref()).await?;
    let backend = super::vcenter::cns_backend(&args, &vcenter, &metrics, &holder_id)?;
    let driver =
        super::driver_cache::start(&client, args.publish_driver_cache, shutdown.clone()).await;
    let pass = driver.map(|driver| DryRun {
        pvs: Api::all(client.clone()),
        pods: args.inline_pod_volumes.then(|| Api::all(client.clone())),
        migrations: Api::all(client),
        backend,
        driver,
        metrics,
        on_pv_delete: args.on_pv_delete.into(),
        gc_orphans: args.gc_orphans,
        cluster_id,
    });
    let result = match pass {
        Ok(pass) => pass.once(None).await.map_err(|e| anyhow::anyhow!(e)),
        Err(e) => Err(e),
    };
    // Stops the driver cache's watch.
    shutdown.cancel();
    let (plan, _) = result?;
    Ok(super::dry_run_plan::render(&plan, args.output))
}

/// Runs dry-run passes until SIGTERM or SIGINT.
pub async fn run(args: RunArgs, holder_id: String) -> anyhow::Result<()> {
    let super::Started {
        client,
        metrics,
        health,
        shutdown,
        http_task,
    } = super::start(&args, &holder_id, "no dry-run pass completed yet").await?;
    let vcenter = super::vcenter::vcenter_settings(
        &super::vcenter_flags(&client, &args, Some(shutdown.clone())).await?,
    )?;
    let cluster_id =
        super::cluster_id::resolve(&client, &args, vcenter.cluster_id.as_ref()).await?;
    warn!(
        "dry run: no Lease, no writes to Kubernetes or vCenter; logging what would be done \
         every --full-sync-interval"
    );
    let backend = super::vcenter::cns_backend(&args, &vcenter, &metrics, &holder_id)?;
    let driver =
        super::driver_cache::start(&client, args.publish_driver_cache, shutdown.clone()).await?;
    let pass = DryRun {
        pvs: Api::all(client.clone()),
        pods: args.inline_pod_volumes.then(|| Api::all(client.clone())),
        migrations: Api::all(client),
        backend,
        driver,
        metrics: metrics.clone(),
        on_pv_delete: args.on_pv_delete.into(),
        gc_orphans: args.gc_orphans,
        cluster_id,
    };

    let mut absent = HashSet::new();
    let mut seen_actions: BTreeSet<(&'static str, &'static str)> = BTreeSet::new();
    let signal = super::wait_for_signal();
    tokio::pin!(signal);
    loop {
        let started = Instant::now();
        match pass.once(Some(&absent)).await {
            Ok((plan, now_absent)) => {
                absent = now_absent;
                let counts = plan.counts();
                seen_actions.extend(counts.keys().copied());
                for key in &seen_actions {
                    metrics.set_dry_run_actions(
                        key.0,
                        key.1,
                        counts.get(key).copied().unwrap_or(0),
                    );
                }
                metrics.full_sync_pass(started.elapsed(), true);
                info!(
                    actions = plan.actions.len(),
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
    /// Pods, when inline vSphere volumes are watched (docs/design.md §8.9).
    pods: Option<Api<Pod>>,
    migrations: Api<VolumeMigration>,
    backend: Arc<dyn VolumeBackend>,
    driver: Option<Arc<DriverCache>>,
    metrics: Metrics,
    on_pv_delete: PvDeletePolicy,
    gc_orphans: bool,
    /// This cluster's ID (`--cluster-id`, checked against the driver's): whose orphans the
    /// plan may report.
    cluster_id: String,
}

impl DryRun {
    /// One pass: read everything, decide, log. Returns the plan and the paths found
    /// without PVs (the two-pass deletion rule counts dry-run passes too). Without
    /// `absent_before` (`--once`), every path found without PVs counts as gone.
    async fn once(
        &self,
        absent_before: Option<&HashSet<VolumePath>>,
    ) -> Result<(Plan, HashSet<VolumePath>), Box<dyn std::error::Error + Send + Sync>> {
        let index = PvIndex::default();
        for_each_page(&self.pvs, PAGE_SIZE, |items| {
            for pv in &items {
                index.upsert_pv(pv);
                index.csi().upsert_pv(pv);
            }
        })
        .await
        .map_err(full_sync::Error::ListPvs)?;
        if let Some(pods) = &self.pods {
            for_each_page(pods, PAGE_SIZE, |items| {
                for pod in &items {
                    let created = pod_created(pod);
                    for volume in inline_volumes(pod) {
                        index.upsert_pod_volume(&volume.key, &volume.raw, created);
                    }
                }
            })
            .await
            .map_err(full_sync::Error::ListPods)?;
        }
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
            while driver.index.is_served() && !driver.index.is_synced() {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        self.metrics.set_pvs_tracked(index.len());

        let by_path: HashMap<VolumePath, Vec<String>> = index.paths().into_iter().collect();
        let mut plan = Plan {
            read: Inputs {
                persistent_volumes: index.len(),
                paths: by_path.len(),
                volume_migrations: migrations.len(),
                cns_volumes: volumes.len(),
                publish: self.publishing().is_some(),
            },
            actions: Vec::new(),
        };
        for (pv, error) in index.take_unreported_invalid() {
            info!(pv, %error, "dry run: would record an InvalidVolumePath Warning Event on the PV");
            plan.add(
                Action::new(Group::Repair, "pv_watcher", "invalid_path_event", pv, None)
                    .with_detail(error.to_string()),
            );
        }
        self.reconcile_steps(&migrations, &by_path, &mut plan);

        let records: Vec<MigrationRecord> = migrations.iter().map(record).collect();
        let every_path: HashSet<VolumePath>;
        let absent_before = match absent_before {
            Some(absent) => absent,
            None => {
                every_path = records.iter().filter_map(|r| r.path.clone()).collect();
                &every_path
            }
        };
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
        let planned = full_sync::plan(&full_sync::plan::PassInputs {
            pvs: &by_path,
            migrations: &records,
            volumes: &volumes,
            absent_before,
            gc_orphans: self.gc_orphans,
            cluster_id: &self.cluster_id,
            driver_ids: &driver_ids,
            in_use: &index.csi().ids_in_use(),
        });
        for repair in &planned.repairs {
            info!(
                action = repair.kind(),
                ?repair,
                "dry run: full sync would repair"
            );
            plan.add(repair_action(repair, &by_path, self.on_pv_delete));
        }
        self.publish_steps(&records, &index, &mut plan);
        // Nothing is deleted in a dry run: a path due for deletion stays due.
        let mut absent = planned.absent;
        absent.extend(planned.repairs.iter().filter_map(|r| match r {
            full_sync::Repair::DeleteMigration { path, .. } => Some(path.clone()),
            _ => None,
        }));
        Ok((plan, absent))
    }

    /// What the reconciler would do for each VolumeMigration now.
    fn reconcile_steps(
        &self,
        migrations: &[VolumeMigration],
        by_path: &HashMap<VolumePath, Vec<String>>,
        plan: &mut Plan,
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
            let path = Some(vm.spec.volume_path.clone());
            if decided.add_finalizer {
                info!(name, "dry run: would add the finalizer");
                plan.add(Action::new(
                    Group::Repair,
                    "reconcile",
                    "add_finalizer",
                    name,
                    path.clone(),
                ));
            }
            if let Some(pvs) = &decided.set_pvs {
                info!(name, ?pvs, "dry run: would write the status PV list");
                plan.add(
                    Action::new(Group::Repair, "reconcile", "set_pvs", name, path.clone())
                        .with_detail(pv_list(pvs)),
                );
            }
            let (group, step, detail) = match &decided.step {
                Step::Register(_) => (Group::Register, "register", String::new()),
                Step::RecordInvalidPath(error) => {
                    (Group::Repair, "record_invalid_path", error.clone())
                }
                Step::RecordNameCollision(other) => (
                    Group::Repair,
                    "record_name_collision",
                    format!("the name belongs to {other}"),
                ),
                Step::Finalize {
                    unregister: Some(_),
                    ..
                } => (
                    Group::Unregister,
                    "unregister_and_finalize",
                    "no PV uses the path".to_owned(),
                ),
                Step::Finalize { .. } => (Group::Repair, "finalize", String::new()),
                Step::Settle(_) => (
                    Group::Repair,
                    "settle",
                    "deleted while a create may be in flight".to_owned(),
                ),
                Step::RetryAfter(_) | Step::Idle => continue,
            };
            info!(name, path = %vm.spec.volume_path, action = step, step = ?decided.step, "dry run: reconcile would act");
            plan.add(Action::new(group, "reconcile", step, name, path).with_detail(detail));
        }
    }

    /// The driver's cache when the daemon would write to it: publishing is on and its CRD
    /// is served (as `controller::publish` decides).
    fn publishing(&self) -> Option<&DriverCache> {
        self.driver
            .as_deref()
            .filter(|d| d.publish && d.index.is_served())
    }

    /// What publishing to the CSI driver's cache would write for Registered mappings.
    fn publish_steps(&self, records: &[MigrationRecord], index: &PvIndex, plan: &mut Plan) {
        let Some(driver) = self.publishing() else {
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
                let (step, object) = match &change {
                    DriverChange::Create(name, _) => ("create_object", name),
                    DriverChange::Delete(name) => ("delete_object", name),
                };
                info!(%path, object, action = step, "dry run: would change the CSI driver's cache");
                plan.add(
                    Action::new(
                        Group::Publish,
                        "publish",
                        step,
                        object,
                        Some(path.canonical()),
                    )
                    .with_detail(format!("volume {id}")),
                );
            }
        }
    }
}

fn pv_list(pvs: &[String]) -> String {
    format!(
        "PVs: {}",
        if pvs.is_empty() {
            "-".to_owned()
        } else {
            pvs.join(",")
        }
    )
}

/// The plan entry of a full-sync repair.
fn repair_action(
    repair: &Repair,
    pvs: &HashMap<VolumePath, Vec<String>>,
    on_pv_delete: PvDeletePolicy,
) -> Action {
    let path = repair.path();
    let object = path.map(VolumePath::object_name).unwrap_or_default();
    let (group, object, detail) = match repair {
        Repair::CreateMigration(path) => (
            Group::Register,
            object,
            pv_list(pvs.get(path).map(Vec::as_slice).unwrap_or_default()),
        ),
        Repair::Retry(_) => (Group::Register, object, "not Registered".to_owned()),
        Repair::ReRegister { missing_id, .. } => (
            Group::Register,
            object,
            format!("volume {missing_id} is gone from CNS"),
        ),
        Repair::ReRegisterForeign { wrong, owner, .. } => (
            Group::Register,
            object,
            format!("volume {wrong} backs {owner}"),
        ),
        Repair::SetPvs { name, pvs, .. } => (Group::Repair, name.clone(), pv_list(pvs)),
        Repair::Duplicates {
            name, keep, others, ..
        } => (
            Group::Repair,
            name.clone(),
            format!("keep {keep}; duplicates {}", others.join(",")),
        ),
        Repair::AdoptDriverId {
            driver_id,
            replaced,
            ..
        } => (
            Group::Repair,
            object,
            format!("{replaced} -> {driver_id} (the CSI driver's)"),
        ),
        Repair::RepairVolumeId {
            name,
            wrong,
            why,
            right,
            ..
        } => (
            Group::Repair,
            name.clone(),
            format!("{wrong} -> {right} ({why})"),
        ),
        Repair::Protect { volume_id, .. } => (
            Group::Repair,
            object,
            format!("protect volume {volume_id} from VM deletion"),
        ),
        Repair::DeleteMigration { name, .. } => (
            match on_pv_delete {
                PvDeletePolicy::Unregister => Group::Unregister,
                PvDeletePolicy::Keep => Group::Repair,
            },
            name.clone(),
            "no PV uses the path: delete the VolumeMigration".to_owned(),
        ),
        Repair::ForeignDriverId {
            driver_id,
            other_disk,
            ..
        } => (
            Group::Note,
            object,
            format!(
                "the CSI driver's cache maps it to {driver_id}, the volume of {other_disk}: not adopted"
            ),
        ),
        Repair::Orphan { id, collect, .. } => (
            if *collect {
                Group::Unregister
            } else {
                Group::Note
            },
            id.clone(),
            if *collect {
                "orphaned volmig volume (--gc-orphans)".to_owned()
            } else {
                "orphaned volmig volume, kept (no --gc-orphans)".to_owned()
            },
        ),
    };
    Action::new(
        group,
        "full_sync",
        repair.kind(),
        object,
        path.map(VolumePath::canonical),
    )
    .with_detail(detail)
}

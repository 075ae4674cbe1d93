//! The repairs of a full-sync pass (docs/design.md §6.2), one at a time; a failed repair is
//! logged and counted, never a reason to abort the pass.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::{Instrument, info, info_span, warn};

use super::plan::WrongId;
use super::{FullSync, Repair};
use crate::backend::VolumeId;
use crate::k8s::events::{EventType, reason as event_reason};
use crate::k8s::migrations::{EnsureError, delete_migration, ensure_migration};
use crate::k8s::status::{StatusChange, WriteError};
use crate::metrics::SyncAction;
use crate::registrar::RegisterError;
use crate::volume_migration::VolumeMigration;
use crate::volume_path::VolumePath;

/// Why one repair failed (it is tried again by the next pass).
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// Creating a VolumeMigration failed (or its name is taken by another path).
    #[error("creating the VolumeMigration")]
    Create(#[source] EnsureError),
    /// The registrar failed.
    #[error("registering")]
    Register(#[source] RegisterError),
    /// A status write failed.
    #[error("writing the status")]
    WriteStatus(#[source] WriteError),
    /// Deleting a VolumeMigration failed.
    #[error("deleting VolumeMigration {name}")]
    Delete {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// Writing the CSI driver's cache objects failed.
    #[error("updating the CSI driver's cache objects")]
    Publish(#[source] kube::Error),
    /// Looking the path's volume up in CNS failed.
    #[error("looking up the CNS volumes of {path}")]
    Lookup {
        /// The path.
        path: VolumePath,
        /// The backend error.
        source: crate::backend::BackendError,
    },
    /// An orphan without a backing path cannot be serialized with its path's work.
    #[error("orphan {0} has no backing path; not collected")]
    OrphanWithoutPath(String),
}

impl FullSync {
    pub(super) fn cached(&self, name: &str) -> Option<Arc<VolumeMigration>> {
        self.migrations.get(name).map(Arc::new)
    }

    /// Makes one repair; returns false when it failed (logged; retried next pass), `None`
    /// when this replica no longer leads (or shuts down) by the time the repair's turn comes.
    pub(super) async fn repair(
        &self,
        repair: &Repair,
        pvs: &HashMap<VolumePath, Vec<String>>,
    ) -> Option<bool> {
        if !self.may_write() {
            return None;
        }
        // One vmdk's story in the logs: the same `vmdk` span as its reconciles.
        let path = repair.path().map(ToString::to_string);
        let vmdk = info_span!(
            "vmdk",
            path = path.as_deref(),
            object = tracing::field::Empty
        );
        let span = info_span!(parent: &vmdk, "repair", kind = repair.kind());
        match self.repair_one(repair, pvs).instrument(span).await {
            Ok(()) => Some(true),
            Err(e) => {
                warn!(?repair, error = %crate::error_chain(&e), "full sync repair failed");
                Some(false)
            }
        }
    }

    async fn repair_one(
        &self,
        repair: &Repair,
        pvs: &HashMap<VolumePath, Vec<String>>,
    ) -> Result<(), RepairError> {
        let ctx = &self.ctx;
        match repair {
            Repair::CreateMigration(path) => {
                ctx.metrics.full_sync_action(SyncAction::CreateMigration, 1);
                match ensure_migration(&ctx.cluster.migrations, path).await {
                    Ok(_) => Ok(()),
                    Err(e @ EnsureError::NameCollision { .. }) => {
                        for pv in pvs.get(path).into_iter().flatten() {
                            super::super::user_watch::report_name_collision(ctx, pv, &e).await;
                        }
                        Err(RepairError::Create(e))
                    }
                    Err(e) => Err(RepairError::Create(e)),
                }
            }
            Repair::Retry(path) => {
                ctx.metrics.full_sync_action(SyncAction::RetryFailed, 1);
                let Some(vm) = self.cached(&path.object_name()) else {
                    return Ok(());
                };
                let users = pvs.get(path).cloned().unwrap_or_default();
                super::super::outcome::register_and_report(ctx, &vm, path, &users)
                    .await
                    .map_err(RepairError::Register)
            }
            Repair::ReRegister { path, missing_id } => {
                ctx.metrics.full_sync_action(SyncAction::Reregister, 1);
                self.reregister(path, missing_id).await
            }
            Repair::RepairVolumeId {
                name,
                path,
                wrong,
                why,
                right,
                version,
            } => {
                ctx.metrics.full_sync_action(SyncAction::Reregister, 1);
                self.repair_volume_id(name, path, wrong, why, right, version.as_deref())
                    .await
            }
            Repair::ReRegisterForeign { path, wrong, owner } => {
                ctx.metrics.full_sync_action(SyncAction::Reregister, 1);
                self.reregister_foreign(path, wrong, owner).await
            }
            Repair::SetPvs { name, pvs, version } => {
                ctx.metrics.full_sync_action(SyncAction::RemovePv, 1);
                let change = StatusChange::PersistentVolumes {
                    pvs: pvs.clone(),
                    observed_generation: self.cached(name).and_then(|vm| vm.metadata.generation),
                    pending: false,
                };
                ctx.cluster
                    .status
                    .write(name, &change, version.as_deref())
                    .await
                    .map(drop)
                    .map_err(RepairError::WriteStatus)
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
            Repair::AdoptDriverId {
                path,
                driver_id,
                replaced,
            } => {
                ctx.metrics.full_sync_action(SyncAction::Duplicate, 1);
                self.adopt_driver_id(path, driver_id, replaced).await
            }
            Repair::Protect { path, volume_id } => ctx
                .registrar
                .protect(path, &VolumeId::from(volume_id.as_str()))
                .await
                .map(drop)
                .map_err(RepairError::Register),
            Repair::DeleteMigration { name, path } => {
                ctx.metrics.full_sync_action(SyncAction::DeleteMigration, 1);
                info!(%path, %name, "no PV for two passes; deleting the VolumeMigration");
                delete_migration(&ctx.cluster.migrations, name)
                    .await
                    .map_err(|source| RepairError::Delete {
                        name: name.clone(),
                        source,
                    })
            }
            Repair::ForeignDriverId {
                path,
                driver_id,
                other_disk,
            } => {
                self.report_foreign_driver_id(path, driver_id, other_disk)
                    .await;
                Ok(())
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
        }
    }

    async fn reregister(&self, path: &VolumePath, missing_id: &str) -> Result<(), RepairError> {
        let missing = VolumeId::from(missing_id);
        let registration = match self.ctx.registrar.reregister(path, &missing).await {
            Ok(registration) => registration,
            // Following the CSI driver: it registers the path again, once its cache misses.
            Err(RegisterError::NotRegistrar { .. }) => {
                return self.withdraw_dead_id(path, &missing).await;
            }
            Err(e) => return Err(RepairError::Register(e)),
        };
        if registration.volume_id != missing
            && let Some(vm) = self.cached(&path.object_name())
        {
            let note = format!(
                "CNS volume {missing} of {path} no longer exists; registered again as {}",
                registration.volume_id
            );
            warn!(%path, old = %missing, new = %registration.volume_id, "re-registered");
            self.ctx
                .cluster
                .events
                .on_migration(&vm, EventType::Warning, event_reason::RE_REGISTERED, note)
                .await;
        }
        Ok(())
    }

    /// Restores the path's CNS volume `right` over the status ID `wrong` (docs/design.md §6.2): no
    /// create, no unregistration. Both facts are checked against CNS again first (the
    /// listing may be older than the status), and the write is conditional on the version
    /// the repair was decided on, so a registration recorded meanwhile is never replaced.
    async fn repair_volume_id(
        &self,
        name: &str,
        path: &VolumePath,
        wrong: &str,
        why: &WrongId,
        right: &str,
        version: Option<&str>,
    ) -> Result<(), RepairError> {
        let backend = self.ctx.registrar.backend();
        let lookup = |source| RepairError::Lookup {
            path: path.clone(),
            source,
        };
        let own = backend
            .find_volumes(&path.cns_volume_name(), path)
            .await
            .map_err(lookup)?;
        if own.iter().any(|v| v.id.0 == wrong) {
            info!(%path, volume_id = wrong, "the status ID is this path's volume after all; kept");
            return Ok(());
        }
        let right_live = own.iter().any(|v| v.id.0 == right)
            || !backend
                .volumes_by_id(&[VolumeId::from(right)])
                .await
                .map_err(lookup)?
                .is_empty();
        if !right_live {
            info!(%path, volume_id = right, "the path's volume is gone meanwhile; next pass decides again");
            return Ok(());
        }
        let change = StatusChange::VolumeIdRepaired {
            volume_id: right.to_owned(),
            replaced: wrong.to_owned(),
        };
        self.ctx
            .cluster
            .status
            .write(name, &change, version)
            .await
            .map_err(RepairError::WriteStatus)?;
        warn!(%path, old = wrong, new = right, %why, "status.volumeID repaired from CNS");
        let note = format!(
            "status.volumeID of {path} held {wrong}, but {why}; restored {right}, the CNS \
             volume of this path (nothing created or unregistered)"
        );
        self.volume_id_repaired(name, note).await;
        Ok(())
    }

    /// The status holds another disk's volume and CNS has none of this path: register the
    /// path (the registrar adopts before it creates); the other disk's volume is untouched.
    async fn reregister_foreign(
        &self,
        path: &VolumePath,
        wrong: &str,
        owner: &VolumePath,
    ) -> Result<(), RepairError> {
        let registration = self
            .ctx
            .registrar
            .reregister(path, &VolumeId::from(wrong))
            .await
            .map_err(RepairError::Register)?;
        if registration.volume_id.0 != wrong {
            let how = if registration.adopted {
                "adopted"
            } else {
                "registered"
            };
            let note = format!(
                "status.volumeID of {path} held {wrong}, the CNS volume of {owner} (left \
                 alone); {how} {} for this path",
                registration.volume_id
            );
            warn!(%path, old = wrong, new = %registration.volume_id, %owner, "status.volumeID repaired");
            self.volume_id_repaired(&path.object_name(), note).await;
        }
        Ok(())
    }

    /// The `VolumeIdRepaired` Warning Event on the object `name` (never folded into an
    /// earlier one: each note names other IDs).
    async fn volume_id_repaired(&self, name: &str, note: String) {
        if let Some(vm) = self.cached(name) {
            self.ctx
                .cluster
                .events
                .on_migration_distinct(
                    &vm,
                    EventType::Warning,
                    event_reason::VOLUME_ID_REPAIRED,
                    note,
                )
                .await;
        }
    }

    async fn adopt_driver_id(
        &self,
        path: &VolumePath,
        driver_id: &str,
        replaced: &str,
    ) -> Result<(), RepairError> {
        let switched = self
            .ctx
            .registrar
            .adopt_driver_id(path, &VolumeId::from(driver_id), &VolumeId::from(replaced))
            .await
            .map_err(RepairError::Register)?;
        if switched {
            // The driver's ID is the path's now: published under every spelling. The plan
            // deletes volmig's objects of the replaced ID first and then creates again the
            // driver's own object of the path, so the driver's last event for the path is
            // an Add of its ID (removing the replaced ID's objects alone would leave the
            // driver no entry for the path).
            let driver_id = VolumeId::from(driver_id);
            let protected = self.protected(path, &driver_id).await;
            crate::controller::publish::publish(&self.ctx, path, &driver_id, protected)
                .await
                .map_err(RepairError::Publish)?;
        }
        if switched && let Some(vm) = self.cached(&path.object_name()) {
            let note = format!(
                "the CSI driver's cache maps {path} to CNS volume {driver_id}; the status held \
                 {replaced}, now listed as a duplicate (not unregistered)"
            );
            warn!(%path, driver_id, replaced, "the CSI driver's ID wins");
            self.ctx
                .cluster
                .events
                .on_migration(
                    &vm,
                    EventType::Warning,
                    event_reason::DUPLICATE_VOLUMES,
                    note,
                )
                .await;
        }
        Ok(())
    }

    /// Whether the status of `path` says its volume `id` is protected from VM deletion,
    /// read again (the pass's snapshot predates the repair); false when it cannot be read:
    /// a protected object is never written unprotected all the same.
    async fn protected(&self, path: &VolumePath, id: &VolumeId) -> bool {
        match self
            .ctx
            .cluster
            .migrations
            .get_opt(&path.object_name())
            .await
        {
            Ok(vm) => vm.and_then(|vm| vm.status).is_some_and(|s| {
                s.volume_id.as_deref() == Some(id.0.as_str())
                    && s.protected_from_vm_delete == Some(true)
            }),
            Err(e) => {
                warn!(%path, error = %e, "could not read the VolumeMigration again");
                false
            }
        }
    }

    async fn report_duplicates(
        &self,
        name: &str,
        path: &VolumePath,
        keep: &str,
        others: &[String],
    ) -> Result<(), RepairError> {
        let change = StatusChange::Duplicates {
            ids: others.to_vec(),
        };
        self.ctx
            .cluster
            .status
            .write(name, &change, None)
            .await
            .map_err(RepairError::WriteStatus)?;
        warn!(%path, keep, ?others, "duplicate CNS volumes for one disk");
        if let Some(vm) = self.cached(name) {
            let note = format!(
                "{} CNS volumes exist for {path}: keeping {keep}, duplicates {}",
                others.len() + 1,
                others.join(", ")
            );
            self.ctx
                .cluster
                .events
                .on_migration(
                    &vm,
                    EventType::Warning,
                    event_reason::DUPLICATE_VOLUMES,
                    note,
                )
                .await;
        }
        Ok(())
    }

    async fn collect_orphan(&self, id: &str, path: Option<&VolumePath>) -> Result<(), RepairError> {
        let Some(path) = path else {
            return Err(RepairError::OrphanWithoutPath(id.to_owned()));
        };
        if !self.ctx.index.pvs_for(path).is_empty() {
            info!(volume_id = id, %path, "orphan is used by a PV again; kept");
            return Ok(());
        }
        // Through the registrar: serialized with any registration of the same path, and
        // re-checked there against the current status (the plan may be stale).
        let collected = self
            .ctx
            .registrar
            .collect_orphan(path, &VolumeId::from(id))
            .await
            .map_err(RepairError::Register)?;
        if collected {
            info!(volume_id = id, %path, "unregistered orphaned CNS volume (disk kept)");
        }
        Ok(())
    }
}

//! The VolumeMigration reconciler: read → decide ([`super::decide`], pure) → act (registrar
//! and client calls) → record status (through the one [`crate::k8s::status::StatusWriter`]).
//!
//! Deletion uses custom code rather than kube-runtime's `finalizer` helper: a VolumeMigration
//! deleted by hand while PVs still use its path must be recreated once it is gone (docs/design.md
//! §5.2), and a deletion must wait while a create may be in flight; the helper has neither.

use crate::k8s::error_class::{KubeErrorClass, classify};
use std::sync::Arc;

use crate::controller::Action;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::{debug, info, warn};

use super::outcome::register_and_report;
use super::{
    Context, Error, FinalizeError, FinalizerError, Observed, PublishError, RecordError, Result,
    Step, decide,
};
use crate::k8s::events::{EventType, reason as event_reason};
use crate::k8s::migrations::ensure_migration;
use crate::k8s::status::StatusChange;
use crate::registrar::RegisterError;
use crate::volume_migration::{FIELD_MANAGER, FINALIZER, VolumeMigration};
use crate::volume_path::VolumePath;

use crate::requeue::{DELETION_WAIT, INDEX_WAIT, Requeue};

/// Reconciles one VolumeMigration.
pub async fn reconcile(vm: Arc<VolumeMigration>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.leader.is_open() {
        // Followers stay idle; a new leader re-runs every object.
        return Ok(Action::await_change());
    }
    if !ctx.index.is_synced() {
        // Until every PV is indexed a PV list would be incomplete: deciding now would
        // write a wrong list and then the right one.
        return Ok(Action::requeue(INDEX_WAIT));
    }
    let name = vm.metadata.name.clone().unwrap_or_default();
    let pvs = VolumePath::parse(&vm.spec.volume_path)
        .map(|p| ctx.index.pvs_for(&p))
        .unwrap_or_default();
    let plan = decide(&Observed {
        migration: &vm,
        pvs: &pvs,
        now: jiff::Timestamp::now(),
        on_pv_delete: ctx.policy.on_pv_delete,
    });
    debug!(%name, ?plan, "reconcile");

    if plan.add_finalizer {
        set_finalizer(&ctx, &vm, true).await?;
    }
    // A registration's first status write carries the PV list: one write less per new PV.
    let registration_records_pvs =
        matches!(plan.step, Step::Register(_)) && ctx.registrar.records_pvs();
    if let Some(pvs) = plan.set_pvs.as_ref().filter(|_| !registration_records_pvs) {
        write_pv_list(&ctx, &vm, pvs).await?;
    }
    if let Some(publish) = &plan.publish {
        super::publish::publish(&ctx, &publish.path, &publish.volume_id, publish.protected)
            .await
            .map_err(|source| PublishError::Publish {
                name: name.clone(),
                source,
            })?;
    }
    match plan.step {
        Step::Idle => Ok(Action::await_change()),
        Step::RetryAfter(wait) => Ok(Action::requeue(wait)),
        Step::RecordInvalidPath(message) => {
            record_invalid_path(&ctx, &vm, &message).await?;
            Ok(Action::await_change())
        }
        Step::RecordNameCollision(path) => {
            record_name_collision(&ctx, &vm, &path).await?;
            Ok(Action::await_change())
        }
        Step::Register(path) => Ok(register(&ctx, &vm, &path, &pvs).await),
        Step::Settle(path) => Ok(settle(&ctx, &path).await),
        Step::Finalize {
            unregister,
            recreate,
        } => {
            finalize(&ctx, &vm, unregister, recreate).await?;
            Ok(Action::await_change())
        }
    }
}

async fn register(
    ctx: &Context,
    vm: &VolumeMigration,
    path: &VolumePath,
    pvs: &[String],
) -> Action {
    match register_and_report(ctx, vm, path, pvs).await {
        Ok(()) => Action::await_change(),
        Err(RegisterError::NotLeader { .. }) => Action::await_change(),
        Err(error) if error.is_retryable() => {
            // The status holds nextRetryTime (or the create in flight); this requeue is
            // what acts on it.
            let attempts = vm.status.as_ref().and_then(|s| s.attempts).unwrap_or(0) + 1;
            let wait = error
                .retry_after()
                .unwrap_or_else(|| ctx.registrar.retry_policy().delay(attempts));
            Action::requeue(wait)
        }
        Err(_) => Action::await_change(),
    }
}

/// Resolves the create in flight of an object being deleted (docs/design.md §5.4); the
/// status it writes brings the object back here, to be finalized.
async fn settle(ctx: &Context, path: &VolumePath) -> Action {
    match ctx.registrar.settle(path).await {
        Ok(()) => Action::requeue(DELETION_WAIT),
        Err(RegisterError::NotLeader { .. }) => Action::await_change(),
        Err(error) => {
            warn!(%path, error = %crate::error_chain(&error), "could not resolve the create in flight of a deleted object");
            Action::requeue(error.retry_after().unwrap_or(DELETION_WAIT))
        }
    }
}

async fn finalize(
    ctx: &Context,
    vm: &VolumeMigration,
    unregister: Option<VolumePath>,
    recreate: Option<VolumePath>,
) -> Result<()> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    // A volume the CSI driver's PVs or attachments use after cut-over stays registered
    // and published (docs/design.md §5.1): no unregistration, no Event saying so.
    let unregister = unregister.filter(|path| {
        let Some(id) = vm.status.as_ref().and_then(|s| s.volume_id.as_deref()) else {
            return true;
        };
        let users = ctx.index.csi().users_of(id);
        if !users.is_empty() {
            info!(%path, volume_id = id, ?users,
                "the CSI driver's objects use the volume; keeping it registered");
        }
        users.is_empty()
    });
    let unregistered = unregister.is_some();
    if let Some(path) = unregister {
        ctx.registrar
            .unregister(&path)
            .await
            .map_err(|source| FinalizeError::Unregister {
                name: name.clone(),
                source,
            })?;
        if let Some(id) = vm.status.as_ref().and_then(|s| s.volume_id.as_deref()) {
            super::publish::unpublish(ctx, &path, &crate::backend::VolumeId::from(id))
                .await
                .map_err(|source| PublishError::Unpublish {
                    name: name.clone(),
                    source,
                })?;
        }
        ctx.cluster
            .events
            .on_migration(
                vm,
                EventType::Normal,
                event_reason::UNREGISTERED,
                format!("CNS registration of {path} removed; the vmdk is kept"),
            )
            .await;
    }
    if unregistered {
        // Unregistering wrote the status: the finalizer patch needs the new version.
        match ctx.cluster.migrations.get_opt(&name).await {
            Ok(Some(fresh)) => set_finalizer(ctx, &fresh, false).await?,
            Ok(None) => {}
            Err(source) => return Err(FinalizeError::RemoveFinalizer { name, source }.into()),
        }
    } else {
        set_finalizer(ctx, vm, false).await?;
    }
    if let Some(path) = recreate {
        // Deleted by hand while PVs still use it: bring it back; the registrar adopts the
        // same CNS volume.
        info!(%path, %name, "VolumeMigration deleted while in use; recreating it");
        ensure_migration(&ctx.cluster.migrations, &path)
            .await
            .map_err(FinalizeError::Recreate)?;
    }
    Ok(())
}

async fn set_finalizer(ctx: &Context, vm: &VolumeMigration, present: bool) -> Result<()> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let mut finalizers: Vec<String> = vm.metadata.finalizers.clone().unwrap_or_default();
    finalizers.retain(|f| f != FINALIZER);
    if present {
        finalizers.push(FINALIZER.to_owned());
    }
    // The resourceVersion makes this a compare-and-swap: other finalizers are never lost.
    let patch = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": vm.metadata.resource_version,
        }
    });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match ctx
        .cluster
        .migrations
        .patch(&name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if classify(&e) == KubeErrorClass::Gone && !present => Ok(()),
        Err(source) if present => Err(FinalizerError::Add { name, source }.into()),
        Err(source) => Err(FinalizeError::RemoveFinalizer { name, source }.into()),
    }
}

/// Writes the PV list, conditional on the version read: a list decided from a stale cache
/// is never written (and `Pending` never erases a newer phase such as `Registering`).
async fn write_pv_list(ctx: &Context, vm: &VolumeMigration, pvs: &[String]) -> Result<()> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let change = StatusChange::PersistentVolumes {
        pvs: pvs.to_vec(),
        observed_generation: vm.metadata.generation,
        pending: vm.status.as_ref().and_then(|s| s.phase).is_none(),
    };
    ctx.cluster
        .status
        .write(&name, &change, vm.metadata.resource_version.as_deref())
        .await
        .map_err(RecordError::PvList)?;
    Ok(())
}

async fn record_invalid_path(ctx: &Context, vm: &VolumeMigration, message: &str) -> Result<()> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let change = StatusChange::InvalidPath {
        message: message.to_owned(),
    };
    ctx.cluster
        .status
        .write(&name, &change, vm.metadata.resource_version.as_deref())
        .await
        .map_err(RecordError::InvalidPath)?;
    ctx.cluster
        .events
        .on_migration(
            vm,
            EventType::Warning,
            event_reason::REGISTRATION_FAILED,
            format!("InvalidPath: {message}"),
        )
        .await;
    Ok(())
}

async fn record_name_collision(
    ctx: &Context,
    vm: &VolumeMigration,
    path: &VolumePath,
) -> Result<()> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let message = format!(
        "this object tracks {path}, whose VolumeMigration is {}; volmig neither registers nor \
         publishes anything through {name}",
        path.object_name()
    );
    warn!(%name, %path, "name collision");
    ctx.metrics.name_collision();
    let change = StatusChange::NameCollision {
        message: message.clone(),
    };
    ctx.cluster
        .status
        .write(&name, &change, vm.metadata.resource_version.as_deref())
        .await
        .map_err(RecordError::NameCollision)?;
    ctx.cluster
        .events
        .on_migration(
            vm,
            EventType::Warning,
            event_reason::NAME_COLLISION,
            message,
        )
        .await;
    Ok(())
}

/// Requeue policy after a failed reconciliation: permanent errors wait for a change,
/// transient ones back off. Every failure is counted by action.
pub fn error_policy(vm: Arc<VolumeMigration>, error: &Error, ctx: Arc<Context>) -> Action {
    let name = vm.metadata.name.as_deref().unwrap_or_default();
    ctx.metrics.reconcile_failure(error.metric_label());
    match error.requeue() {
        Requeue::AwaitChange => {
            warn!(%name, error = %crate::error_chain(error), "reconcile failed; waiting for a change");
            Action::await_change()
        }
        // The delay is the context's (tests shorten it); production sets ERROR_REQUEUE.
        Requeue::After(_) => {
            warn!(%name, error = %crate::error_chain(error), "reconcile failed; retrying");
            Action::requeue(ctx.policy.error_requeue)
        }
    }
}

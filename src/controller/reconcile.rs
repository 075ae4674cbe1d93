//! The VolumeMigration reconciler: read → decide ([`decide`], pure) → act (registrar and
//! client calls) → record status (through the registrar's store or a status patch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use tracing::{debug, warn};

use crate::api::{FIELD_MANAGER, FINALIZER, VolumeMigration};
use crate::cli::OnPvDelete;
use crate::events::{Events, reason as event_reason};
use crate::metrics::{Metrics, RegistrationResult};
use crate::migrations::ensure_migration;
use crate::pv_index::PvIndex;
use crate::registrar::{LeaderGate, RegisterError, Registrar, reason};
use crate::volume_path::VolumePath;

pub mod decide;

pub use decide::{Observed, Plan, Step, decide};

/// Why a reconciliation failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes call failed.
    #[error("VolumeMigration {name}: {action}: {source}")]
    Kube {
        /// The object.
        name: String,
        /// What was being done.
        action: &'static str,
        /// The client error.
        source: kube::Error,
    },
    /// Unregistration failed.
    #[error("VolumeMigration {name}: {source}")]
    Unregister {
        /// The object.
        name: String,
        /// The registrar error.
        source: RegisterError,
    },
}

/// Result alias of the reconciler.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What every reconciliation shares.
pub struct Context {
    /// VolumeMigrations, cluster-wide.
    pub migrations: Api<VolumeMigration>,
    /// The only component that registers.
    pub registrar: Arc<Registrar>,
    /// In-tree PVs by path.
    pub index: Arc<PvIndex>,
    /// Whether this replica leads.
    pub leader: LeaderGate,
    /// Metrics.
    pub metrics: Metrics,
    /// Event publisher.
    pub events: Events,
    /// `--on-pv-delete`.
    pub on_pv_delete: OnPvDelete,
    /// Requeue delay after a failed reconciliation.
    pub error_requeue: Duration,
}

/// Reconciles one VolumeMigration.
pub async fn reconcile(vm: Arc<VolumeMigration>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.leader.is_open() {
        // Followers stay idle; a new leader re-runs every object.
        return Ok(Action::await_change());
    }
    if !ctx.index.is_synced() {
        // Until every PV is indexed a PV list would be incomplete: deciding now would
        // write a wrong list and then the right one.
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let name = vm.metadata.name.clone().unwrap_or_default();
    let pvs = VolumePath::parse(&vm.spec.volume_path)
        .map(|p| ctx.index.pvs_for(&p))
        .unwrap_or_default();
    let plan = decide(&Observed {
        migration: &vm,
        pvs: &pvs,
        now: jiff::Timestamp::now(),
        on_pv_delete: ctx.on_pv_delete,
    });
    debug!(%name, ?plan, "reconcile");

    if plan.add_finalizer {
        set_finalizers(&ctx, &vm, true).await?;
    }
    if let Some(pvs) = &plan.set_pvs {
        write_pvs(&ctx, &vm, pvs).await?;
    }
    match plan.step {
        Step::Idle => Ok(Action::await_change()),
        Step::RetryAfter(wait) => Ok(Action::requeue(wait)),
        Step::RecordInvalidPath(message) => {
            record_invalid_path(&ctx, &vm, &message).await?;
            Ok(Action::await_change())
        }
        Step::Register(path) => Ok(register(&ctx, &vm, &path, &pvs).await),
        Step::Finalize {
            unregister,
            recreate,
        } => {
            if let Some(path) = unregister {
                ctx.registrar
                    .unregister(&path)
                    .await
                    .map_err(|source| Error::Unregister {
                        name: name.clone(),
                        source,
                    })?;
                ctx.events
                    .migration(
                        &vm,
                        false,
                        event_reason::UNREGISTERED,
                        format!("CNS registration of {path} removed; the vmdk is kept"),
                    )
                    .await;
            }
            set_finalizers(&ctx, &vm, false).await?;
            if let Some(path) = recreate {
                // Deleted by hand while PVs still use it: bring it back; the registrar
                // adopts the same CNS volume.
                ensure_migration(&ctx.migrations, &path)
                    .await
                    .map_err(|source| Error::Kube {
                        name,
                        action: "recreate",
                        source,
                    })?;
            }
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
            // The status holds nextRetryTime; this requeue is what acts on it.
            let attempts = vm.status.as_ref().and_then(|s| s.attempts).unwrap_or(0) + 1;
            Action::requeue(ctx.registrar.retry_policy().delay(attempts))
        }
        Err(_) => Action::await_change(),
    }
}

/// Registers `path` for `vm` through the registrar, then records metrics and Events on the
/// VolumeMigration and its PVs. Shared by the reconciler and full sync.
pub async fn register_and_report(
    ctx: &Context,
    vm: &VolumeMigration,
    path: &VolumePath,
    pvs: &[String],
) -> std::result::Result<(), RegisterError> {
    let started = Instant::now();
    let (result, warning, event, note) = match ctx.registrar.register(path).await {
        // Someone else (an earlier reconcile, full sync) already registered and reported it.
        Ok(registration) if registration.unchanged => return Ok(()),
        Ok(registration) => {
            let result = if registration.adopted {
                RegistrationResult::Adopted
            } else {
                RegistrationResult::Created
            };
            let note = format!("{path} is CNS volume {}", registration.volume_id);
            (Ok(()), false, event_reason::REGISTERED, (result, note))
        }
        Err(error @ RegisterError::NotLeader { .. }) => return Err(error),
        Err(error) => {
            let result = match error.reason() {
                reason::DISK_NOT_FOUND => RegistrationResult::DiskNotFound,
                reason::INVALID_PATH => RegistrationResult::InvalidPath,
                _ => RegistrationResult::Failed,
            };
            warn!(%path, reason = error.reason(), error = %error, "registration failed");
            let note = format!("{}: {error}", error.reason());
            (
                Err(error),
                true,
                event_reason::REGISTRATION_FAILED,
                (result, note),
            )
        }
    };
    let (metric, note) = note;
    ctx.metrics.registration(metric, started.elapsed());
    ctx.events.migration(vm, warning, event, note.clone()).await;
    for pv in pvs {
        ctx.events.pv(pv, warning, event, note.clone()).await;
    }
    result
}

async fn set_finalizers(ctx: &Context, vm: &VolumeMigration, present: bool) -> Result<()> {
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
    match ctx
        .migrations
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 && !present => Ok(()),
        Err(source) => Err(Error::Kube {
            name,
            action: if present {
                "add finalizer"
            } else {
                "remove finalizer"
            },
            source,
        }),
    }
}

async fn write_pvs(ctx: &Context, vm: &VolumeMigration, pvs: &[String]) -> Result<()> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let mut status = json!({
        "persistentVolumes": pvs,
        "observedGeneration": vm.metadata.generation,
    });
    if vm.status.as_ref().and_then(|s| s.phase).is_none() {
        status["phase"] = json!("Pending");
    }
    patch_status(ctx, &name, json!({ "status": status })).await
}

async fn record_invalid_path(ctx: &Context, vm: &VolumeMigration, message: &str) -> Result<()> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let patch = json!({"status": {
        "phase": "Failed",
        "lastError": {"reason": reason::INVALID_PATH, "message": message, "time": now.to_string()},
        "nextRetryTime": null,
    }});
    patch_status(ctx, &name, patch).await?;
    ctx.events
        .migration(
            vm,
            true,
            event_reason::REGISTRATION_FAILED,
            format!("InvalidPath: {message}"),
        )
        .await;
    Ok(())
}

/// Merge-patches the status of VolumeMigration `name` under volmig's field manager.
pub async fn patch_status(ctx: &Context, name: &str, patch: serde_json::Value) -> Result<()> {
    ctx.migrations
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(|source| Error::Kube {
            name: name.to_owned(),
            action: "patch status",
            source,
        })
}

/// Requeue policy after a failed reconciliation.
pub fn error_policy(vm: Arc<VolumeMigration>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(name = ?vm.metadata.name, %error, "reconcile failed; retrying");
    Action::requeue(ctx.error_requeue)
}

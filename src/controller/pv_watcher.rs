//! Watches PersistentVolumes: keeps the [`PvIndex`] current on every replica and, on the
//! leader, makes sure each in-tree vSphere path has its VolumeMigration and that the
//! reconciler hears about every change of a path's PVs (the loop: [`super::user_watch`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::pv_index::IndexChange;
use super::user_watch::{self, Users};
use super::{Context, MigrationCache, WorkQueue};
use crate::compact_text::NameSet;
use crate::k8s::events::{EventType, reason as event_reason};
use crate::volume_path::VolumePath;

/// The PV watcher of one replica.
pub struct PvWatcher {
    /// Shared reconciler context (index, leader gate, events, client).
    pub ctx: Arc<Context>,
    /// The controller's VolumeMigration cache (to skip creates of existing objects).
    pub migrations: Arc<MigrationCache>,
    /// Where to send reconcile triggers.
    pub trigger: WorkQueue,
}

impl PvWatcher {
    /// Watches `pvs` until `shutdown`. Watch errors are retried with backoff by the
    /// watcher; a re-list reconciles the index with what the API server holds.
    pub async fn run(self, pvs: Api<PersistentVolume>, shutdown: CancellationToken) {
        let ctx = self.ctx.clone();
        user_watch::run(self, ctx, pvs, shutdown).await;
    }

    /// Indexes `pv` and triggers the reconciles of the paths it touched; on the leader,
    /// returns the paths that need a VolumeMigration created (none for the `initial` list).
    async fn apply(&self, pv: &PersistentVolume, initial: bool) -> Vec<VolumePath> {
        if pv.metadata.name.is_none() {
            return Vec::new();
        }
        let change: IndexChange = self.ctx.index.upsert_pv(pv);
        self.ctx.index.csi().upsert_pv(pv);
        for path in &change.touched {
            self.trigger_reconcile(path);
        }
        if !self.ctx.leader.is_open() {
            return Vec::new();
        }
        report_invalid_paths(&self.ctx).await;
        if initial {
            return Vec::new();
        }
        change
            .touched
            .into_iter()
            .filter(|path| {
                !self.migrations.tracks(&path.object_name(), path)
                    && !self.ctx.index.pvs_for(path).is_empty()
            })
            .collect()
    }

    fn trigger_reconcile(&self, path: &VolumePath) {
        self.trigger.schedule_now(&path.object_name());
    }
}

impl Users for PvWatcher {
    type Object = PersistentVolume;
    const WATCH_FAILED: &'static str = "PV watch failed; retrying with backoff";

    async fn listed(&self, pv: &PersistentVolume) -> Vec<String> {
        // Missing objects of the initial list are created by the start-up full sync.
        self.apply(pv, true).await;
        pv.metadata.name.iter().cloned().collect()
    }

    fn list_done(&self, seen: &NameSet) {
        for path in self.ctx.index.retain(seen) {
            self.trigger_reconcile(&path);
        }
        self.ctx.index.csi().retain_pvs(seen);
        if !self.ctx.index.is_synced() {
            info!(tracked = self.ctx.index.len(), "PV cache synced");
        }
        self.ctx.index.set_synced();
        self.ctx.metrics.set_pvs_tracked(self.ctx.index.len());
    }

    async fn applied(&self, pv: &PersistentVolume) -> Vec<(VolumePath, String)> {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let paths = self.apply(pv, false).await;
        paths.into_iter().map(|path| (path, name.clone())).collect()
    }

    fn deleted(&self, pv: &PersistentVolume) {
        if let Some(name) = &pv.metadata.name {
            self.ctx.index.csi().remove_pv(name);
            let change = self.ctx.index.remove(name);
            for path in &change.touched {
                self.trigger_reconcile(path);
            }
            self.ctx.metrics.set_pvs_tracked(self.ctx.index.len());
        }
    }
}

/// Publishes one Warning Event per PV whose path became invalid since the last report.
/// Called by the leader only (the PV watcher and every full-sync pass).
pub async fn report_invalid_paths(ctx: &Context) {
    for (pv, error) in ctx.index.take_unreported_invalid() {
        warn!(pv, %error, "PV has an invalid vSphere volume path; not migrating it");
        ctx.cluster
            .events
            .on_pv(
                &pv,
                EventType::Warning,
                event_reason::INVALID_VOLUME_PATH,
                error.to_string(),
            )
            .await;
    }
}

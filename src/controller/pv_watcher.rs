//! Watches PersistentVolumes: keeps the [`PvIndex`] current on every replica and, on the
//! leader, makes sure each in-tree vSphere path has its VolumeMigration and that the
//! reconciler hears about every change of a path's PVs.
//!
//! The VolumeMigrations of new paths are created beside the watch, up to
//! [`CREATES_IN_FLIGHT`] at once. Waiting for each create before reading the next PV event
//! let a burst of new PVs reach the registrar one API round trip apart, however many
//! registrations the backend slots allowed, and one create waiting for its reply held up
//! every later PV event (deletions included).

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::pv_index::IndexChange;
use super::{Context, MigrationCache, WorkQueue};
use crate::compact_text::{CompactText, NameSet};
use crate::k8s::events::{EventType, reason as event_reason};
use crate::k8s::migrations::{EnsureError, ensure_migration};
use crate::volume_path::VolumePath;

/// VolumeMigration creates the PV watcher has in flight at most; while that many are, it
/// reads no further PV events.
pub const CREATES_IN_FLIGHT: usize = 16;

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
        let mut stream = watcher::watcher(pvs, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut relist: Option<NameSet> = None;
        let mut creates = FuturesUnordered::new();
        let mut creating: HashSet<VolumePath> = HashSet::new();
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                Some(done) = creates.next(), if !creates.is_empty() => {
                    creating.remove(&done);
                    continue;
                }
                next = stream.next(), if creates.len() < CREATES_IN_FLIGHT => next,
            };
            match next {
                None => return,
                Some(Err(e)) => warn!(error = %e, "PV watch failed; retrying with backoff"),
                Some(Ok(Event::Init)) => relist = Some(NameSet::default()),
                Some(Ok(Event::InitApply(pv))) => {
                    if let (Some(seen), Some(name)) = (relist.as_mut(), &pv.metadata.name) {
                        seen.insert(CompactText::new(name));
                    }
                    // Missing objects of the initial list are created by the start-up full sync.
                    self.apply(&pv, true).await;
                }
                Some(Ok(Event::InitDone)) => {
                    let keep = relist.take().unwrap_or_default();
                    for path in self.ctx.index.retain(&keep) {
                        self.trigger_reconcile(&path);
                    }
                    if !self.ctx.index.is_synced() {
                        info!(tracked = self.ctx.index.len(), "PV cache synced");
                    }
                    self.ctx.index.set_synced();
                    self.ctx.metrics.set_pvs_tracked(self.ctx.index.len());
                }
                Some(Ok(Event::Apply(pv))) => {
                    let name = pv.metadata.name.clone().unwrap_or_default();
                    for path in self.apply(&pv, false).await {
                        // Another PV of the path already has its create in flight.
                        if creating.insert(path.clone()) {
                            creates.push(create_migration(self.ctx.clone(), path, name.clone()));
                        }
                    }
                }
                Some(Ok(Event::Delete(pv))) => {
                    if let Some(name) = &pv.metadata.name {
                        let change = self.ctx.index.remove(name);
                        for path in &change.touched {
                            self.trigger_reconcile(path);
                        }
                        self.ctx.metrics.set_pvs_tracked(self.ctx.index.len());
                    }
                }
            }
        }
    }

    /// Indexes `pv` and triggers the reconciles of the paths it touched; on the leader,
    /// returns the paths that need a VolumeMigration created (none for the `initial` list).
    async fn apply(&self, pv: &PersistentVolume, initial: bool) -> Vec<VolumePath> {
        if pv.metadata.name.is_none() {
            return Vec::new();
        }
        let change: IndexChange = self.ctx.index.upsert_pv(pv);
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

/// Creates the VolumeMigration of `path`, which PV `pv` uses; returns the path when done.
/// A failure is reported and left to full sync.
async fn create_migration(ctx: Arc<Context>, path: VolumePath, pv: String) -> VolumePath {
    match ensure_migration(&ctx.cluster.migrations, &path).await {
        Ok(_) => {}
        Err(e @ EnsureError::NameCollision { .. }) => report_name_collision(&ctx, &pv, &e).await,
        Err(e) => {
            warn!(%path, pv, error = %crate::error_chain(&e), "could not create the VolumeMigration; full sync will retry");
        }
    }
    path
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

/// Reports that the VolumeMigration name of a PV's path is taken by an object tracking
/// another path: a Warning Event on the PV, a metric and a log line (docs/design.md §2.6).
pub async fn report_name_collision(ctx: &Context, pv: &str, error: &EnsureError) {
    warn!(pv, error = %error, "name collision: the PV's path cannot be tracked");
    ctx.metrics.name_collision();
    ctx.cluster
        .events
        .on_pv(
            pv,
            EventType::Warning,
            event_reason::NAME_COLLISION,
            error.to_string(),
        )
        .await;
}

//! Watches pods for inline vSphere volumes (`spec.volumes[].vsphereVolume`, docs/design.md
//! §8.9): keeps them in the [`super::PvIndex`] as users of their path on every replica and,
//! on the leader, makes sure each such path has its VolumeMigration, exactly as the
//! [`super::pv_watcher`] does for PVs. A pod's volumes cannot change once it exists, so an
//! update adds nothing new; a deletion forgets the pod's volumes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::user_watch::{self, Users};
use super::{Context, MigrationCache, WorkQueue};
use crate::compact_text::NameSet;
use crate::k8s::inline_volumes::{inline_volumes, pod_created};
use crate::volume_path::VolumePath;

/// The pod watcher of one replica.
pub struct PodWatcher {
    /// Shared reconciler context (index, leader gate, client).
    pub ctx: Arc<Context>,
    /// The controller's VolumeMigration cache (to skip creates of existing objects).
    pub migrations: Arc<MigrationCache>,
    /// Where to send reconcile triggers.
    pub trigger: WorkQueue,
}

impl PodWatcher {
    /// Watches `pods` until `shutdown`. Watch errors (a 403 without the pods rule
    /// included) are retried with backoff; until the first list is indexed the index is
    /// not synced, so nothing is decided on a partial view of a path's users.
    pub async fn run(self, pods: Api<Pod>, shutdown: CancellationToken) {
        let ctx = self.ctx.clone();
        user_watch::run(self, ctx, pods, shutdown).await;
    }

    /// Indexes the inline volumes of `pod` and triggers the reconciles of the paths they
    /// touched; returns each volume's key with the path it touched (none: unchanged).
    fn apply(&self, pod: &Pod) -> Vec<(String, Option<VolumePath>)> {
        let created = pod_created(pod);
        inline_volumes(pod)
            .into_iter()
            .map(|volume| {
                let new = !self.ctx.index.knows(&volume.key);
                let change = self
                    .ctx
                    .index
                    .upsert_pod_volume(&volume.key, &volume.raw, created);
                if new && VolumePath::parse(&volume.raw).is_err() {
                    warn!(
                        pod_volume = volume.key,
                        raw = volume.raw,
                        "inline vSphere volume has an invalid path; not migrating it"
                    );
                }
                for path in &change.touched {
                    self.trigger.schedule_now(&path.object_name());
                }
                let path = change.touched.into_iter().next();
                (volume.key, path)
            })
            .collect()
    }
}

impl Users for PodWatcher {
    type Object = Pod;
    const WATCH_FAILED: &'static str =
        "pod watch failed (inline vSphere volumes); retrying with backoff";

    async fn listed(&self, pod: &Pod) -> Vec<String> {
        self.apply(pod).into_iter().map(|(key, _)| key).collect()
    }

    fn list_done(&self, seen: &NameSet) {
        for path in self.ctx.index.retain_pod_volumes(seen) {
            self.trigger.schedule_now(&path.object_name());
        }
        info!(
            inline_volumes = self.ctx.index.pod_volumes(),
            "pod cache synced (inline vSphere volumes)"
        );
        self.ctx.index.set_pods_synced();
    }

    async fn applied(&self, pod: &Pod) -> Vec<(VolumePath, String)> {
        self.apply(pod)
            .into_iter()
            .filter_map(|(key, path)| Some((path?, key)))
            .filter(|(path, _)| {
                self.ctx.leader.is_open() && !self.migrations.tracks(&path.object_name(), path)
            })
            .collect()
    }

    fn deleted(&self, pod: &Pod) {
        for volume in inline_volumes(pod) {
            for path in self.ctx.index.remove(&volume.key).touched {
                self.trigger.schedule_now(&path.object_name());
            }
        }
    }
}

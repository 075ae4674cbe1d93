//! The watch loop both watchers of a path's users share (PVs: [`super::pv_watcher`];
//! pods with inline volumes: [`super::pod_watcher`]): index every event, drop the users a
//! re-list no longer holds, and on the leader create the VolumeMigrations of new paths
//! beside the watch, up to [`CREATES_IN_FLIGHT`] at once.
//!
//! Waiting for each create before reading the next event let a burst of new PVs reach the
//! registrar one API round trip apart, however many registrations the backend slots
//! allowed, and one create waiting for its reply held up every later event (deletions
//! included).

use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::Context;
use crate::compact_text::{CompactText, NameSet};
use crate::k8s::events::{EventType, reason as event_reason};
use crate::k8s::migrations::{EnsureError, ensure_migration};
use crate::volume_path::VolumePath;

/// VolumeMigration creates a watcher has in flight at most; while that many are, it reads
/// no further events.
pub const CREATES_IN_FLIGHT: usize = 16;

/// What a watcher of one kind of path users does with its objects.
pub(super) trait Users: Send + Sync {
    /// The watched kind.
    type Object: kube::Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static;

    /// The log line of a failed watch (retried with backoff).
    const WATCH_FAILED: &'static str;

    /// Indexes one object of a (re-)list; returns the user keys it holds.
    fn listed(&self, object: &Self::Object) -> impl Future<Output = Vec<String>> + Send;

    /// The (re-)list is indexed: users not in `seen` are gone.
    fn list_done(&self, seen: &NameSet);

    /// Indexes a created or changed object; returns the paths that need a VolumeMigration
    /// created, each with the user that needs it.
    fn applied(
        &self,
        object: &Self::Object,
    ) -> impl Future<Output = Vec<(VolumePath, String)>> + Send;

    /// Forgets a deleted object's users.
    fn deleted(&self, object: &Self::Object);
}

/// Watches `api` until `shutdown`, handing every event to `users`. Watch errors are
/// retried with backoff by the watcher; until the first list is indexed the index is not
/// synced, so nothing is decided on a partial view of a path's users.
pub(super) async fn run<U: Users>(
    users: U,
    ctx: Arc<Context>,
    api: Api<U::Object>,
    shutdown: CancellationToken,
) {
    let mut stream = watcher::watcher(api, watcher::Config::default())
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
            Some(Err(e)) => warn!(error = %e, "{}", U::WATCH_FAILED),
            Some(Ok(Event::Init)) => relist = Some(NameSet::default()),
            Some(Ok(Event::InitApply(object))) => {
                for key in users.listed(&object).await {
                    if let Some(seen) = relist.as_mut() {
                        seen.insert(CompactText::new(&key));
                    }
                }
            }
            Some(Ok(Event::InitDone)) => users.list_done(&relist.take().unwrap_or_default()),
            Some(Ok(Event::Apply(object))) => {
                for (path, user) in users.applied(&object).await {
                    // Another user of the path may already have its create in flight.
                    if creating.insert(path.clone()) {
                        creates.push(create_migration(ctx.clone(), path, user));
                    }
                }
            }
            Some(Ok(Event::Delete(object))) => users.deleted(&object),
        }
    }
}

/// Creates the VolumeMigration of `path`, which the user `pv` (a PV's name or an inline
/// pod volume's key) needs; returns the path when done. A failure is reported and left to
/// full sync.
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

/// Reports that the VolumeMigration name of a PV's path is taken by an object tracking
/// another path: a Warning Event on the PV, a metric and a log line (docs/design.md §2.6).
pub async fn report_name_collision(ctx: &Context, pv: &str, error: &EnsureError) {
    warn!(pv, error = %error, "name collision: the PV's path cannot be tracked");
    ctx.metrics.name_collision();
    if crate::k8s::inline_volumes::is_pod_user(pv) {
        // An inline pod volume: there is no PV to hang the Event on (the log says it).
        return;
    }
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

//! When may a create that might still be running in vCenter be presumed ended
//! (docs/design.md §4.8, §4.10)?
//!
//! A `Registering` marker carries a token unique to one write-ahead. The grace of a marker
//! is measured on this process's monotonic clock: from the moment this process sent the
//! create (its own markers), or from the moment it first saw the token (markers of another
//! replica or of a process that died). Wall clocks of two machines are never compared.
//!
//! A create whose vCenter task this process knows (its own, told by the backend) stays in
//! doubt until that task is followed to its end, however long it runs (docs/design.md
//! §4.4, §4.10).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::volume_path::VolumePath;

/// One marker this process knows of.
struct Entry {
    token: String,
    /// When this process sent the create under `token`, or first saw the token.
    since: Instant,
    /// vCenter said the create under `token` ended without a volume (it refused it).
    ended: bool,
    /// The vCenter task the create under `token` runs as, when the backend told it.
    task: Option<String>,
}

/// The markers this process knows of, one per path (entries go when the path resolves).
#[derive(Default)]
pub struct InFlight {
    seen: Mutex<HashMap<VolumePath, Entry>>,
}

impl InFlight {
    fn map(&self) -> MutexGuard<'_, HashMap<VolumePath, Entry>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that this process sends a create under `token` now.
    pub fn started(&self, path: &VolumePath, token: &str) {
        self.map().insert(
            path.clone(),
            Entry {
                token: token.to_owned(),
                since: Instant::now(),
                ended: false,
                task: None,
            },
        );
    }

    /// Records that the create under `token` is known to have ended without a volume
    /// (vCenter refused it): its marker proves nothing in flight any more.
    pub fn ended(&self, path: &VolumePath, token: &str) {
        if let Some(entry) = self.map().get_mut(path)
            && entry.token == token
        {
            entry.ended = true;
        }
    }

    /// Records that no create was sent under `token` (its write-ahead was stored, then the
    /// create was called off): the marker proves nothing in flight.
    pub fn not_sent(&self, path: &VolumePath, token: &str) {
        self.map().insert(
            path.clone(),
            Entry {
                token: token.to_owned(),
                since: Instant::now(),
                ended: true,
                task: None,
            },
        );
    }

    /// Records that the create under `token` (sent by this process) runs as `task`.
    pub fn task_started(&self, path: &VolumePath, token: &str, task: &str) {
        if let Some(entry) = self.map().get_mut(path)
            && entry.token == token
        {
            entry.task = Some(task.to_owned());
        }
    }

    /// The task this process knows the create under `token` runs as, unless it ended.
    pub fn task(&self, path: &VolumePath, token: &str) -> Option<String> {
        self.map()
            .get(path)
            .filter(|e| e.token == token && !e.ended)
            .and_then(|e| e.task.clone())
    }

    /// Records that the task of the create under `token` (any replica's) ended in error:
    /// no create can land under that marker any more.
    pub fn task_failed(&self, path: &VolumePath, token: &str) {
        self.not_sent(path, token);
    }

    /// vCenter does not know the task of the create under `token`: only the grace tells
    /// when that create may be presumed ended.
    pub fn task_unknown(&self, path: &VolumePath, token: &str) {
        if let Some(entry) = self.map().get_mut(path)
            && entry.token == token
        {
            entry.task = None;
        }
    }

    /// True when the create under `token` is known to have ended without a volume.
    pub fn is_ended(&self, path: &VolumePath, token: &str) -> bool {
        self.map()
            .get(path)
            .is_some_and(|e| e.ended && e.token == token)
    }

    /// When the create under `token` may be presumed ended: `grace` after it was sent (own
    /// token) or first seen (any other token; seeing it starts the clock); now when it is
    /// known to have ended.
    pub fn deadline(&self, path: &VolumePath, token: &str, grace: Duration) -> Instant {
        let mut map = self.map();
        let entry = map.entry(path.clone()).or_insert_with(|| Entry {
            token: token.to_owned(),
            since: Instant::now(),
            ended: false,
            task: None,
        });
        if entry.token != token {
            *entry = Entry {
                token: token.to_owned(),
                since: Instant::now(),
                ended: false,
                task: None,
            };
        }
        if entry.ended {
            Instant::now()
        } else {
            entry.since + grace
        }
    }

    /// The token of a create of `path` that this process knows of and that may still be
    /// running: a marker of its own, whatever the stored status says now. A create whose
    /// task is known stays pending past the grace, until the task is followed to its end.
    pub fn pending(&self, path: &VolumePath, grace: Duration) -> Option<String> {
        self.map()
            .get(path)
            .filter(|e| !e.ended && (e.task.is_some() || e.since + grace > Instant::now()))
            .map(|e| e.token.clone())
    }

    /// True while a create of `path` that this process knows of may still be running.
    pub fn in_doubt(&self, path: &VolumePath, grace: Duration) -> bool {
        self.pending(path, grace).is_some()
    }

    /// The path resolved (registered, failed for certain, or unregistered).
    pub fn forget(&self, path: &VolumePath) {
        self.map().remove(path);
    }

    /// Paths with a known marker (0 when idle: entries never leak).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True when no marker is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> VolumePath {
        VolumePath::parse("[ds] a.vmdk").unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_foreign_token_starts_the_clock_when_first_seen() {
        let inflight = InFlight::default();
        let grace = Duration::from_secs(60);
        tokio::time::advance(Duration::from_secs(500)).await;
        let first = inflight.deadline(&path(), "other/1", grace);
        assert_eq!(first, Instant::now() + grace);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(
            inflight.deadline(&path(), "other/1", grace),
            first,
            "seeing the same token again does not restart the clock"
        );
        let second = inflight.deadline(&path(), "other/2", grace);
        assert_eq!(second, Instant::now() + grace, "a new token restarts it");
        assert!(inflight.in_doubt(&path(), grace));
        tokio::time::advance(grace).await;
        assert!(!inflight.in_doubt(&path(), grace));
        inflight.forget(&path());
        assert!(inflight.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn own_token_counts_from_the_send() {
        let inflight = InFlight::default();
        let grace = Duration::from_secs(60);
        inflight.started(&path(), "me/1");
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(45)).await;
        assert_eq!(inflight.deadline(&path(), "me/1", grace), sent + grace);
        assert_eq!(inflight.pending(&path(), grace).as_deref(), Some("me/1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_known_to_have_ended_is_not_in_doubt() {
        let inflight = InFlight::default();
        let grace = Duration::from_secs(60);
        inflight.started(&path(), "me/1");
        inflight.ended(&path(), "other/1");
        assert!(
            inflight.in_doubt(&path(), grace),
            "another token ends nothing"
        );
        inflight.ended(&path(), "me/1");
        assert!(inflight.is_ended(&path(), "me/1"));
        assert!(!inflight.in_doubt(&path(), grace));
        assert_eq!(inflight.deadline(&path(), "me/1", grace), Instant::now());
        assert_eq!(inflight.pending(&path(), grace), None);
    }
}

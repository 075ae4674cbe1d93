//! The watch half of the double's informers (cache, PVs, pods): watch from the list's
//! resourceVersion, resume a watch that timed out, and stop on a watch error (a 410
//! included) so that the informer relists, as a client-go reflector does.

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Resource;
use kube::api::{Api, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;

/// One change a watch delivers.
pub enum Change<K> {
    Added(K),
    Modified(K),
    Deleted(K),
}

/// A watch of `api` from a list's resourceVersion, kept current from every event and
/// bookmark.
pub struct Watch<K> {
    api: Api<K>,
    version: String,
    stream: Option<BoxStream<'static, kube::Result<WatchEvent<K>>>>,
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    /// Watches `api` from `version` (the list's).
    pub fn from(api: &Api<K>, version: String) -> Self {
        Self {
            api: api.clone(),
            version,
            stream: None,
        }
    }

    /// The next change, one at a time; `None` once the watch failed: then the caller
    /// relists.
    pub async fn next(&mut self) -> Option<Change<K>> {
        loop {
            if self.stream.is_none() {
                let params = WatchParams::default().timeout(30);
                let stream = self.api.watch(&params, &self.version).await.ok()?;
                self.stream = Some(stream.boxed());
            }
            let change = match self.stream.as_mut()?.next().await {
                // The watch timed out: resume it.
                None => {
                    self.stream = None;
                    continue;
                }
                Some(Ok(WatchEvent::Added(o))) => Change::Added(o),
                Some(Ok(WatchEvent::Modified(o))) => Change::Modified(o),
                Some(Ok(WatchEvent::Deleted(o))) => Change::Deleted(o),
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    self.version = b.metadata.resource_version;
                    continue;
                }
                // 410 Gone or anything else: relist.
                Some(Ok(WatchEvent::Error(_)) | Err(_)) => return None,
            };
            let (Change::Added(o) | Change::Modified(o) | Change::Deleted(o)) = &change;
            if let Some(v) = &o.meta().resource_version {
                self.version.clone_from(v);
            }
            return Some(change);
        }
    }
}

//! The CSI driver's informer as the stock driver runs it (docs/design.md §8.1): every watch
//! event of its `CnsVSphereVolumeMigration` objects, and the cache its AddFunc and
//! DeleteFunc build from them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use volmig::k8s::driver_cache::{CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec};

use super::canonical;
use super::e2e::{Cluster, volume_id};

/// One watch event of the driver's objects: `ADDED`, `MODIFIED`, `DELETED` or `ERROR`.
type Seen = (&'static str, String, Option<CnsVSphereVolumeMigrationSpec>);

/// The driver's informer (docs/design.md §8.1): every watch event of its objects, from
/// before the scenario's first object on.
pub struct DriverInformer {
    events: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl DriverInformer {
    pub async fn start(cluster: &Cluster) -> DriverInformer {
        let api: Api<CnsVSphereVolumeMigration> = Api::all(cluster.client.clone());
        let list = api.list(&ListParams::default()).await.expect("list");
        assert!(
            list.items.is_empty(),
            "the informer starts before any object"
        );
        let mut version = list.metadata.resource_version.expect("a list version");
        let events = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&events);
        let task = tokio::spawn(async move {
            let record = |seen: Seen| log.lock().unwrap().push(seen);
            loop {
                let params = WatchParams::default().timeout(60);
                let stream = match api.watch(&params, &version).await {
                    Ok(stream) => stream,
                    Err(e) => return record(("ERROR", e.to_string(), None)),
                };
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let (kind, object) = match event {
                        Ok(WatchEvent::Added(o)) => ("ADDED", o),
                        Ok(WatchEvent::Modified(o)) => ("MODIFIED", o),
                        Ok(WatchEvent::Deleted(o)) => ("DELETED", o),
                        Ok(WatchEvent::Bookmark(b)) => {
                            version = b.metadata.resource_version;
                            continue;
                        }
                        Ok(WatchEvent::Error(e)) => {
                            return record(("ERROR", format!("{e:?}"), None));
                        }
                        Err(e) => return record(("ERROR", e.to_string(), None)),
                    };
                    if let Some(v) = &object.metadata.resource_version {
                        version.clone_from(v);
                    }
                    record((
                        kind,
                        object.metadata.name.unwrap_or_default(),
                        Some(object.spec),
                    ));
                }
            }
        });
        DriverInformer { events, task }
    }

    fn events(&self) -> Vec<Seen> {
        self.events.lock().unwrap().clone()
    }

    /// The driver's cache as its AddFunc and DeleteFunc build it: Add stores the raw path
    /// → ID, Delete removes the deleted object's raw path, whichever object still carries it.
    fn cache(&self) -> BTreeMap<String, String> {
        let mut cache = BTreeMap::new();
        for (kind, _, spec) in self.events() {
            match (kind, spec) {
                ("ADDED", Some(spec)) => {
                    cache.insert(spec.volumepath, spec.volumeid);
                }
                ("DELETED", Some(spec)) => {
                    cache.remove(&spec.volumepath);
                }
                _ => {}
            }
        }
        cache
    }

    /// Asserts that the driver's objects were only ever added and deleted, and that the
    /// cache built from those events maps each PV's raw spelling to its VolumeMigration's
    /// `status.volumeID`.
    pub async fn assert_every_pv_hits(&self, cluster: &Cluster) {
        let mut want = BTreeMap::new();
        for pv in cluster
            .pvs()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            let Some(raw) = pv
                .spec
                .and_then(|s| s.vsphere_volume)
                .map(|v| v.volume_path)
            else {
                continue;
            };
            let vm = cluster
                .migration(&canonical(&raw))
                .await
                .expect("VolumeMigration");
            want.insert(raw, volume_id(&vm).expect("a status volume ID"));
        }
        let hits = |cache: &BTreeMap<String, String>| {
            want.iter().all(|(raw, id)| cache.get(raw) == Some(id))
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !hits(&self.cache()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A second look after a pause: nothing volmig still had under way undoes it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (cache, events) = (self.cache(), self.events());
        let odd: Vec<&Seen> = events
            .iter()
            .filter(|e| !matches!(e.0, "ADDED" | "DELETED"))
            .collect();
        assert!(
            odd.is_empty(),
            "the driver never sees these: {odd:?}\nall: {events:?}"
        );
        assert!(
            hits(&cache),
            "the driver's cache {cache:?}\nshould map {want:?}\nevents: {events:?}"
        );
    }
}

impl Drop for DriverInformer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

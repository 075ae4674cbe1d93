//! What the driver's syncer does while it leads, @ bf80902:
//!
//! - `GetVolumeID` (`pkg/apis/migration/migration.go:222-254`): a cache hit returns the
//!   cached ID; a miss with `registerIfNotFound` calls `registerVolume` and `saveVolumeInfo`
//!   — and never looks at the cache again, nor stores the new ID in it.
//! - `registerVolume` (L446-584): a per-raw-path mutex (L449-452), a random UUID as CNS
//!   name (L454, L520), the datastore name from the first `[...]` of the path (L459-468), a
//!   backing URL `https://HOST/folder/<path>?dcPath=..&dsName=..` with the file path
//!   unescaped (L537-538), datacenters tried in order (L533-567),
//!   `protectvolumefromvmdelete` = vCenter ≥ 8.0.3 (L575-583). (The `RegisterDisk` branch
//!   of L545-553 is not modelled: the double always names the disk by URL.)
//! - `saveVolumeInfo` (L404-419): create the object named by the ID; AlreadyExists is
//!   success.
//! - PV events (`pkg/syncer/metadatasyncer.go` `pvUpdated` L3164-3258 → `csiPVUpdated`
//!   L3623-3651): an in-tree PV registers on a miss when it is updated; `pvAdded`
//!   (L3128-3134) returns at once in a vanilla cluster. In a real cluster the PV
//!   controller's first status update follows a PV's creation within milliseconds; the API
//!   test server has no PV controller, so `DriverOptions::register_on_pv_add` (default off)
//!   stands for that update.
//! - PV deletion (`csiPVDeleted` L3964-4015): `GetVolumeID(register)`, `CnsDeleteVolume(id,
//!   deleteDisk=false)` (an error is only logged), then `DeleteVolumeInfo` (L423-442)
//!   deletes the object named by the ID.
//! - Full sync (`pkg/syncer/fullsync.go:87-94, 205-228`): every in-tree PV through
//!   `GetVolumeID(register)`; the first error ends the pass. It never looks at pods.
//! - Pod adds (`AddPodListener` L805-815 → `podAdded` L3311-3346): every inline
//!   `vsphereVolume` of an added pod through `GetVolumeID(register)` (an error is only
//!   logged). The informer's initial list delivers every existing pod as an add, so a
//!   syncer that starts leading registers the inline volumes of all pods at once.
//! - Stale clean-up (`cleanupStaleCRDInstances`, migration.go:588-667).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use volmig::k8s::driver_cache::{CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec};

use super::Inner;
use super::cache::lock;
use super::watch::{Change, Watch};

/// `regexp \[([^\[\]]*)\]` (migration.go:459-468): the datastore name (last `/` segment
/// inside the first bracket pair) and the vmdk path after it (trimmed).
pub fn split_volume_path(raw: &str) -> Option<(String, String)> {
    let open = raw.find('[')?;
    let mut start = open;
    // The first `[` followed by a `]` with no bracket in between.
    loop {
        let rest = &raw[start + 1..];
        let close = rest.find(']')?;
        if let Some(inner_open) = rest[..close].find('[') {
            start = start + 1 + inner_open;
            continue;
        }
        let full = &raw[start..start + 1 + close + 1];
        let vmdk = raw.strip_prefix(full).unwrap_or(raw).trim().to_owned();
        let inside = full.trim_start_matches('[').trim_end_matches(']');
        let datastore = inside.rsplit('/').next().unwrap_or(inside).to_owned();
        return Some((datastore, vmdk));
    }
}

/// Go's `url.PathEscape` for the `dcPath` and `dsName` values.
pub fn path_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~$&+=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A random version-1-shaped UUID string, the CNS name `registerVolume` gives (L454, L520).
fn random_name() -> String {
    let v: u128 = rand::random();
    let h = format!("{v:032x}");
    format!(
        "{}-{}-1{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `GetVolumeID(volumePath, registerIfNotFound)` (migration.go:222-254).
pub async fn get_volume_id(
    inner: &Arc<Inner>,
    raw: &str,
    register: bool,
) -> Result<String, String> {
    if let Some(id) = lock(&inner.cache).get(raw) {
        return Ok(id);
    }
    if !register {
        return Err(format!(
            "{raw}: could not retrieve VolumeID from VolumeMigrationService cache"
        ));
    }
    register_and_save(inner, raw).await
}

/// The miss branch of `GetVolumeID` (migration.go:231-251): `registerVolume`, then
/// `saveVolumeInfo`; no second look at the cache.
pub async fn register_and_save(inner: &Arc<Inner>, raw: &str) -> Result<String, String> {
    let (id, protect) = register_volume(inner, raw).await?;
    save_volume_info(inner, &id, raw, protect).await?;
    Ok(id)
}

/// `registerVolume` (migration.go:446-584): (volume ID, protected from VM deletion).
async fn register_volume(inner: &Arc<Inner>, raw: &str) -> Result<(String, bool), String> {
    let mutex = lock(&inner.path_locks)
        .entry(raw.to_owned())
        .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
        .clone();
    let _held = mutex.lock().await;
    let name = random_name();
    let (datastore, vmdk) = split_volume_path(raw)
        .ok_or_else(|| format!("failed to extract datastore name from {raw:?}"))?;
    let mut last = String::new();
    for dc in &inner.datacenters {
        let url = format!(
            "https://{}/folder/{vmdk}?dcPath={}&dsName={}",
            inner.host,
            path_escape(dc),
            path_escape(&datastore)
        );
        inner.creates.fetch_add(1, Ordering::SeqCst);
        lock(&inner.created_names).push(name.clone());
        match inner
            .soap
            .create_volume_by_url(&name, &url, &inner.opts.cluster_id)
            .await
        {
            Ok(id) => {
                inner.note(format!("registered {raw:?} as {id} (CNS name {name})"));
                return Ok((id, inner.protect));
            }
            Err(e) => last = e,
        }
    }
    inner.note(format!("registration of {raw:?} failed: {last}"));
    Err(format!("registration failed for {raw:?}: {last}"))
}

/// `saveVolumeInfo` (migration.go:404-419): AlreadyExists is success.
async fn save_volume_info(inner: &Inner, id: &str, raw: &str, protect: bool) -> Result<(), String> {
    let object = CnsVSphereVolumeMigration::new(
        id,
        CnsVSphereVolumeMigrationSpec {
            volumepath: raw.to_owned(),
            volumeid: id.to_owned(),
            protectvolumefromvmdelete: protect,
        },
    );
    let api: Api<CnsVSphereVolumeMigration> = Api::all(inner.client.clone());
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            inner.note(format!("object {id} already exists ({raw:?})"));
            Ok(())
        }
        Err(e) => Err(format!("create object {id}: {e}")),
    }
}

/// `DeleteVolumeInfo` (migration.go:423-442): delete the object named by the ID.
async fn delete_volume_info(inner: &Inner, id: &str) -> Result<(), String> {
    let api: Api<CnsVSphereVolumeMigration> = Api::all(inner.client.clone());
    match api.delete(id, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!("delete object {id}: {e}")),
    }
}

/// The raw in-tree path of a PV, if it is one.
pub fn in_tree_path(pv: &PersistentVolume) -> Option<String> {
    pv.spec
        .as_ref()?
        .vsphere_volume
        .as_ref()
        .map(|v| v.volume_path.clone())
}

/// The PV's `status.phase` (empty when unset).
fn phase(pv: &PersistentVolume) -> String {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// `pvUpdated` → `csiPVUpdated` for an in-tree PV (metadatasyncer.go:3180-3206, 3238,
/// 3644-3651): not for a Pending or Failed PV, nor for an update of an Available or Bound
/// PV that changed neither labels nor annotations.
async fn pv_updated(inner: &Arc<Inner>, old: Option<&PersistentVolume>, pv: &PersistentVolume) {
    let phase_now = phase(pv);
    if phase_now == "Pending" || phase_now == "Failed" || pv.metadata.deletion_timestamp.is_some() {
        return;
    }
    if let Some(old) = old
        && matches!(phase(old).as_str(), "Available" | "Bound")
        && old.metadata.annotations == pv.metadata.annotations
        && old.metadata.labels == pv.metadata.labels
    {
        return;
    }
    if let Some(raw) = in_tree_path(pv)
        && let Err(e) = get_volume_id(inner, &raw, true).await
    {
        inner.note(format!("PVUpdated: {e}"));
    }
}

/// `csiPVDeleted` for an in-tree PV (metadatasyncer.go:3884-3888, 3964-4015).
async fn pv_deleted(inner: &Arc<Inner>, pv: &PersistentVolume) {
    let Some(raw) = in_tree_path(pv) else { return };
    let spec = pv.spec.clone().unwrap_or_default();
    if spec.claim_ref.is_some()
        && phase(pv) == "Released"
        && spec.persistent_volume_reclaim_policy.as_deref() == Some("Delete")
    {
        return;
    }
    let id = match get_volume_id(inner, &raw, true).await {
        Ok(id) => id,
        Err(e) => return inner.note(format!("PVDeleted: {e}")),
    };
    match inner.soap.delete_volume(&id, false).await {
        Ok(()) => inner.note(format!("PVDeleted: unregistered {id} ({raw:?})")),
        Err(e) => inner.note(format!("PVDeleted: failed to delete {id}: {e}")),
    }
    if let Err(e) = delete_volume_info(inner, &id).await {
        inner.note(format!("PVDeleted: {e}"));
    }
}

/// One full sync (fullsync.go:205-228): PVs only.
pub async fn full_sync(inner: &Arc<Inner>) -> Result<(), String> {
    let pvs: Api<PersistentVolume> = Api::all(inner.client.clone());
    let list = pvs
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    for pv in &list.items {
        if let Some(raw) = in_tree_path(pv) {
            get_volume_id(inner, &raw, true).await?;
        }
    }
    inner.full_syncs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The PV informer's handlers, run one event at a time (one listener goroutine): list, then
/// watch; ADDED/MODIFIED → `pvUpdated`, DELETED → `csiPVDeleted`; a relist after a watch
/// error delivers new names as adds, vanished ones as deletes.
pub async fn run_pv_informer(inner: Arc<Inner>) {
    let api: Api<PersistentVolume> = Api::all(inner.client.clone());
    let mut known: std::collections::BTreeMap<String, PersistentVolume> = Default::default();
    let mut first = true;
    loop {
        let Ok(list) = api.list(&ListParams::default()).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let listed: std::collections::BTreeMap<String, PersistentVolume> = list
            .items
            .into_iter()
            .map(|pv| (pv.metadata.name.clone().unwrap_or_default(), pv))
            .collect();
        if !first {
            for (name, pv) in &known {
                if !listed.contains_key(name) {
                    pv_deleted(&inner, pv).await;
                }
            }
            for (name, pv) in &listed {
                match known.get(name) {
                    Some(old) if old != pv => pv_updated(&inner, Some(old), pv).await,
                    None if inner.opts.register_on_pv_add => pv_updated(&inner, None, pv).await,
                    _ => {}
                }
            }
        }
        first = false;
        known = listed;
        let mut watch = Watch::from(&api, version);
        while let Some(change) = watch.next().await {
            match change {
                Change::Added(pv) => {
                    known.insert(pv.metadata.name.clone().unwrap_or_default(), pv.clone());
                    if inner.opts.register_on_pv_add {
                        pv_updated(&inner, None, &pv).await;
                    }
                }
                Change::Modified(pv) => {
                    let old =
                        known.insert(pv.metadata.name.clone().unwrap_or_default(), pv.clone());
                    pv_updated(&inner, old.as_ref(), &pv).await;
                }
                Change::Deleted(pv) => {
                    known.remove(&pv.metadata.name.clone().unwrap_or_default());
                    pv_deleted(&inner, &pv).await;
                }
            }
        }
    }
}

/// `podAdded` (metadatasyncer.go:3311-3346): each inline vSphere volume of `pod` through
/// `GetVolumeID(register)`; errors are only logged.
async fn pod_added(inner: &Arc<Inner>, pod: &Pod) {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    for v in volumes.iter().filter_map(|v| v.vsphere_volume.as_ref()) {
        if let Err(e) = get_volume_id(inner, &v.volume_path, true).await {
            inner.note(format!("podAdded: {e}"));
        }
    }
    inner.pod_adds.fetch_add(1, Ordering::SeqCst);
}

/// The pod informer's Add handler, one event at a time: the initial list and every relist
/// deliver pods not seen before as adds, then the watch's ADDED events.
pub async fn run_pod_informer(inner: Arc<Inner>) {
    let api: Api<Pod> = Api::all(inner.client.clone());
    let mut known: BTreeSet<String> = BTreeSet::new();
    let key = |pod: &Pod| {
        format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        )
    };
    loop {
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(e) => {
                inner.note(format!("pod informer: list failed: {e}"));
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let listed: BTreeSet<String> = list.items.iter().map(key).collect();
        for pod in &list.items {
            if !known.contains(&key(pod)) {
                pod_added(&inner, pod).await;
            }
        }
        known = listed;
        let mut watch = Watch::from(&api, version);
        while let Some(change) = watch.next().await {
            match change {
                Change::Added(pod) => {
                    if known.insert(key(&pod)) {
                        pod_added(&inner, &pod).await;
                    }
                }
                Change::Modified(_) => {}
                Change::Deleted(pod) => {
                    known.remove(&key(&pod));
                }
            }
        }
    }
}

/// `cleanupStaleCRDInstances` (migration.go:604-666): the names deleted.
pub async fn cleanup(inner: &Inner) -> Result<Vec<String>, String> {
    let api: Api<CnsVSphereVolumeMigration> = Api::all(inner.client.clone());
    let objects = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items;
    let ids: BTreeSet<String> = inner
        .soap
        .volume_ids_for_cluster(&inner.opts.cluster_id)
        .await?
        .into_iter()
        .collect();
    if ids.is_empty() {
        // L618-621: no volume in CNS, nothing is cleaned.
        return Ok(Vec::new());
    }
    let pvs: Api<PersistentVolume> = Api::all(inner.client.clone());
    let spelled: BTreeSet<String> = pvs
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .filter_map(in_tree_path)
        .collect();
    let mut deleted = Vec::new();
    for object in objects {
        let name = object.metadata.name.clone().unwrap_or_default();
        if ids.contains(&name) || spelled.contains(&object.spec.volumepath) {
            continue;
        }
        match delete_volume_info(inner, &name).await {
            Ok(()) => {
                inner.note(format!(
                    "cleanup: deleted stale object {name} ({:?})",
                    object.spec.volumepath
                ));
                deleted.push(name);
            }
            Err(e) => inner.note(format!("cleanup: {e}")),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_split_as_the_drivers_regexp_does() {
        assert_eq!(
            split_volume_path("[LocalDS_0] kubevols/disk-0001.vmdk"),
            Some(("LocalDS_0".into(), "kubevols/disk-0001.vmdk".into()))
        );
        assert_eq!(
            split_volume_path("[/DC0/datastore/LocalDS_0]   kubevols//disk-0001.vmdk "),
            Some(("LocalDS_0".into(), "kubevols//disk-0001.vmdk".into()))
        );
        assert_eq!(split_volume_path("no brackets"), None);
        assert_eq!(path_escape("/Prod/DC 0"), "%2FProd%2FDC%200");
        assert_eq!(random_name().len(), 36);
    }
}

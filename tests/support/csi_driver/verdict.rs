//! What a test of volmig beside the driver double judges at the end: every live PV's
//! spelling hits the driver's cache with its vmdk's one CNS volume, no vmdk ever had two,
//! and who created what.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::ListParams;
use volmig::VolumePath;
use volmig::volume_migration::Phase;

use super::CsiDriverDouble;
use crate::e2e::{Cluster, phase, volume_id};
use crate::vcsim::Vcsim;

fn canonical(raw: &str) -> String {
    VolumePath::parse(raw)
        .map(|p| p.canonical())
        .unwrap_or_else(|e| panic!("{raw}: {e}"))
}

/// Every live in-tree PV: name → raw path.
pub async fn live_pvs(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster
        .pvs()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|pv| {
            let raw = pv.spec?.vsphere_volume?.volume_path;
            Some((pv.metadata.name?, raw))
        })
        .collect()
}

/// Why the end state is not reached yet (`None`: reached): for every live PV its raw
/// spelling hits the double's cache with the one CNS volume of its vmdk, and volmig's
/// status holds that ID.
pub async fn end_state_gap(
    cluster: &Cluster,
    sim: &Vcsim,
    driver: &CsiDriverDouble,
) -> Option<String> {
    let cache = driver.cache_snapshot();
    let volumes = sim.volumes().await;
    for (pv, raw) in live_pvs(cluster).await {
        let path = canonical(&raw);
        let ids: Vec<&str> = volumes
            .iter()
            .filter(|v| v.backing_path == path)
            .map(|v| v.id.as_str())
            .collect();
        let [id] = ids.as_slice() else {
            return Some(format!("{pv}: CNS volumes {ids:?}"));
        };
        if cache.get(&raw).map(String::as_str) != Some(*id) {
            return Some(format!(
                "{pv} ({raw:?}): cache {:?}, CNS {id}",
                cache.get(&raw)
            ));
        }
        let vm = cluster.migration(&path).await;
        let status = vm.as_ref().and_then(volume_id);
        if status.as_deref() != Some(*id) || vm.as_ref().and_then(phase) != Some(Phase::Registered)
        {
            return Some(format!("{pv}: volmig status {status:?}, CNS {id}"));
        }
    }
    None
}

/// Samples `sim.duplicates()` every 2 s until dropped; keeps every non-empty sample.
pub fn sample_duplicates(
    sim: &Arc<Vcsim>,
) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (sim, out) = (Arc::clone(sim), Arc::clone(&seen));
    let task = tokio::spawn(async move {
        loop {
            let dups = sim.duplicates().await;
            if !dups.is_empty() {
                super::cache::lock(&out).push(format!("{dups:?}"));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    (seen, task)
}

/// Creates made by volmig (its CNS names start with `volmig-`), and all creates.
pub async fn creates_by_volmig(sim: &Vcsim) -> (Vec<String>, usize) {
    let creates = sim.creates().await;
    let names = creates
        .iter()
        .map(|c| c.name.clone())
        .filter(|n| n.starts_with("volmig-"))
        .collect();
    (names, creates.len())
}

/// Whether [`end_state_gap`] closes within `limit` (looked at every second).
pub async fn settles(
    cluster: &Cluster,
    sim: &Vcsim,
    driver: &CsiDriverDouble,
    limit: Duration,
) -> bool {
    tokio::time::timeout(limit, async {
        while end_state_gap(cluster, sim, driver).await.is_some() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .is_ok()
}

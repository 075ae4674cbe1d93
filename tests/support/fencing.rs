//! What the fencing end-to-end tests check after every scenario: each path Registered,
//! one CNS volume per vmdk, the one its status holds.

use std::collections::BTreeMap;
use std::time::Duration;

use volmig::VolumePath;
use volmig::volume_migration::Phase;

use crate::e2e::{Cluster, phase, volume_id, wait_for};
use crate::vcsim::Vcsim;

/// The canonical spelling of `path`.
pub fn canonical(path: &str) -> String {
    VolumePath::parse(path).expect("valid").canonical()
}

/// Waits until every one of `paths` is Registered; returns path → ID.
pub async fn registered(
    cluster: &Cluster,
    paths: &[String],
    within: Duration,
) -> BTreeMap<String, String> {
    wait_for(within, "every path Registered", || async {
        let mut out = BTreeMap::new();
        for vm in cluster.list_migrations().await {
            if phase(&vm) == Some(Phase::Registered)
                && let Some(id) = volume_id(&vm)
            {
                out.insert(vm.spec.volume_path.clone(), id);
            }
        }
        paths.iter().all(|p| out.contains_key(p)).then_some(out)
    })
    .await
}

/// Asserts one CNS volume per path, and that it is the one the status holds.
pub async fn one_volume_each(sim: &Vcsim, ids: &BTreeMap<String, String>) {
    assert!(
        sim.duplicates().await.is_empty(),
        "{:?}",
        sim.duplicates().await
    );
    for (path, id) in ids {
        let volumes = sim.volumes_for(path).await;
        let found: Vec<&str> = volumes.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(found, [id.as_str()], "{path}");
    }
}

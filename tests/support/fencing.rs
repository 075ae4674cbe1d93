//! What the fencing end-to-end tests share: a first daemon caught with its create in
//! flight, and what they check after every scenario (each path Registered, one CNS volume
//! per vmdk, the one its status holds).

#![allow(dead_code)] // each test crate uses a different subset

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use volmig::VolumePath;
use volmig::volume_migration::Phase;

use crate::e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use crate::vcsim::{Vcsim, VcsimOptions};

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

/// A first daemon whose create is in vCenter: one vmdk whose CNS create task runs `task`,
/// its PV `pv-1`, and the daemon `first` started with `args`.
pub struct CreateInFlight {
    pub sim: Vcsim,
    pub cluster: Cluster,
    /// The canonical path of the vmdk.
    pub path: String,
    pub first: Daemon,
    /// When the create was seen sent.
    pub sent_at: Instant,
}

/// Starts the scenario of [`CreateInFlight`] and waits until the first daemon's
/// `CnsCreateVolume` reached the simulator.
pub async fn create_in_flight(task: Duration, args: &[&str]) -> CreateInFlight {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1).cns_task_duration(task)).await;
    let cluster = Cluster::start().await;
    let path = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("pv-1", &path).await;
    let first = Daemon::spawn(&cluster, &sim, "first", args);
    wait_for(Duration::from_secs(60), "the create sent", || async {
        (sim.stats().await.calls("CnsCreateVolume") == 1).then_some(())
    })
    .await;
    CreateInFlight {
        sent_at: Instant::now(),
        path: canonical(&path),
        sim,
        cluster,
        first,
    }
}

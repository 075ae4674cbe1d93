//! Seeded random interleavings of register / unregister / lookup: never two volumes for
//! one path, never an ID returned but not stored (`VOLMIG_TEST_SEED` replays a run).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// One random schedule of register / unregister / lookup from 16 tasks over 20 paths.
async fn run_interleaving(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let f = fixture(config().with_max_concurrent(rng.random_range(1..=8)));
    let paths: Vec<_> = (0..20).map(path).collect();
    for p in &paths {
        f.backend.add_disk(p);
    }
    f.backend
        .set_latency(op::CREATE, Duration::from_millis(rng.random_range(0..20)));
    f.backend
        .set_latency(op::FIND, Duration::from_millis(rng.random_range(0..5)));
    f.backend
        .inject(op::CREATE, Fault::FailAfterCreate, rng.random_range(0..3));
    let late = Duration::from_millis(rng.random_range(1..50));
    f.backend
        .inject(op::CREATE, Fault::LateCreate(late), rng.random_range(0..3));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let task_seed = rng.random();
        let (r, store, paths) = (f.registrar.clone(), f.store.clone(), paths.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(task_seed);
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..10))).await;
                let p = &paths[rng.random_range(0..paths.len())];
                match rng.random_range(0..10) {
                    0..=5 => {
                        if let Ok(reg) = r.register(p).await {
                            let stored = store.history().iter().any(|(q, u)| {
                                q == p && matches!(u, StatusUpdate::Registered { volume_id, .. } if *volume_id == reg.volume_id)
                            });
                            assert!(stored, "seed {seed}: {} returned but never stored", reg.volume_id);
                        }
                    }
                    6..=7 => r.unregister(p).await.unwrap(),
                    _ => {
                        let _ = r.lookup(p).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        f.backend.max_live_per_path(),
        1,
        "seed {seed}: two live volumes for one path"
    );
    assert!(f.backend.duplicated_paths().is_empty(), "seed {seed}");
    assert_eq!(f.registrar.locked_keys(), 0, "seed {seed}: key leaked");
    assert_eq!(f.registrar.unsaved_ids(), 0, "seed {seed}: ID left unsaved");
    assert_eq!(
        f.backend.pending_creates(),
        0,
        "seed {seed}: a create outlived its call"
    );
    // The store and CNS agree at the end.
    for p in &paths {
        let stored = f.store.get(p).and_then(|s| s.volume_id);
        let live: Vec<_> = f.backend.volumes_for(p).into_iter().map(|v| v.id).collect();
        match stored {
            Some(id) => assert_eq!(live, vec![id], "seed {seed}: {p}"),
            None => assert!(live.is_empty(), "seed {seed}: {p} has an unrecorded volume"),
        }
    }
}

#[test]
fn random_interleavings_never_duplicate() {
    let base: u64 = std::env::var("VOLMIG_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("random interleavings: base seed {base} (set VOLMIG_TEST_SEED={base} to replay)");
    for i in 0..2000 {
        let seed = base.wrapping_add(i);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(run_interleaving(seed));
    }
}

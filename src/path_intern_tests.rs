//! The interner is process-wide and `cargo test` runs tests as threads of one process:
//! each test uses its own paths and looks only at them, never at the global count.

use super::*;

fn path(raw: &str) -> VolumePath {
    VolumePath::parse(raw).unwrap()
}

/// True when `handle` is the entry the interner holds for its path right now.
fn is_live(handle: &Arc<VolumePath>) -> bool {
    lock()
        .get(&**handle)
        .is_some_and(|entry| Arc::ptr_eq(entry, handle))
}

#[test]
fn every_spelling_of_a_path_gets_the_same_arc() {
    let a = intern(path("[intern-same] k/a.vmdk"));
    let b = intern(path("[/DC0/datastore/intern-same]  k//a.vmdk"));
    assert!(Arc::ptr_eq(&a, &b));
    assert!(is_live(&a));
    let other = intern(path("[intern-same] k/b.vmdk"));
    assert!(!Arc::ptr_eq(&a, &other));
    for handle in [a, b, other] {
        release(handle);
    }
}

#[test]
fn releasing_the_last_holder_removes_the_entry() {
    let p = path("[intern-last] a.vmdk");
    let handle = intern(p.clone());
    assert!(contains(&p));
    release(handle);
    assert!(!contains(&p));
    let again = intern(p.clone());
    assert!(is_live(&again), "interned anew after removal");
    release(again);
    assert!(!contains(&p));
}

#[test]
fn releasing_while_another_holder_remains_keeps_the_entry() {
    let p = path("[intern-keep] a.vmdk");
    let first = intern(p.clone());
    let second = intern(p.clone());
    let copy = Arc::clone(&second);
    release(first);
    assert!(is_live(&second));
    release(second);
    assert!(is_live(&copy), "a cloned handle counts as a holder");
    release(copy);
    assert!(!contains(&p));
}

#[test]
fn releasing_an_arc_made_elsewhere_leaves_the_entry() {
    let p = path("[intern-foreign] a.vmdk");
    let handle = intern(p.clone());
    release(Arc::new(p.clone()));
    assert!(is_live(&handle));
    release(handle);
    assert!(!contains(&p));
}

#[test]
fn sweep_removes_only_entries_no_one_holds() {
    let (held, dropped) = (
        path("[intern-sweep] held.vmdk"),
        path("[intern-sweep] dropped.vmdk"),
    );
    let handle = intern(held.clone());
    drop(intern(dropped.clone()));
    assert!(contains(&dropped), "a plain drop leaves the entry");
    sweep();
    assert!(!contains(&dropped));
    assert!(is_live(&handle));
    release(handle);
    assert!(!contains(&held));
}

/// Threads intern and release a few shared paths as fast as they can (and sweep now and
/// then): every handle they get must be the live entry, and nothing may be left at the end.
/// A `release` that decided "last holder" outside the lock would hand a concurrent
/// `intern` an entry that is then removed, and the next `intern` a second copy.
#[test]
fn concurrent_intern_and_release_never_split_a_path() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 20_000;
    let paths: Vec<VolumePath> = (0..3)
        .map(|k| path(&format!("[intern-stress] p{k}.vmdk")))
        .collect();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let paths = &paths;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let p = &paths[(t + round) % paths.len()];
                    let first = intern(p.clone());
                    assert!(is_live(&first), "thread {t} round {round}: stale handle");
                    let second = intern(p.clone());
                    assert!(Arc::ptr_eq(&first, &second), "thread {t}: two copies");
                    if round % 2 == 0 {
                        release(first);
                        release(second);
                    } else {
                        release(second);
                        release(first);
                    }
                    if round % 1000 == 0 {
                        sweep();
                    }
                }
            });
        }
    });
    for p in &paths {
        assert!(!contains(p), "{p} left behind");
    }
}

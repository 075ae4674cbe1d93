use kube::runtime::watcher::Event;
use serde_json::json;

use super::watch::apply_event;
use super::*;

fn vm(name: &str, path: &str, version: &str) -> VolumeMigration {
    serde_json::from_value(json!({
        "metadata": {"name": name, "resourceVersion": version, "generation": 3,
            "finalizers": [crate::volume_migration::FINALIZER]},
        "spec": {"volumePath": path},
        "status": {"phase": "Registered", "volumeID": "v-1", "persistentVolumes": ["pv-1"]},
    }))
    .unwrap()
}

fn named(path: &str) -> String {
    VolumePath::parse(path).unwrap().object_name()
}

#[test]
fn a_list_replaces_what_it_does_not_hold_and_marks_the_cache_synced() {
    let cache = MigrationCache::default();
    assert!(!cache.is_synced());
    assert_eq!(apply_event(&cache, &Event::Init), None);
    for name in ["a", "b"] {
        let got = apply_event(&cache, &Event::InitApply(vm(name, "[ds] x.vmdk", "1")));
        assert_eq!(got.as_deref(), Some(name));
    }
    assert!(!cache.is_synced());
    apply_event(&cache, &Event::InitDone);
    assert!(cache.is_synced());
    assert_eq!(cache.len(), 2);

    // A re-list (after a watch error) that no longer holds "a": it is gone at its end.
    apply_event(&cache, &Event::Init);
    apply_event(&cache, &Event::InitApply(vm("b", "[ds] x.vmdk", "2")));
    apply_event(&cache, &Event::InitApply(vm("c", "[ds] x.vmdk", "1")));
    assert!(cache.get("a").is_some(), "kept until the list ends");
    apply_event(&cache, &Event::InitDone);
    let mut names = cache.names();
    names.sort();
    assert_eq!(names, ["b", "c"]);
    assert_eq!(
        cache
            .get("b")
            .and_then(|vm| vm.metadata.resource_version)
            .as_deref(),
        Some("2")
    );
}

#[test]
fn updates_replace_and_deletions_remove_without_asking_for_a_reconcile() {
    let cache = MigrationCache::default();
    apply_event(&cache, &Event::Apply(vm("a", "[ds] x.vmdk", "1")));
    let got = apply_event(&cache, &Event::Apply(vm("a", "[ds] y.vmdk", "2")));
    assert_eq!(got.as_deref(), Some("a"));
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.get("a").unwrap().spec.volume_path, "[ds] y.vmdk");
    assert_eq!(
        apply_event(&cache, &Event::Delete(vm("a", "[ds] y.vmdk", "3"))),
        None
    );
    assert!(cache.is_empty());
    assert!(cache.get("a").is_none());
}

#[test]
fn lookups_answer_from_the_compact_record() {
    let cache = MigrationCache::default();
    let path = VolumePath::parse("[ds] kubevols/a.vmdk").unwrap();
    let name = named("[ds] kubevols/a.vmdk");
    cache.apply(&vm(&name, "[ds]  kubevols//a.vmdk", "5"));
    assert!(cache.tracks(&name, &path));
    assert!(!cache.tracks(&name, &VolumePath::parse("[ds] b.vmdk").unwrap()));
    assert!(!cache.tracks("other", &path));
    assert_eq!(cache.generation(&name), Some(3));
    assert_eq!(cache.generation("other"), None);
    let records = cache.records();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0],
        crate::controller::full_sync::record(&cache.get(&name).unwrap())
    );
    assert_eq!(records[0].path.as_ref(), Some(&path));
    assert_eq!(records[0].version.as_deref(), Some("5"));
}

#[test]
fn an_object_without_a_name_is_ignored() {
    let cache = MigrationCache::default();
    let mut nameless = vm("a", "[ds] x.vmdk", "1");
    nameless.metadata.name = None;
    assert_eq!(apply_event(&cache, &Event::Apply(nameless.clone())), None);
    apply_event(&cache, &Event::Delete(nameless));
    assert!(cache.is_empty());
}

#[test]
fn objects_named_after_their_path_share_it_and_give_it_back_when_gone() {
    let cache = MigrationCache::default();
    let path = VolumePath::parse("[ds] kubevols/intern-test-only.vmdk").unwrap();
    let mut created = crate::k8s::migrations::new_migration(&path);
    created.metadata.resource_version = Some("1".into());
    let name = path.object_name();
    cache.apply(&created);
    assert!(crate::path_intern::contains(&path));
    // The shared form answers like the text form.
    assert!(cache.tracks(&name, &path));
    assert_eq!(cache.records()[0].path.as_ref(), Some(&path));
    assert_eq!(cache.get(&name).unwrap().spec.volume_path, path.as_str());
    // Replaced by an update and then removed: nothing keeps the path interned.
    cache.apply(&created);
    assert!(crate::path_intern::contains(&path));
    cache.remove(&name);
    assert!(!crate::path_intern::contains(&path));

    // Not named after its path (or not canonical): the text is kept, the path not interned.
    let other = VolumePath::parse("[ds] kubevols/intern-test-other.vmdk").unwrap();
    cache.apply(&vm("not-its-name", other.as_str(), "1"));
    assert!(!crate::path_intern::contains(&other));
    assert!(cache.tracks("not-its-name", &other));
    assert_eq!(cache.records()[0].path, None);
}

#[test]
fn names_kept_by_digest_and_by_text_never_mix_up() {
    let cache = MigrationCache::default();
    let path = VolumePath::parse("[ds] kubevols/key-test.vmdk").unwrap();
    let derived = path.object_name();
    let suffix = derived.rsplit_once('-').unwrap().1.to_owned();
    // A hand-made object whose name ends with the same digest suffix, and one with no
    // suffix at all: kept by text, found by exact name only.
    let lookalike = format!("other-{suffix}");
    let plain = "plain-name".to_owned();
    cache.apply(&crate::k8s::migrations::new_migration(&path));
    cache.apply(&vm(&lookalike, path.as_str(), "1"));
    cache.apply(&vm(&plain, "[ds] p.vmdk", "1"));
    assert_eq!(cache.len(), 3);
    let mut names = cache.names();
    names.sort();
    let mut want = vec![derived.clone(), lookalike.clone(), plain.clone()];
    want.sort();
    assert_eq!(names, want);
    for name in &want {
        assert_eq!(cache.get(name).unwrap().metadata.name.as_ref(), Some(name));
    }
    assert!(cache.get(&format!("volume-{suffix}")).is_none());
    assert_eq!(
        cache.records().iter().filter(|r| r.path.is_some()).count(),
        1
    );
    cache.remove(&lookalike);
    assert!(cache.get(&derived).is_some());
    assert!(cache.get(&lookalike).is_none());
    cache.remove(&derived);
    assert!(cache.get(&derived).is_none());
    assert_eq!(cache.names(), [plain]);
}

#[test]
fn only_sixteen_lowercase_hex_digits_after_the_last_dash_are_a_digest_suffix() {
    assert_eq!(digest_suffix("a-00000000000000ff"), Some(255));
    assert_eq!(digest_suffix("a-b-ffffffffffffffff"), Some(u64::MAX));
    for name in [
        "a",
        "a-",
        "a-00000000000000FF",
        "a-0000000000000ff",
        "a-00000000000000fff",
    ] {
        assert_eq!(digest_suffix(name), None, "{name}");
    }
}

#[test]
fn a_large_cache_finds_every_object_after_growing_and_a_list_that_shrinks_it() {
    let cache = MigrationCache::default();
    let paths: Vec<VolumePath> = (0..2000)
        .map(|i| VolumePath::parse(&format!("[ds] grow/{i}.vmdk")).unwrap())
        .collect();
    cache.begin_list();
    for path in &paths {
        cache.apply(&crate::k8s::migrations::new_migration(path));
    }
    cache.end_list();
    cache.begin_list();
    for path in &paths[..500] {
        cache.apply(&crate::k8s::migrations::new_migration(path));
    }
    cache.end_list();
    assert_eq!(cache.len(), 500);
    for (i, path) in paths.iter().enumerate() {
        assert_eq!(cache.tracks(&path.object_name(), path), i < 500, "{path}");
    }
}

#[test]
fn removing_any_object_keeps_every_other_one_found_under_its_own_name() {
    // Objects sit densely in one vector; a removal moves the last one into the hole.
    let paths: Vec<String> = (0..40).map(|i| format!("[ds] d/{i}.vmdk")).collect();
    let names: Vec<String> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if i % 3 == 0 {
                format!("other-{i}")
            } else {
                named(p)
            }
        })
        .collect();
    let cache = MigrationCache::default();
    for (name, path) in names.iter().zip(&paths) {
        cache.apply(&vm(name, path, "1"));
    }
    // First, last, middle, an absent name, then the rest in a scrambled order.
    let mut order: Vec<usize> = vec![0, 39, 17];
    order.extend(
        (0..40)
            .map(|i| (i * 7) % 40)
            .filter(|i| ![0, 39, 17].contains(i)),
    );
    let mut left: Vec<usize> = (0..40).collect();
    cache.remove("absent");
    for gone in order {
        cache.remove(&names[gone]);
        left.retain(|&i| i != gone);
        assert_eq!(cache.len(), left.len());
        assert!(cache.get(&names[gone]).is_none(), "{} is gone", names[gone]);
        for &i in &left {
            let got = cache.get(&names[i]).expect("still cached");
            assert_eq!(got.spec.volume_path, paths[i], "{}", names[i]);
            assert!(cache.tracks(&names[i], &VolumePath::parse(&paths[i]).unwrap()));
        }
    }
    assert!(cache.is_empty());
}

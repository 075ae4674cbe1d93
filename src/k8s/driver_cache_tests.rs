use std::collections::BTreeSet;

use super::*;

fn id() -> VolumeId {
    VolumeId::from("6b1d0f0e-3a0c-4c8e-9d2c-0f7e0e6f1a11")
}

fn spec(raw: &str, protected: bool) -> CnsVSphereVolumeMigrationSpec {
    CnsVSphereVolumeMigrationSpec {
        volumepath: raw.into(),
        volumeid: id().0,
        protectvolumefromvmdelete: protected,
    }
}

fn ours(spec: CnsVSphereVolumeMigrationSpec) -> DriverObject {
    DriverObject { spec, ours: true }
}

fn creates(changes: &[DriverChange]) -> BTreeMap<String, DriverObject> {
    changes
        .iter()
        .filter_map(|c| match c {
            DriverChange::Create(name, object) => Some((name.clone(), object.clone())),
            DriverChange::Delete(_) => None,
        })
        .collect()
}

#[test]
fn oldest_spelling_is_named_by_the_id_others_get_a_hash_suffix() {
    let spellings = vec![
        "[LocalDS_0] kubevols/a.vmdk".to_owned(),
        "[/DC0/datastore/LocalDS_0] kubevols//a.vmdk".to_owned(),
        "[LocalDS_0] kubevols/a.vmdk".to_owned(),
    ];
    let plan = plan_publish(&id(), &spellings, true, &BTreeMap::new(), &BTreeSet::new());
    let desired = creates(&plan.changes);
    assert_eq!(desired.len(), 2, "one object per distinct spelling");
    assert_eq!(plan.changes.len(), 2, "creates only: {:?}", plan.changes);
    assert_eq!(
        desired[&id().0],
        ours(spec("[LocalDS_0] kubevols/a.vmdk", true))
    );
    let alias = object_name(&id(), &spellings[1], false);
    assert_eq!(alias.len(), id().0.len() + 9);
    assert!(alias.starts_with(&format!("{}-", id().0)));
    assert_eq!(
        desired[&alias].spec.volumepath, spellings[1],
        "raw, not canonical"
    );
    assert_eq!(
        alias,
        object_name(&id(), &spellings[1], false),
        "deterministic"
    );
    // In sync: nothing to change.
    let again = plan_publish(&id(), &spellings, true, &desired, &BTreeSet::new());
    assert_eq!(again, PublishPlan::default());
}

#[test]
fn changes_delete_then_create_and_touch_only_volmigs_stale_objects() {
    let spellings = vec!["[ds] a.vmdk".to_owned(), "[ds]  a.vmdk".to_owned()];
    let stale_alias = object_name(&id(), "[ds] old//a.vmdk", false);
    let driver_made = format!("{}-driver-made", id().0);
    let existing: BTreeMap<_, _> = [
        (id().0, ours(spec("[ds] a.vmdk", false))),
        (stale_alias.clone(), ours(spec("[ds] old//a.vmdk", true))),
        // The driver's objects of spellings no PV uses: never touched.
        (
            "other-id".to_owned(),
            DriverObject {
                spec: spec("[ds] b.vmdk", true),
                ours: false,
            },
        ),
        (
            driver_made.clone(),
            DriverObject {
                spec: spec("[ds] c.vmdk", true),
                ours: false,
            },
        ),
    ]
    .into_iter()
    .collect();
    let plan = plan_publish(&id(), &spellings, true, &existing, &BTreeSet::new());
    let alias = object_name(&id(), &spellings[1], false);
    assert_eq!(
        plan.changes,
        vec![
            DriverChange::Delete(id().0),
            DriverChange::Delete(stale_alias),
            DriverChange::Create(id().0, ours(spec("[ds] a.vmdk", true))),
            DriverChange::Create(alias, ours(spec("[ds]  a.vmdk", true))),
        ],
        "a protection change is a delete and a create; deletes first"
    );
    assert!(plan.conflicts.is_empty());
    // Unpublished: every object holding the ID goes, the driver's too.
    let gone = plan_unpublish(&id(), &existing, &BTreeSet::new());
    assert!(gone.iter().all(|c| matches!(c, DriverChange::Delete(_))));
    assert_eq!(gone.len(), 4);
}

#[test]
fn the_drivers_object_of_another_id_blocks_its_spelling_and_is_left_alone() {
    let spellings = vec!["[ds] a.vmdk".to_owned()];
    let existing: BTreeMap<_, _> = [
        (
            "vol-driver".to_owned(),
            DriverObject {
                spec: CnsVSphereVolumeMigrationSpec {
                    volumepath: "[ds] a.vmdk".into(),
                    volumeid: "vol-driver".into(),
                    protectvolumefromvmdelete: false,
                },
                ours: false,
            },
        ),
        (id().0, ours(spec("[ds] a.vmdk", true))),
    ]
    .into_iter()
    .collect();
    let lost = BTreeSet::from(["[ds] a.vmdk".to_owned()]);
    let plan = plan_publish(&id(), &spellings, true, &existing, &lost);
    assert_eq!(plan.changes, [], "nothing carrying the spelling is touched");
    assert_eq!(
        plan.conflicts,
        [Conflict {
            spelling: "[ds] a.vmdk".into(),
            name: "vol-driver".into(),
            volume_id: "vol-driver".into(),
        }]
    );
}

#[test]
fn a_lost_path_is_created_again_by_the_object_still_carrying_it() {
    let spellings = vec!["[ds] a.vmdk".to_owned()];
    let existing: BTreeMap<_, _> = [(id().0, ours(spec("[ds] a.vmdk", true)))].into();
    let lost = BTreeSet::from(["[ds] a.vmdk".to_owned()]);
    let plan = plan_publish(&id(), &spellings, true, &existing, &lost);
    assert_eq!(
        plan.changes,
        [
            DriverChange::Delete(id().0),
            DriverChange::Create(id().0, ours(spec("[ds] a.vmdk", true))),
        ]
    );
}

#[test]
fn index_finds_ids_by_canonical_path_and_forgets_removed_objects() {
    let index = DriverIndex::default();
    let path = VolumePath::parse("[ds] k/a.vmdk").unwrap();
    index.upsert(
        "driver-1",
        &CnsVSphereVolumeMigrationSpec {
            volumepath: "[/DC0/datastore/ds] k//a.vmdk".into(),
            volumeid: "vol-1".into(),
            protectvolumefromvmdelete: false,
        },
        false,
    );
    index.upsert(
        "bad",
        &CnsVSphereVolumeMigrationSpec {
            volumepath: "not a path".into(),
            volumeid: "vol-x".into(),
            protectvolumefromvmdelete: false,
        },
        false,
    );
    assert_eq!(index.ids_for(&path), vec![VolumeId::from("vol-1")]);
    index.upsert(
        "driver-1",
        &CnsVSphereVolumeMigrationSpec {
            volumepath: "[ds] k/b.vmdk".into(),
            volumeid: "vol-1".into(),
            protectvolumefromvmdelete: false,
        },
        false,
    );
    assert!(index.ids_for(&path).is_empty(), "moved to another path");
    index.remove("driver-1");
    index.remove("bad");
    assert!(index.is_empty());
}

#[test]
fn objects_of_an_id_are_its_primary_and_aliases_only() {
    let index = DriverIndex::default();
    let other = VolumeId::from(format!("{}0", id().0).as_str());
    index.upsert(&id().0, &spec("[ds] a.vmdk", true), false);
    index.upsert(
        &object_name(&id(), "[ds]  a.vmdk", false),
        &spec("[ds]  a.vmdk", true),
        false,
    );
    index.upsert(&other.0, &spec("[ds] b.vmdk", true), false);
    index.upsert(
        &format!("{}-driver-made", id().0),
        &spec("[ds] a.vmdk", true),
        false,
    );
    index.upsert("aaaa", &spec("[ds] c.vmdk", true), false);
    let names: Vec<String> = index.objects_of(&id()).into_keys().collect();
    assert_eq!(
        names,
        vec![id().0, object_name(&id(), "[ds]  a.vmdk", false)],
        "an ID that merely starts with this one, and foreign names, are not its objects"
    );
    let alias = object_name(&id(), "[ds]  a.vmdk", false);
    index.upsert(&alias, &spec("[ds]  a.vmdk", false), false);
    assert_eq!(
        index.objects_of(&id()).len(),
        2,
        "an update is no second alias"
    );
    index.remove(&alias);
    assert_eq!(
        index.objects_of(&id()).into_keys().collect::<Vec<_>>(),
        [id().0]
    );
    assert!(
        index.lock().aliases.is_empty(),
        "an ID whose last alias left has no alias entry"
    );
}

#[test]
fn alias_targets_are_names_less_a_dash_and_eight_hex_digits() {
    for (name, target) in [
        ("abc-0123abcd", Some("abc")),
        ("abc-0123abc", None),
        ("abc_0123abcd", None),
        ("-0123abcd", None),
        ("abc-0123abcg", None),
        ("x-0123abcd-0123abcd", Some("x-0123abcd")),
        ("ünï-0123abcd", Some("ünï")),
        ("ü", None),
    ] {
        assert_eq!(alias_target(name), target, "{name}");
    }
}

#[test]
fn volmigs_own_objects_are_not_the_drivers_ids() {
    let index = DriverIndex::default();
    let path = VolumePath::parse("[ds] a.vmdk").unwrap();
    index.record_written("mine", &spec("[ds] a.vmdk", true), true);
    assert!(
        index.ids_for(&path).is_empty(),
        "volmig's own object is no adoption source"
    );
    index.upsert("theirs", &spec("[ds] a.vmdk", false), false);
    assert_eq!(index.ids_for(&path), vec![id()]);
    // The driver's object deleted and created again by volmig stays the driver's.
    index.remove("theirs");
    index.record_written("theirs", &spec("[ds] a.vmdk", false), false);
    assert_eq!(index.ids_for(&path), vec![id()]);
    index.remove("theirs");
    assert!(index.ids_for(&path).is_empty());
}

#[test]
fn paths_are_interned_and_every_handle_is_given_back() {
    let (x, y) = ("[driver-intern] x.vmdk", "[driver-intern] y.vmdk");
    let path = |raw| VolumePath::parse(raw).unwrap();
    let index = DriverIndex::default();
    index.upsert("primary", &spec(x, true), false);
    index.upsert("alias", &spec("[driver-intern]  x.vmdk", true), false);
    assert!(
        path_intern::is_interned(index.lock().by_path.handle(&path(x)).unwrap()),
        "the index holds the interned path"
    );
    index.upsert("primary", &spec(x, false), false);
    index.upsert("alias", &spec(y, true), false);
    index.remove("primary");
    assert!(
        !path_intern::contains(&path(x)),
        "changed and removed objects release it"
    );
    index.upsert("other", &spec(y, true), false);
    index.retain(&crate::compact_text::NameSet::from_iter([
        CompactText::new("other"),
    ]));
    assert!(path_intern::contains(&path(y)));
    drop(index);
    assert!(
        !path_intern::contains(&path(y)),
        "a dropped index releases it"
    );
}

#[test]
fn a_deleted_object_whose_path_another_carries_leaves_that_path_lost_until_an_add() {
    let index = DriverIndex::default();
    let raw = "[ds] lost/a.vmdk";
    let path = VolumePath::parse(raw).unwrap();
    index.upsert("first", &spec(raw, true), true);
    index.upsert("second", &spec(raw, true), false);
    index.upsert("alias", &spec("[ds] lost//a.vmdk", true), true);
    let objects = index.objects_for(&path, &id());
    assert_eq!(objects.len(), 3, "every spelling of the disk: {objects:?}");
    assert!(index.lost_among(&objects).is_empty());

    index.remove("first");
    let objects = index.objects_for(&path, &id());
    assert_eq!(
        index.lost_among(&objects),
        BTreeSet::from([raw.to_owned()]),
        "the driver's Delete dropped the entry that `second` still carries"
    );
    index.upsert("second", &spec(raw, false), false);
    assert_eq!(index.lost_among(&objects).len(), 1, "a change is no Add");
    index.record_found("found", &spec(raw, false), false);
    assert_eq!(
        index.lost_among(&objects).len(),
        1,
        "an object met by a 409 may have been added before the delete"
    );
    index.remove("found");
    index.upsert("third", &spec(raw, true), true);
    assert!(index.lost_among(&objects).is_empty(), "an Add restores it");

    index.remove("third");
    assert_eq!(index.lost_among(&objects).len(), 1);
    index.remove("second");
    assert!(
        index.lost_among(&objects).is_empty(),
        "nothing carries it: nothing to create again"
    );
}

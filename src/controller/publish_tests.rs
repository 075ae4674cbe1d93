//! Publishing against a model of the driver's Add/Delete-only cache (docs/design.md §8.1):
//! every plan is replayed, and the driver's cache must end with each PV's raw spelling
//! mapped to the right ID, never having been changed in place.

use super::*;
use crate::k8s::driver_cache::CnsVSphereVolumeMigrationSpec;
use crate::k8s::driver_cache::fake::{DriverModel, fake_api};

const S1: &str = "[ds] kubevols/a.vmdk";
const S2: &str = "[/DC0/datastore/ds] kubevols//a.vmdk";

fn vid(id: &str) -> VolumeId {
    VolumeId::from(id)
}

fn path(raw: &str) -> VolumePath {
    VolumePath::parse(raw).unwrap()
}

fn spec(raw: &str, id: &str, protect: bool) -> CnsVSphereVolumeMigrationSpec {
    CnsVSphereVolumeMigrationSpec {
        volumepath: raw.to_owned(),
        volumeid: id.to_owned(),
        protectvolumefromvmdelete: protect,
    }
}

/// PVs spelling the path as `spellings`, oldest first.
fn pvs(spellings: &[&str]) -> PvIndex {
    let pvs = PvIndex::default();
    for (i, raw) in spellings.iter().enumerate() {
        let mut pv: k8s_openapi::api::core::v1::PersistentVolume =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("pv-{i}")},
                "spec": {"vsphereVolume": {"volumePath": raw}},
            }))
            .unwrap();
        pv.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(100 + i as i64).unwrap(),
            ));
        pvs.upsert_pv(&pv);
    }
    pvs
}

/// volmig's index and the model of the API and the driver, kept by the same events.
fn world() -> (Arc<DriverIndex>, DriverModel) {
    let index = Arc::new(DriverIndex::default());
    (Arc::clone(&index), DriverModel::watched_by(index))
}

/// Executes `changes` against the model in order, as the API server would.
fn replay(model: &mut DriverModel, changes: &[DriverChange]) {
    for change in changes {
        match change {
            DriverChange::Create(name, object) => {
                model.create(name, &object.spec, object.ours);
            }
            DriverChange::Delete(name) => {
                model.delete(name);
            }
        }
    }
}

/// The names of the objects carrying raw path `raw`.
fn carrying<'a>(model: &'a DriverModel, raw: &str) -> Vec<&'a str> {
    model
        .objects
        .iter()
        .filter(|(_, (s, _))| s.volumepath == raw)
        .map(|(n, _)| n.as_str())
        .collect()
}

/// The driver saw every change, and its cache maps each of `spellings` to `id` through
/// exactly one object.
fn assert_published(model: &DriverModel, spellings: &[&str], id: &str) {
    assert_eq!(
        model.modified(),
        Vec::<&str>::new(),
        "changed in place: {:?}",
        model.events
    );
    for raw in spellings {
        assert_eq!(
            model.cache.get(*raw).map(String::as_str),
            Some(id),
            "{raw}: {:?}",
            model.events
        );
        assert_eq!(carrying(model, raw).len(), 1, "{raw}: {:?}", model.objects);
    }
}

#[test]
fn an_id_the_driver_maps_to_another_disk_is_neither_published_nor_removed() {
    let (p, q) = (
        VolumePath::parse("[ds] kubevols/p.vmdk").unwrap(),
        VolumePath::parse("[ds] kubevols/q.vmdk").unwrap(),
    );
    let q_id = VolumeId::from("vol-q");
    let driver = DriverIndex::default();
    driver.upsert("vol-q", &spec("[ds] kubevols/q.vmdk", "vol-q", true), false);
    let pvs = PvIndex::default();
    pvs.upsert(
        "pv-p",
        Some(crate::controller::pv_index::PvVolume::Valid(p.clone())),
    );

    // p's status names q's volume (edited by hand): nothing to write for p.
    assert_eq!(foreign_disk(&driver, &p, &q_id), Some(q.clone()));
    assert!(publish_changes(&driver, &pvs, &p, &q_id, true).is_empty());
    // For q itself the ID is its own.
    assert_eq!(foreign_disk(&driver, &q, &q_id), None);
    // An ID of p (another spelling of p's disk) is not foreign.
    let p_id = VolumeId::from("vol-p");
    driver.upsert(
        "vol-p",
        &spec("[ds] kubevols//p.vmdk", "vol-p", false),
        false,
    );
    assert_eq!(foreign_disk(&driver, &p, &p_id), None);
    assert!(!publish_changes(&driver, &pvs, &p, &p_id, true).is_empty());
}

#[test]
fn a_protection_change_is_a_delete_then_a_create_never_an_update() {
    let (index, mut model) = world();
    model.create("vol-x", &spec(S1, "vol-x", false), true);
    let changes = publish_changes(&index, &pvs(&[S1]), &path(S1), &vid("vol-x"), true);
    replay(&mut model, &changes);
    assert_published(&model, &[S1], "vol-x");
    assert_eq!(model.events[1..], ["DELETED vol-x", "ADDED vol-x"]);
    assert_eq!(model.objects["vol-x"], (spec(S1, "vol-x", true), true));
}

#[test]
fn when_the_drivers_id_wins_its_add_is_the_last_event_of_the_path() {
    let (index, mut model) = world();
    // volmig published first; then the driver registered the vmdk anyway.
    model.create("vol-x", &spec(S1, "vol-x", true), true);
    model.create("vol-y", &spec(S1, "vol-y", false), false);
    let changes = publish_changes(&index, &pvs(&[S1]), &path(S1), &vid("vol-y"), true);
    replay(&mut model, &changes);
    assert_published(&model, &[S1], "vol-y");
    assert_eq!(
        model.objects["vol-y"],
        (spec(S1, "vol-y", false), false),
        "the driver's object, re-created as it was (not volmig's)"
    );
    assert_eq!(model.events.last().map(String::as_str), Some("ADDED vol-y"));
}

#[test]
fn unpublishing_an_id_keeps_the_entry_another_object_carries() {
    let (index, mut model) = world();
    model.create("vol-x", &spec(S1, "vol-x", true), true);
    model.create("vol-y", &spec(S1, "vol-y", false), false);
    let changes = unpublish_changes(&index, &path(S1), &vid("vol-x"));
    replay(&mut model, &changes);
    assert!(!model.objects.contains_key("vol-x"));
    assert_published(&model, &[S1], "vol-y");
}

#[test]
fn a_spelling_the_driver_maps_to_the_same_id_gets_nothing_added() {
    let (index, mut model) = world();
    // The driver registered through the younger PV's spelling, under the ID's name.
    model.create("vol-y", &spec(S2, "vol-y", false), false);
    let changes = publish_changes(&index, &pvs(&[S1, S2]), &path(S1), &vid("vol-y"), true);
    replay(&mut model, &changes);
    assert_published(&model, &[S1, S2], "vol-y");
    assert_eq!(carrying(&model, S2), ["vol-y"]);
    assert_eq!(
        model.events[1..].len(),
        1,
        "one Add, for S1: {:?}",
        model.events
    );
}

#[test]
fn a_protected_object_is_never_written_unprotected() {
    let (index, mut model) = world();
    model.create("vol-x", &spec(S1, "vol-x", true), true);
    let changes = publish_changes(&index, &pvs(&[S1]), &path(S1), &vid("vol-x"), false);
    assert_eq!(changes, [], "true stays true");
    // A new spelling of the protected volume is written protected too.
    let changes = publish_changes(&index, &pvs(&[S1, S2]), &path(S1), &vid("vol-x"), false);
    replay(&mut model, &changes);
    assert_published(&model, &[S1, S2], "vol-x");
    assert!(
        model
            .objects
            .values()
            .all(|(s, _)| s.protectvolumefromvmdelete)
    );
}

fn driver_cache(
    api: kube::Api<CnsVSphereVolumeMigration>,
    index: &Arc<DriverIndex>,
) -> DriverCache {
    DriverCache {
        api,
        index: Arc::clone(index),
        publish: true,
    }
}

#[tokio::test]
async fn a_conflict_on_create_neither_patches_nor_makes_the_drivers_object_ours() {
    // The driver's object is there, but volmig's watch has not delivered it yet.
    let mut model = DriverModel::default();
    model.create("vol-x", &spec(S1, "vol-x", false), false);
    let (api, state) = fake_api(model);
    let index = Arc::new(DriverIndex::default());
    let driver = driver_cache(api, &index);
    let changes = publish_changes(&index, &pvs(&[S1]), &path(S1), &vid("vol-x"), true);
    apply(&driver, &vid("vol-x"), &changes).await.unwrap();
    {
        let state = state.lock().unwrap();
        assert_eq!(
            state.in_place_writes(),
            Vec::<&_>::new(),
            "{:?}",
            state.calls
        );
        assert_eq!(
            state.model.objects["vol-x"],
            (spec(S1, "vol-x", false), false)
        );
    }
    assert_eq!(
        index.ids_for(&path(S1)),
        [vid("vol-x")],
        "still the driver's object: an adoption source"
    );
    // Another ID for the path is never a reason to delete the driver's object.
    let changes = publish_changes(&index, &pvs(&[S1]), &path(S1), &vid("vol-z"), true);
    assert!(
        !changes.contains(&DriverChange::Delete("vol-x".into())),
        "{changes:?}"
    );
}

#[tokio::test]
async fn a_conflict_with_the_same_spec_is_success_and_not_ours() {
    let mut model = DriverModel::default();
    model.create("vol-x", &spec(S1, "vol-x", true), false);
    let (api, state) = fake_api(model);
    let index = Arc::new(DriverIndex::default());
    let driver = driver_cache(api, &index);
    let changes = publish_changes(&index, &pvs(&[S1]), &path(S1), &vid("vol-x"), true);
    apply(&driver, &vid("vol-x"), &changes).await.unwrap();
    let state = state.lock().unwrap();
    assert_eq!(
        state.in_place_writes(),
        Vec::<&_>::new(),
        "{:?}",
        state.calls
    );
    assert_eq!(index.ids_for(&path(S1)), [vid("vol-x")]);
}

#[tokio::test]
async fn deletes_are_executed_before_creates() {
    let mut model = DriverModel::default();
    model.create("vol-x", &spec(S1, "vol-x", true), true);
    let (api, state) = fake_api(model);
    let index = Arc::new(DriverIndex::default());
    index.upsert("vol-x", &spec(S1, "vol-x", true), true);
    let driver = driver_cache(api, &index);
    let changes = publish_changes(&index, &pvs(&[S1]), &path(S1), &vid("vol-y"), true);
    apply(&driver, &vid("vol-y"), &changes).await.unwrap();
    let state = state.lock().unwrap();
    assert_eq!(
        state.model.events[1..],
        ["DELETED vol-x", "ADDED vol-y"],
        "{changes:?}"
    );
    assert_eq!(state.model.cache[S1], "vol-y");
}

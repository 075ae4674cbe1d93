//! Plans replayed against a model of the driver's Add/Delete-only cache
//! ([`super::super::fake::DriverModel`]), from states reached by random histories of
//! creates and deletes (so volmig's index saw the same events the driver did).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::k8s::driver_cache::DriverIndex;
use crate::k8s::driver_cache::fake::DriverModel;
use crate::volume_path::VolumePath;

/// Three spellings of one disk.
const RAWS: [&str; 3] = [
    "[ds] k/a.vmdk",
    "[ds] k//a.vmdk",
    "[/DC0/datastore/ds] k/a.vmdk",
];
const IDS: [&str; 3] = ["vol-a", "vol-b", "vol-c"];

#[derive(Debug, Clone)]
enum Op {
    /// An object of `RAWS[raw]` → `IDS[id]`, named after its ID (`name` 0), as volmig
    /// names an alias (1), or after `IDS[name - 2]` (any ID's name, taken by another).
    Create {
        raw: usize,
        id: usize,
        name: usize,
        ours: bool,
        protect: bool,
    },
    /// Deletes the `n`-th object (modulo their number), if any.
    Delete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3usize, 0..3usize, 0..5usize, any::<bool>(), any::<bool>()).prop_map(
            |(raw, id, name, ours, protect)| Op::Create { raw, id, name, ours, protect }
        ),
        1 => (0..16usize).prop_map(Op::Delete),
    ]
}

/// The API's objects and the driver's cache after `history`, and volmig's index of them.
fn world(history: &[Op]) -> (Arc<DriverIndex>, DriverModel) {
    let index = Arc::new(DriverIndex::default());
    let mut model = DriverModel::watched_by(Arc::clone(&index));
    for op in history {
        match *op {
            Op::Create {
                raw,
                id,
                name,
                ours,
                protect,
            } => {
                let vid = VolumeId::from(IDS[id]);
                let name = match name {
                    0 => vid.0.clone(),
                    1 => object_name(&vid, RAWS[raw], false),
                    n => IDS[n - 2].to_owned(),
                };
                let spec = CnsVSphereVolumeMigrationSpec {
                    volumepath: RAWS[raw].to_owned(),
                    volumeid: vid.0,
                    protectvolumefromvmdelete: protect,
                };
                model.create(&name, &spec, ours);
            }
            Op::Delete(n) => {
                let name = model
                    .objects
                    .keys()
                    .nth(n % model.objects.len().max(1))
                    .cloned();
                if let Some(name) = name {
                    model.delete(&name);
                }
            }
        }
    }
    (index, model)
}

/// Executes `changes` in order against the model, as the API server would.
fn replay(model: &mut DriverModel, changes: &[DriverChange]) {
    for change in changes {
        match change {
            DriverChange::Delete(name) => {
                model.delete(name);
            }
            DriverChange::Create(name, object) => {
                model.create(name, &object.spec, object.ours);
            }
        }
    }
}

fn deletes_come_first(changes: &[DriverChange]) -> bool {
    let first_create = changes
        .iter()
        .position(|c| matches!(c, DriverChange::Create(..)))
        .unwrap_or(changes.len());
    changes[first_create..]
        .iter()
        .all(|c| matches!(c, DriverChange::Create(..)))
}

/// The objects carrying `raw`: name → (ID, ours).
fn carriers(model: &DriverModel, raw: &str) -> BTreeMap<String, (String, bool)> {
    carriers_in(&model.objects, raw)
}

/// Every raw path one object alone carries maps to that object's ID in the driver's cache.
fn single_carriers_hit(model: &DriverModel, except: &BTreeSet<&str>) -> Result<(), String> {
    for raw in RAWS.iter().filter(|raw| !except.contains(*raw)) {
        let carriers = carriers(model, raw);
        if let [(name, (id, _))] = carriers.iter().collect::<Vec<_>>()[..]
            && model.cache.get(*raw) != Some(id)
        {
            return Err(format!(
                "{raw}: {name} holds {id}, the driver has {:?}",
                model.cache.get(*raw)
            ));
        }
    }
    Ok(())
}

fn the_drivers_objects(model: &DriverModel) -> BTreeMap<String, CnsVSphereVolumeMigrationSpec> {
    model
        .objects
        .iter()
        .filter(|(_, (_, ours))| !ours)
        .map(|(n, (s, _))| (n.clone(), s.clone()))
        .collect()
}

fn path() -> VolumePath {
    VolumePath::parse(RAWS[0]).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn publishing_ends_with_every_spelling_an_add_of_the_id(
        history in proptest::collection::vec(op(), 0..14),
        target in 0..3usize,
        spellings in proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3).prop_shuffle(),
        protected in any::<bool>(),
    ) {
        let (index, mut model) = world(&history);
        let id = VolumeId::from(IDS[target]);
        let spellings: Vec<String> = spellings.iter().map(|&i| RAWS[i].to_owned()).collect();
        let existing = index.objects_for(&path(), &id);
        let was_protected = existing
            .values()
            .any(|o| o.spec.volumeid == id.0 && o.spec.protectvolumefromvmdelete);
        let before = (model.cache.clone(), model.objects.clone(), model.events.len());
        let drivers_before = the_drivers_objects(&model);
        let plan = plan_publish(&id, &spellings, protected, &existing, &index.lost_among(&existing));
        prop_assert!(deletes_come_first(&plan.changes), "{:?}", plan.changes);
        replay(&mut model, &plan.changes);

        let left: BTreeSet<&str> = plan.conflicts.iter().map(|c| c.spelling.as_str()).collect();
        for raw in &spellings {
            let carriers = carriers(&model, raw);
            if left.contains(raw.as_str()) {
                prop_assert_eq!(model.cache.get(raw), before.0.get(raw), "{} left alone", raw);
                prop_assert_eq!(&carriers, &carriers_in(&before.1, raw));
                continue;
            }
            prop_assert_eq!(model.cache.get(raw), Some(&id.0),
                "{}: {:?}\nplan {:?}\nevents {:?}", raw, model.cache, plan.changes,
                &model.events[before.2..]);
            prop_assert!(carriers.values().all(|(holds, _)| *holds == id.0), "{:?}", carriers);
            let ours = carriers.values().filter(|(_, ours)| *ours).count();
            let drivers = carriers.len() - ours;
            prop_assert!(ours + drivers >= 1);
            prop_assert!(drivers == 0 || ours == 0,
                "the driver's object of the ID suffices: volmig adds nothing {:?}", carriers);
            prop_assert!(ours <= 1, "{:?}", carriers);
            for (name, (_, ours)) in &carriers {
                let protect = model.objects[name].0.protectvolumefromvmdelete;
                if *ours {
                    prop_assert_eq!(protect, protected || was_protected, "{}", name);
                }
            }
        }
        prop_assert_eq!(the_drivers_objects(&model), drivers_before,
            "the driver's objects stay as they were (deleted only to be created again)");
        single_carriers_hit(&model, &left).map_err(TestCaseError::fail)?;

        // volmig's index saw the same events: the next plan has nothing to do.
        let existing = index.objects_for(&path(), &id);
        let again = plan_publish(&id, &spellings, protected, &existing, &index.lost_among(&existing));
        prop_assert_eq!(again.changes, vec![]);
    }

    #[test]
    fn unpublishing_removes_the_id_and_keeps_every_other_entry(
        history in proptest::collection::vec(op(), 0..14),
        target in 0..3usize,
    ) {
        let (index, mut model) = world(&history);
        let id = VolumeId::from(IDS[target]);
        let existing = index.objects_for(&path(), &id);
        let changes = plan_unpublish(&id, &existing, &index.lost_among(&existing));
        prop_assert!(deletes_come_first(&changes), "{:?}", changes);
        let others_before: BTreeMap<_, _> = model
            .objects
            .iter()
            .filter(|(_, (s, _))| s.volumeid != id.0)
            .map(|(n, o)| (n.clone(), o.clone()))
            .collect();
        replay(&mut model, &changes);
        prop_assert!(model.objects.values().all(|(s, _)| s.volumeid != id.0));
        prop_assert_eq!(&model.objects, &others_before, "the others, as they were");
        single_carriers_hit(&model, &BTreeSet::new()).map_err(TestCaseError::fail)?;
    }
}

/// The objects carrying `raw` in `objects`: name → (ID, ours).
fn carriers_in(
    objects: &BTreeMap<String, (CnsVSphereVolumeMigrationSpec, bool)>,
    raw: &str,
) -> BTreeMap<String, (String, bool)> {
    objects
        .iter()
        .filter(|(_, (s, _))| s.volumepath == raw)
        .map(|(n, (s, ours))| (n.clone(), (s.volumeid.clone(), *ours)))
        .collect()
}

#[test]
fn the_three_spellings_are_one_disk() {
    for raw in RAWS {
        assert_eq!(VolumePath::parse(raw).unwrap(), path(), "{raw}");
    }
}

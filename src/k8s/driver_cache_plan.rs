//! What to write into the driver's cache, as pure functions (docs/design.md §8.1).
//!
//! The driver's informer has an AddFunc and a DeleteFunc only: Add stores the raw
//! `spec.volumepath` → `spec.volumeid`, Delete removes the entry of the deleted object's
//! raw path, whichever object still carries it, and a change in place is never seen. So a
//! plan adds and deletes, never changes an object; every delete comes before every create;
//! and a path that lost an object ends with exactly one object carrying it (or the driver's
//! own), created after the last delete of that path, so the driver's last event for it is
//! an Add with the right ID.

use std::collections::{BTreeMap, BTreeSet};

use super::{CnsVSphereVolumeMigrationSpec, object_name};
use crate::backend::VolumeId;

/// One object as a plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverObject {
    /// Its spec.
    pub spec: CnsVSphereVolumeMigrationSpec,
    /// volmig's own POST created it (labelled [`super::MANAGED_BY`] = `volmig`); else the
    /// driver's.
    pub ours: bool,
}

/// One change to the driver's objects; there is no change in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverChange {
    /// Delete the object: the driver drops the entry of its raw path.
    Delete(String),
    /// Create the object, labelled as volmig's when it is ours (a driver's object deleted
    /// only to be created again stays the driver's): the driver adds its raw path → ID.
    Create(String, DriverObject),
}

/// A spelling volmig does not publish, because of an object it leaves as it is: the
/// driver's own object that maps the spelling to another ID (full sync decides which ID
/// the path has, docs/design.md §8.2), or an object that holds every name volmig would
/// give the spelling's object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The raw spelling.
    pub spelling: String,
    /// The object.
    pub name: String,
    /// The ID it holds.
    pub volume_id: String,
}

/// What to change, and what is left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishPlan {
    /// Every delete, then every create.
    pub changes: Vec<DriverChange>,
    /// Spellings left to the driver's objects of another ID.
    pub conflicts: Vec<Conflict>,
}

/// Deletes and creates, kept apart until [`Changes::finish`] puts every delete first.
#[derive(Default)]
struct Changes {
    deletes: BTreeSet<String>,
    creates: BTreeMap<String, DriverObject>,
}

impl Changes {
    /// Deletes and then creates again every object that is kept and carries a raw path in
    /// `touched` (a path that had a delete, or whose entry the driver lost), so that its
    /// Add is the driver's last event for that path.
    fn recreate_carriers(
        &mut self,
        existing: &BTreeMap<String, DriverObject>,
        touched: &BTreeSet<&str>,
    ) {
        for (name, object) in existing {
            let kept = !self.deletes.contains(name) && !self.creates.contains_key(name);
            if kept && touched.contains(object.spec.volumepath.as_str()) {
                self.deletes.insert(name.clone());
                self.creates.insert(name.clone(), object.clone());
            }
        }
    }

    /// The raw paths of the objects deleted so far.
    fn deleted_paths<'a>(&self, existing: &'a BTreeMap<String, DriverObject>) -> BTreeSet<&'a str> {
        self.deletes
            .iter()
            .filter_map(|name| existing.get(name))
            .map(|o| o.spec.volumepath.as_str())
            .collect()
    }

    fn finish(self) -> Vec<DriverChange> {
        let deletes = self.deletes.into_iter().map(DriverChange::Delete);
        let creates = self
            .creates
            .into_iter()
            .map(|(name, object)| DriverChange::Create(name, object));
        deletes.chain(creates).collect()
    }
}

/// What to change so that the driver maps every raw spelling in `spellings` (the path's
/// PVs, oldest first) to `id` (pure).
///
/// `existing` holds every object whose path is this disk (any spelling, any owner) and the
/// objects named after `id`; `lost` the raw paths whose entry the driver has dropped
/// although an object still carries them ([`super::DriverIndex::lost_among`]).
///
/// - A spelling the driver's own object maps to another ID is left alone (a
///   [`Conflict`]), and so is every object carrying it.
/// - A spelling that an object of `id` carries is kept: the driver's objects as they
///   are (volmig adds nothing), else one of volmig's; volmig's other objects for it go.
/// - A spelling nothing carries gets a new object of volmig's: named after the ID for the
///   oldest spelling, `<ID>-<hash>` for the others, or when that name is taken.
/// - volmig's objects that map a spelling to another ID, or a spelling no PV uses, go.
/// - `protectvolumefromvmdelete` is true when `protected`, or when an object of `id`
///   already says so; volmig's object that says false then is replaced.
/// - Every kept object whose raw path had a delete, or is `lost`, is deleted and created
///   again as it was.
///
/// No spelling at all plans nothing: the objects go with the registration only
/// ([`plan_unpublish`]).
pub fn plan_publish(
    id: &VolumeId,
    spellings: &[String],
    protected: bool,
    existing: &BTreeMap<String, DriverObject>,
    lost: &BTreeSet<String>,
) -> PublishPlan {
    let mut needed: Vec<&str> = Vec::with_capacity(spellings.len());
    for raw in spellings {
        if !needed.contains(&raw.as_str()) {
            needed.push(raw);
        }
    }
    let Some(oldest) = needed.first().copied() else {
        return PublishPlan::default();
    };
    let mut conflicts: Vec<Conflict> = existing
        .iter()
        .filter(|(_, o)| !o.ours && o.spec.volumeid != id.0)
        .filter(|(_, o)| needed.contains(&o.spec.volumepath.as_str()))
        .map(|(name, o)| Conflict {
            spelling: o.spec.volumepath.clone(),
            name: name.clone(),
            volume_id: o.spec.volumeid.clone(),
        })
        .collect();
    conflicts.sort_by(|a, b| (&a.spelling, &a.name).cmp(&(&b.spelling, &b.name)));
    let blocked: BTreeSet<&str> = existing
        .values()
        .filter(|o| !o.ours && o.spec.volumeid != id.0)
        .map(|o| o.spec.volumepath.as_str())
        .filter(|raw| needed.contains(raw))
        .collect();
    let protect = protected
        || existing
            .values()
            .any(|o| o.spec.volumeid == id.0 && o.spec.protectvolumefromvmdelete);
    let wanted = |raw: &str| DriverObject {
        spec: CnsVSphereVolumeMigrationSpec {
            volumepath: raw.to_owned(),
            volumeid: id.0.clone(),
            protectvolumefromvmdelete: protect,
        },
        ours: true,
    };

    let mut out = Changes::default();
    // volmig's objects of a spelling no PV uses: gone.
    for (name, object) in existing {
        if object.ours && !needed.contains(&object.spec.volumepath.as_str()) {
            out.deletes.insert(name.clone());
        }
    }
    let mut missing: Vec<&str> = Vec::new();
    for &raw in needed.iter().filter(|raw| !blocked.contains(*raw)) {
        let carriers = existing.iter().filter(|(_, o)| o.spec.volumepath == raw);
        let (mut drivers, mut ours) = (0, Vec::new());
        for (name, object) in carriers {
            match (object.ours, object.spec.volumeid == id.0) {
                (false, _) => drivers += 1,
                (true, true) => ours.push((name, object)),
                (true, false) => {
                    out.deletes.insert(name.clone());
                }
            }
        }
        if drivers > 0 {
            // The driver's own object says it already: volmig adds nothing, and its own
            // objects of this spelling go.
            out.deletes
                .extend(ours.into_iter().map(|(name, _)| name.clone()));
            continue;
        }
        // One of volmig's objects stays: the one named as volmig would name it, else the
        // first by name.
        let preferred = object_name(id, raw, raw == oldest);
        ours.sort_by_key(|(name, _)| (**name != preferred, (*name).clone()));
        let mut ours = ours.into_iter();
        let Some((name, object)) = ours.next() else {
            missing.push(raw);
            continue;
        };
        out.deletes.extend(ours.map(|(name, _)| name.clone()));
        if protect && !object.spec.protectvolumefromvmdelete {
            out.deletes.insert(name.clone());
            out.creates.insert(name.clone(), wanted(raw));
        }
    }
    for raw in missing {
        let free = |name: &String| {
            (!existing.contains_key(name) || out.deletes.contains(name))
                && !out.creates.contains_key(name)
        };
        let name = [
            object_name(id, raw, raw == oldest),
            object_name(id, raw, false),
        ]
        .into_iter()
        .find(free);
        match name {
            Some(name) => {
                out.creates.insert(name, wanted(raw));
            }
            None => {
                let name = object_name(id, raw, false);
                let volume_id = existing
                    .get(&name)
                    .map(|o| o.spec.volumeid.clone())
                    .unwrap_or_default();
                conflicts.push(Conflict {
                    spelling: raw.to_owned(),
                    name,
                    volume_id,
                });
            }
        }
    }
    let mut touched = out.deleted_paths(existing);
    touched.extend(lost.iter().map(String::as_str));
    touched.retain(|raw| !blocked.contains(raw));
    out.recreate_carriers(existing, &touched);
    PublishPlan {
        changes: out.finish(),
        conflicts,
    }
}

/// What to change when the registration of `id` is gone (pure): every object holding `id`
/// goes, whoever created it, and every other object that carries one of their raw paths
/// (or a `lost` one) is deleted and created again, so the driver keeps its entry.
pub fn plan_unpublish(
    id: &VolumeId,
    existing: &BTreeMap<String, DriverObject>,
    lost: &BTreeSet<String>,
) -> Vec<DriverChange> {
    let mut out = Changes::default();
    out.deletes.extend(
        existing
            .iter()
            .filter(|(_, o)| o.spec.volumeid == id.0)
            .map(|(name, _)| name.clone()),
    );
    let mut touched = out.deleted_paths(existing);
    touched.extend(lost.iter().map(String::as_str));
    out.recreate_carriers(existing, &touched);
    out.finish()
}

#[cfg(test)]
#[path = "driver_cache_plan_tests.rs"]
mod tests;

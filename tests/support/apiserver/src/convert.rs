//! Conversion between the stored form of an object and the form served for a group-version:
//! `apiVersion` rewriting for multi-version CRDs, and `events.k8s.io/v1` ⇄ core `v1` Events.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::registry::{Conversion, ResourceDef};

/// (events.k8s.io/v1 name, core/v1 name) of fields that differ.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(obj: &mut Map<String, Value>, to_core: bool) {
    for (v1, core) in EVENT_FIELDS {
        let (from, to) = if to_core { (v1, core) } else { (core, v1) };
        if let Some(v) = obj.remove(*from) {
            obj.insert((*to).to_string(), v);
        }
    }
}

/// The stored `apiVersion` of a resource.
pub fn storage_api_version(def: &ResourceDef) -> String {
    match def.conversion {
        Conversion::EventsV1 => "v1".to_string(),
        Conversion::None => def.api_version(&def.storage_version),
    }
}

/// Converts an incoming object (already checked to be of `def`) to its stored form.
pub fn to_storage(def: &ResourceDef, mut obj: Value) -> Value {
    if let Value::Object(m) = &mut obj {
        if def.conversion == Conversion::EventsV1 {
            rename(m, true);
        }
        m.insert("apiVersion".into(), Value::String(storage_api_version(def)));
        m.insert("kind".into(), Value::String(def.kind.clone()));
    }
    obj
}

/// The served form of a stored object for `version` of `def` (borrowed when identical).
pub fn to_served<'a>(def: &ResourceDef, version: &str, obj: &'a Value) -> Cow<'a, Value> {
    let want = def.api_version(version);
    let have = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if have == want {
        return Cow::Borrowed(obj);
    }
    let mut out = obj.clone();
    if let Value::Object(m) = &mut out {
        if def.conversion == Conversion::EventsV1 {
            rename(m, false);
        }
        m.insert("apiVersion".into(), Value::String(want));
    }
    Cow::Owned(out)
}

/// Field selector paths are written against the served form; map them to the stored one.
pub fn field_selector_renames(def: &ResourceDef) -> &'static [(&'static str, &'static str)] {
    match def.conversion {
        Conversion::EventsV1 => EVENT_FIELDS,
        Conversion::None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn events_round_trip_between_groups() {
        let r = Registry::with_builtins();
        let ev = r
            .lookup("events.k8s.io", "v1", "events")
            .expect("events.k8s.io");
        let incoming = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e"}, "regarding": {"kind": "PersistentVolume", "name": "pv1"},
            "note": "bad path", "reason": "InvalidPath", "type": "Warning"});
        let stored = to_storage(&ev, incoming.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "pv1");
        assert_eq!(stored["message"], "bad path");
        let back = to_served(&ev, "v1", &stored);
        assert_eq!(*back, incoming);
        let core = r.lookup("", "v1", "events").expect("core");
        assert!(matches!(to_served(&core, "v1", &stored), Cow::Borrowed(_)));
    }
}

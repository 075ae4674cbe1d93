//! JSON schemas of the built-in kinds, generated once from k8s-openapi (`schemars` feature).

use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::registry::{add_builtin_schemas, builtin_defs};

/// Schema name of `ObjectMeta`.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

const JSON_ANY: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON";

/// All built-in schema definitions, keyed by name (`io.k8s.api.core.v1.PersistentVolume`),
/// with `x-kubernetes-group-version-kind` on each served kind.
pub fn definitions() -> &'static Map<String, Value> {
    static DEFS: OnceLock<Map<String, Value>> = OnceLock::new();
    DEFS.get_or_init(|| {
        let mut g = schemars::generate::SchemaSettings::openapi3().into_generator();
        add_builtin_schemas(&mut g);
        let mut defs = g.take_definitions(true);
        // k8s-openapi types `JSON` (any JSON value: CRD defaults, enums, examples) as an object.
        if let Some(Value::Object(s)) = defs.get_mut(JSON_ANY) {
            s.remove("type");
            s.insert(
                "x-kubernetes-preserve-unknown-fields".into(),
                Value::Bool(true),
            );
        }
        for d in builtin_defs() {
            let Some(b) = &d.builtin else { continue };
            if let Some(Value::Object(s)) = defs.get_mut(&b.schema_name) {
                s.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": d.group, "version": d.storage_version, "kind": d.kind}]),
                );
            }
        }
        defs
    })
}

/// The `$ref` to a named definition.
pub fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The names of every definition reachable from `root` (itself included).
pub fn closure(root: &str) -> Vec<String> {
    let defs = definitions();
    let mut seen: Vec<String> = Vec::new();
    let mut stack = vec![root.to_string()];
    while let Some(name) = stack.pop() {
        if seen.contains(&name) {
            continue;
        }
        let Some(schema) = defs.get(&name) else {
            continue;
        };
        collect_refs(schema, &mut stack);
        seen.push(name);
    }
    seen
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.push(r.rsplit('/').next().unwrap_or(r).to_string());
            }
            for x in m.values() {
                collect_refs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistent_volume_schema_knows_vsphere_volume() {
        let defs = definitions();
        let spec = &defs["io.k8s.api.core.v1.PersistentVolumeSpec"];
        assert!(spec["properties"]["vsphereVolume"].is_object());
        let pv = &defs["io.k8s.api.core.v1.PersistentVolume"];
        assert_eq!(
            pv["x-kubernetes-group-version-kind"][0]["kind"],
            "PersistentVolume"
        );
        let names = closure("io.k8s.api.core.v1.PersistentVolume");
        assert!(names.iter().any(|n| n == OBJECT_META));
        assert!(
            names
                .iter()
                .any(|n| n == "io.k8s.api.core.v1.VsphereVirtualDiskVolumeSource")
        );
    }
}

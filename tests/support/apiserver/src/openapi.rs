//! OpenAPI v3: `/openapi/v3` (the index) and one document per group-version, with PATCH
//! operations carrying `fieldValidation`/`dryRun` (what kubectl checks before a server-side
//! validated apply) and `components.schemas` for `kubectl explain`.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceDef};
use crate::schema::builtin;

fn param(name: &str, location: &str) -> Value {
    json!({"name": name, "in": location, "schema": {"type": "string", "uniqueItems": true}})
}

fn gvk(def: &ResourceDef, version: &str) -> Value {
    json!({"group": def.group, "version": version, "kind": def.kind})
}

/// The schema name of a custom resource kind (`io.volmig.v1alpha1.VolumeMigration`).
pub fn crd_schema_name(def: &ResourceDef, version: &str) -> String {
    let rev: Vec<&str> = def.group.split('.').rev().collect();
    format!("{}.{version}.{}", rev.join("."), def.kind)
}

fn schema_name(def: &ResourceDef, version: &str) -> String {
    match &def.builtin {
        Some(b) => b.schema_name.clone(),
        None => crd_schema_name(def, version),
    }
}

fn op(
    def: &ResourceDef,
    version: &str,
    action: &str,
    id: &str,
    params: &[&str],
    body: bool,
) -> Value {
    let schema = builtin::reference(&schema_name(def, version));
    let mut parameters: Vec<Value> = params.iter().map(|p| param(p, "query")).collect();
    parameters.push(param("pretty", "query"));
    let mut o = json!({
        "operationId": id,
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": schema}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(def, version),
    });
    if body && let Some(m) = o.as_object_mut() {
        m.insert(
            "requestBody".into(),
            json!({"content": {"application/json": {"schema": schema}}, "required": true}),
        );
    }
    o
}

fn paths_for(def: &ResourceDef, version: &str, paths: &mut Map<String, Value>) {
    let prefix = if def.group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{}/{version}", def.group)
    };
    let coll = if def.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", def.plural)
    } else {
        format!("{prefix}/{}", def.plural)
    };
    let id = format!("{}{}", def.kind, version);
    let write = ["dryRun", "fieldManager", "fieldValidation"];
    let patch = ["dryRun", "fieldManager", "fieldValidation", "force"];
    let mut item_params =
        vec![json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}})];
    if def.namespaced {
        item_params.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}}));
    }
    paths.insert(
        coll.clone(),
        json!({
            "get": op(def, version, "list", &format!("list{id}"), &["labelSelector", "fieldSelector", "limit", "continue", "watch"], false),
            "post": op(def, version, "post", &format!("create{id}"), &write, true),
            "delete": op(def, version, "deletecollection", &format!("deleteCollection{id}"), &["dryRun", "labelSelector"], false),
            "parameters": if def.namespaced { json!([item_params[1]]) } else { json!([]) },
        }),
    );
    paths.insert(
        format!("{coll}/{{name}}"),
        json!({
            "get": op(def, version, "get", &format!("read{id}"), &[], false),
            "put": op(def, version, "put", &format!("replace{id}"), &write, true),
            "patch": op(def, version, "patch", &format!("patch{id}"), &patch, true),
            "delete": op(def, version, "delete", &format!("delete{id}"), &["dryRun"], false),
            "parameters": item_params,
        }),
    );
    if def.has_status(version) {
        paths.insert(
            format!("{coll}/{{name}}/status"),
            json!({
                "get": op(def, version, "get", &format!("read{id}Status"), &[], false),
                "put": op(def, version, "put", &format!("replace{id}Status"), &write, true),
                "patch": op(def, version, "patch", &format!("patch{id}Status"), &patch, true),
                "parameters": item_params,
            }),
        );
    }
}

fn crd_schema(def: &ResourceDef, version: &str) -> Value {
    let mut s = def
        .version(version)
        .and_then(|v| v.schema.as_deref().cloned())
        .unwrap_or_else(|| json!({"type": "object"}));
    if let Some(o) = s.as_object_mut() {
        let props = o.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values."}));
            p.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to."}));
            p.insert("metadata".into(), json!({
                "allOf": [builtin::reference(builtin::OBJECT_META)],
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            }));
        }
        o.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([gvk(def, version)]),
        );
    }
    s
}

/// The OpenAPI v3 document of one group-version, if served.
pub fn group_version_doc(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<_> = reg.in_group_version(group, version).collect();
    if defs.is_empty() {
        return None;
    }
    let all = builtin::definitions();
    let mut paths = Map::new();
    let mut schemas: BTreeMap<String, Value> = BTreeMap::new();
    for def in defs {
        paths_for(def, version, &mut paths);
        let root = match &def.builtin {
            Some(b) => b.schema_name.clone(),
            None => {
                schemas.insert(crd_schema_name(def, version), crd_schema(def, version));
                builtin::OBJECT_META.to_string()
            }
        };
        for name in builtin::closure(&root) {
            if let Some(s) = all.get(&name) {
                schemas.insert(name, s.clone());
            }
        }
    }
    let title = if group.is_empty() {
        "Kubernetes".to_string()
    } else {
        format!("Kubernetes {group}")
    };
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": title, "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn doc_hash(doc: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}{:016X}", h.finish(), h.finish().rotate_left(17))
}

/// The `/openapi/v3` index, with a content hash per group-version.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let mut gvs: Vec<(String, String)> = vec![(String::new(), "v1".to_string())];
    for (g, vs) in reg.groups() {
        for v in vs {
            gvs.push((g.clone(), v));
        }
    }
    for (g, v) in gvs {
        let Some(doc) = group_version_doc(reg, &g, &v) else {
            continue;
        };
        let key = if g.is_empty() {
            format!("api/{v}")
        } else {
            format!("apis/{g}/{v}")
        };
        let url = format!("/openapi/v3/{key}?hash={}", doc_hash(&doc));
        paths.insert(key, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_document_has_patch_with_field_validation() {
        let reg = Registry::with_builtins();
        let doc = group_version_doc(&reg, "", "v1").expect("core");
        let patch = &doc["paths"]["/api/v1/persistentvolumes/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "PersistentVolume"
        );
        let params = patch["parameters"].as_array().expect("params");
        assert!(
            params
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.PersistentVolume"].is_object());
        let idx = index(&reg);
        assert!(
            idx["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.contains("?hash="))
        );
        assert!(idx["paths"]["apis/apps/v1"].is_object());
    }
}

//! Legacy discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<g>`,
//! `/apis/<g>/<v>`.

use serde_json::{Value, json};

use crate::registry::{Registry, ResourceDef};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/version` for a server claiming to be Kubernetes `major.minor`.
pub fn version(major: u32, minor: u32) -> Value {
    json!({
        "major": major.to_string(),
        "minor": minor.to_string(),
        "emulationMajor": major.to_string(),
        "emulationMinor": minor.to_string(),
        "gitVersion": format!("v{major}.{minor}.0"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or_else(|| json!({}));
    json!({"name": name, "versions": vs, "preferredVersion": preferred})
}

/// `/apis`.
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if the group exists.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let groups = reg.groups();
    let vs = groups.get(group)?;
    let mut doc = group_doc(group, vs);
    if let Some(o) = doc.as_object_mut() {
        o.insert("kind".into(), json!("APIGroup"));
        o.insert("apiVersion".into(), json!("v1"));
    }
    Some(doc)
}

fn storage_hash(def: &ResourceDef) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&def.group, &def.plural, &def.storage_version).hash(&mut h);
    let bytes = h.finish().to_be_bytes();
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes[..8])
}

fn resource_entries(def: &ResourceDef, version: &str) -> Vec<Value> {
    let mut main = json!({
        "name": def.plural,
        "singularName": def.singular,
        "namespaced": def.namespaced,
        "kind": def.kind,
        "verbs": VERBS,
        "storageVersionHash": storage_hash(def),
    });
    if let Some(o) = main.as_object_mut() {
        if !def.short_names.is_empty() {
            o.insert("shortNames".into(), json!(def.short_names));
        }
        if !def.categories.is_empty() {
            o.insert("categories".into(), json!(def.categories));
        }
    }
    let mut out = vec![main];
    if def.has_status(version) {
        out.push(json!({
            "name": format!("{}/status", def.plural),
            "singularName": "",
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

/// `/api/v1` or `/apis/<group>/<version>`, if served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<_> = reg.in_group_version(group, version).collect();
    if defs.is_empty() {
        return None;
    }
    let resources: Vec<Value> = defs
        .iter()
        .flat_map(|d| resource_entries(d, version))
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_lists_persistent_volumes_with_status() {
        let reg = Registry::with_builtins();
        let doc = resource_list(&reg, "", "v1").expect("core");
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(names.contains(&"persistentvolumes"));
        assert!(names.contains(&"persistentvolumes/status"));
        assert!(resource_list(&reg, "nope.io", "v1").is_none());
        let groups = api_group_list(&reg);
        assert!(
            groups["groups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|x| x["name"] == "apps"))
        );
    }
}

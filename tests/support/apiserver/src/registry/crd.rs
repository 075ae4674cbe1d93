//! CustomResourceDefinitions: validation and the resource they define.

use std::sync::Arc;

use serde_json::Value;

use super::{Conversion, PrinterColumn, ResourceDef, StorageKey, VersionDef, version_priority};
use crate::error::FieldCause;

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: &Value, ptr: &str) -> Vec<String> {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn is_dns_label(x: &str) -> bool {
    !x.is_empty()
        && x.len() <= 63
        && x.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !x.starts_with('-')
        && !x.ends_with('-')
}

/// Validates the parts of a CRD that the server relies on; returns the causes of a 422.
pub fn validate_crd(crd: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    let name = s(crd, "/metadata/name");
    if group.is_empty() {
        causes.push(FieldCause::required("spec.group"));
    } else if !group.contains('.') {
        causes.push(FieldCause::invalid(
            "spec.group",
            &Value::String(group.into()),
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        causes.push(FieldCause::required("spec.names.plural"));
    } else if !is_dns_label(plural) {
        causes.push(FieldCause::invalid(
            "spec.names.plural",
            &Value::String(plural.into()),
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'",
        ));
    }
    if s(crd, "/spec/names/kind").is_empty() {
        causes.push(FieldCause::required("spec.names.kind"));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(FieldCause::invalid(
            "metadata.name",
            &Value::String(name.into()),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = s(crd, "/spec/scope");
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(FieldCause::unsupported(
            "spec.scope",
            &Value::String(scope.into()),
            &[
                Value::String("Cluster".into()),
                Value::String("Namespaced".into()),
            ],
        ));
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    match versions {
        None => causes.push(FieldCause::required("spec.versions")),
        Some(vs) if vs.is_empty() => causes.push(FieldCause::required("spec.versions")),
        Some(vs) => {
            let storage = vs
                .iter()
                .filter(|v| v["storage"] == Value::Bool(true))
                .count();
            if storage != 1 {
                causes.push(FieldCause::invalid(
                    "spec.versions",
                    &Value::Array(vs.clone()),
                    "must have exactly one version marked as storage version",
                ));
            }
            for (i, v) in vs.iter().enumerate() {
                if s(v, "/name").is_empty() {
                    causes.push(FieldCause::required(&format!("spec.versions[{i}].name")));
                }
                if v.pointer("/schema/openAPIV3Schema").is_none() {
                    causes.push(FieldCause::required(&format!(
                        "spec.versions[{i}].schema.openAPIV3Schema"
                    )));
                }
            }
        }
    }
    causes
}

/// The resource served for an (already validated) CRD; `None` when it serves no version.
pub fn defs_from_crd(crd: &Value) -> Option<ResourceDef> {
    let group = s(crd, "/spec/group").to_string();
    let plural = s(crd, "/spec/names/plural").to_string();
    let kind = s(crd, "/spec/names/kind").to_string();
    let mut versions: Vec<VersionDef> = Vec::new();
    let mut storage_version = String::new();
    for v in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = s(v, "/name").to_string();
        if v["storage"] == Value::Bool(true) {
            storage_version.clone_from(&name);
        }
        if v["served"] == Value::Bool(false) {
            continue;
        }
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| PrinterColumn {
                name: s(c, "/name").to_string(),
                type_: s(c, "/type").to_string(),
                format: s(c, "/format").to_string(),
                description: s(c, "/description").to_string(),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path: s(c, "/jsonPath").to_string(),
            })
            .collect();
        versions.push(VersionDef {
            name,
            schema: v.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
            columns,
            status: v.pointer("/subresources/status").is_some(),
        });
    }
    if versions.is_empty() {
        return None;
    }
    versions.sort_by(|a, b| version_priority(&a.name, &b.name));
    let singular = match s(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        x => x.to_string(),
    };
    let list_kind = match s(crd, "/spec/names/listKind") {
        "" => format!("{kind}List"),
        x => x.to_string(),
    };
    Some(ResourceDef {
        storage: StorageKey {
            group: group.clone(),
            resource: plural.clone(),
        },
        group,
        versions,
        storage_version,
        plural,
        singular,
        kind,
        list_kind,
        namespaced: s(crd, "/spec/scope") == "Namespaced",
        short_names: strings(crd, "/spec/names/shortNames"),
        categories: strings(crd, "/spec/names/categories"),
        conversion: Conversion::None,
        builtin: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "metadata": {"name": "things.example.io"},
            "spec": {
                "group": "example.io",
                "scope": "Cluster",
                "names": {"plural": "things", "kind": "Thing", "shortNames": ["th"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "schema": {"openAPIV3Schema": {"type": "object"}}}
                ]
            }
        })
    }

    #[test]
    fn a_valid_crd_defines_its_resource() {
        assert!(validate_crd(&crd()).is_empty());
        let d = defs_from_crd(&crd()).expect("served");
        assert_eq!(d.versions[0].name, "v1");
        assert!(d.has_status("v1"));
        assert!(!d.has_status("v1alpha1"));
        assert_eq!(d.short_names, vec!["th"]);
        assert_eq!(d.list_kind, "ThingList");
        assert!(!d.namespaced);
    }

    #[test]
    fn a_misnamed_crd_is_rejected() {
        let mut c = crd();
        c["metadata"]["name"] = json!("other.example.io");
        let causes = validate_crd(&c);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
    }
}

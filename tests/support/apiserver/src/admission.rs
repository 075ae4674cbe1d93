//! What happens to an object between the request body and storage: per-kind defaulting
//! ("PrepareForCreate"), schema validation with pruning, and name validation.

use base64::Engine;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, FieldCause};
use crate::meta;
use crate::registry::{ResourceDef, validate_crd};
use crate::schema::{self, Mode, builtin};

/// `fieldValidation` of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Unknown fields are an error.
    Strict,
    /// Unknown fields are dropped with a warning (the default).
    Warn,
    /// Unknown fields are dropped silently.
    Ignore,
}

impl FieldValidation {
    /// Parses the query parameter.
    pub fn parse(s: Option<&str>) -> ApiResult<Self> {
        match s {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation {other:?} is invalid: must be one of Ignore, Warn, or Strict"
            ))),
        }
    }
}

fn kind_of(def: &ResourceDef) -> (&str, &str) {
    (def.kind.as_str(), def.group.as_str())
}

/// Defaults applied when an object is created (status reset, per-kind defaults).
pub fn prepare_create(def: &ResourceDef, version: &str, obj: &mut Value) {
    let has_status = def.has_status(version);
    if let Some(o) = obj.as_object_mut()
        && has_status
    {
        o.remove("status");
    }
    let name = meta::name(obj).to_string();
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "persistentvolumes") => {
            default_field(
                obj,
                "/spec",
                "persistentVolumeReclaimPolicy",
                json!("Retain"),
            );
            default_field(obj, "/spec", "volumeMode", json!("Filesystem"));
            obj["status"] = json!({"phase": "Pending"});
        }
        // No scheduler or kubelet here: a pod stays Pending.
        ("", "pods") => obj["status"] = json!({"phase": "Pending"}),
        ("", "persistentvolumeclaims") => {
            default_field(obj, "/spec", "volumeMode", json!("Filesystem"));
            obj["status"] = json!({"phase": "Pending"});
        }
        ("", "namespaces") => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
            let labels = meta::meta_mut(obj)
                .entry("labels")
                .or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_status(obj),
        _ => {}
    }
    prepare_any(def, obj);
}

/// Defaults applied on every write (create and update).
pub fn prepare_any(def: &ResourceDef, obj: &mut Value) {
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "secrets") => {
            if let Some(Value::Object(sd)) =
                obj.as_object_mut().and_then(|o| o.remove("stringData"))
            {
                let data = obj
                    .as_object_mut()
                    .map(|o| o.entry("data").or_insert_with(|| json!({})));
                if let Some(Value::Object(d)) = data {
                    for (k, v) in sd {
                        let s = v.as_str().unwrap_or_default().as_bytes().to_vec();
                        let enc = base64::engine::general_purpose::STANDARD.encode(s);
                        d.insert(k, Value::String(enc));
                    }
                }
            }
            if obj
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                obj["type"] = json!("Opaque");
            }
        }
        ("", "services") => default_field(obj, "/spec", "type", json!("ClusterIP")),
        ("apps", "deployments") => default_field(obj, "/spec", "replicas", json!(1)),
        _ => {}
    }
}

/// Recomputes a CRD's status (established, names accepted, stored versions).
pub fn crd_status(obj: &mut Value) {
    let now = meta::now_rfc3339();
    let names = obj
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let storage: Vec<Value> = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == Value::Bool(true))
        .map(|v| v["name"].clone())
        .collect();
    let since = |t: &str| {
        obj.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| Value::String(now.clone()))
    };
    let (accepted, established) = (since("NamesAccepted"), since("Established"));
    obj["status"] = json!({
        "acceptedNames": names,
        "storedVersions": storage,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": accepted},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": established}
        ]
    });
}

fn default_field(obj: &mut Value, parent: &str, field: &str, value: Value) {
    if let Some(Value::Object(p)) = obj.pointer_mut(parent) {
        p.entry(field.to_string()).or_insert(value);
    }
}

fn name_causes(def: &ResourceDef, name: &str) -> Vec<FieldCause> {
    let ok = match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => meta::is_dns_label(name),
        ("rbac.authorization.k8s.io", _) => meta::is_path_segment_name(name),
        ("", "events") | ("events.k8s.io", _) => {
            meta::is_dns_subdomain(name) || meta::is_path_segment_name(name)
        }
        _ => meta::is_dns_subdomain(name),
    };
    if ok {
        return Vec::new();
    }
    let detail = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    vec![FieldCause::invalid(
        "metadata.name",
        &Value::String(name.to_string()),
        detail,
    )]
}

/// Validates and prunes `obj` (in served form); returns warnings for pruned fields.
pub fn admit(
    def: &ResourceDef,
    version: &str,
    obj: &mut Value,
    old: Option<&Value>,
    fv: FieldValidation,
) -> ApiResult<Vec<String>> {
    let name = meta::name(obj).to_string();
    let defs = builtin::definitions();
    let mut outcome = match &def.builtin {
        Some(b) => {
            let root = builtin::reference(&b.schema_name);
            schema::validate(
                Mode {
                    defs,
                    custom: false,
                },
                &root,
                obj,
                old,
                &[],
            )
        }
        None => {
            let root = def.version(version).and_then(|v| v.schema.clone());
            let mut out = match root {
                Some(s) => {
                    schema::validate(Mode { defs, custom: true }, &s, obj, old, &["metadata"])
                }
                None => schema::Outcome::default(),
            };
            if let Some(m) = obj.get_mut("metadata") {
                let meta_schema = builtin::reference(builtin::OBJECT_META);
                let mo = schema::validate(
                    Mode {
                        defs,
                        custom: false,
                    },
                    &meta_schema,
                    m,
                    None,
                    &[],
                );
                out.causes.extend(mo.causes);
                out.unknown
                    .extend(mo.unknown.into_iter().map(|u| format!("metadata.{u}")));
            }
            out
        }
    };
    if fv == FieldValidation::Strict && !outcome.unknown.is_empty() {
        let list: Vec<String> = outcome
            .unknown
            .iter()
            .map(|u| format!("unknown field {u:?}"))
            .collect();
        return Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            list.join(", ")
        )));
    }
    outcome.causes.extend(name_causes(def, &name));
    if def.group == "apiextensions.k8s.io" && def.plural == "customresourcedefinitions" {
        outcome.causes.extend(validate_crd(obj));
    }
    if !outcome.causes.is_empty() {
        let (kind, group) = kind_of(def);
        return Err(ApiError::invalid(kind, group, &name, outcome.causes));
    }
    Ok(match fv {
        FieldValidation::Warn => outcome
            .unknown
            .iter()
            .map(|u| format!("unknown field {u:?}"))
            .collect(),
        _ => Vec::new(),
    })
}

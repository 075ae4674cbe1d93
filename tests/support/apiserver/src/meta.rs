//! Helpers for `metadata` of objects held as JSON values.

use serde_json::{Map, Value};

/// `metadata` as a mutable map (created when absent or not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(o) = obj else {
        unreachable!("just made an object")
    };
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    match m {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// A string field of `metadata`, "" when absent.
pub fn get_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Sets a string field of `metadata`.
pub fn set_str(obj: &mut Value, field: &str, value: &str) {
    meta_mut(obj).insert(field.to_string(), Value::String(value.to_string()));
}

/// `metadata.name`.
pub fn name(obj: &Value) -> &str {
    get_str(obj, "name")
}

/// `metadata.namespace`.
pub fn namespace(obj: &Value) -> &str {
    get_str(obj, "namespace")
}

/// `metadata.resourceVersion`.
pub fn resource_version(obj: &Value) -> &str {
    get_str(obj, "resourceVersion")
}

/// `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    !get_str(obj, "deletionTimestamp").is_empty()
}

/// The current time as kube-apiserver writes timestamps (RFC 3339, seconds, UTC).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The current time with microseconds (`MicroTime`, used by Events and Leases).
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Whether `s` is a DNS-1123 subdomain (object names of most kinds).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `s` is a DNS-1123 label (namespace names).
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// Whether `s` is a valid path segment name (RBAC objects allow `:` and more).
pub fn is_path_segment_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('%')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert!(is_dns_subdomain("a-b.c1"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(is_dns_label("volmig"));
        assert!(!is_dns_label("a.b"));
        assert!(is_path_segment_name("system:controller"));
    }

    #[test]
    fn metadata_access() {
        let mut o = json!({"metadata": {"name": "x", "finalizers": ["a"]}});
        set_str(&mut o, "namespace", "ns");
        assert_eq!(namespace(&o), "ns");
        assert_eq!(finalizers(&o), vec!["a".to_string()]);
        assert!(!is_deleting(&o));
        assert!(now_rfc3339().ends_with('Z'));
    }
}

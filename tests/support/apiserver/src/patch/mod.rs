//! Patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch
//! (merge with the common list merge keys and `$` directives) and server-side apply (merge).

mod json_patch;
mod strategic;

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

pub use json_patch::apply_json_patch;
pub use strategic::strategic_merge;

/// The patch types kube-apiserver accepts, by Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type for a request Content-Type.
    pub fn from_content_type(ct: &str) -> ApiResult<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                if base.ends_with("cbor") {
                    Err(ApiError::unsupported_media_type(ct))
                } else {
                    Ok(PatchType::Apply)
                }
            }
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// RFC 7386 JSON merge patch, applied in place.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Server-side apply with merge semantics: the applied configuration is merged into the live
/// object (lists replaced), except that explicit `null`s are ignored rather than deleting.
pub fn apply_merge(target: &mut Value, config: &Value) {
    let Value::Object(c) = config else {
        *target = config.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in c {
            if v.is_null() {
                continue;
            }
            apply_merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Removes from `target` the map fields that `prev` (an earlier applied configuration of the
/// same manager) set and `next` (its new configuration) no longer sets, so that a field a
/// manager stops applying goes away as with real server-side apply.
pub fn remove_unapplied(target: &mut Value, prev: &Value, next: &Value) {
    let (Value::Object(t), Value::Object(p)) = (target, prev) else {
        return;
    };
    for (k, pv) in p {
        match next.get(k) {
            None => {
                t.remove(k);
            }
            Some(nv) => {
                if let (Some(tv), true, true) = (t.get_mut(k), pv.is_object(), nv.is_object()) {
                    remove_unapplied(tv, pv, nv);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn apply_merge_and_removal_of_unapplied_fields() {
        let mut live = json!({"spec": {"a": 1, "b": 2, "other": 3}});
        let prev = json!({"spec": {"a": 1, "b": 2}});
        let next = json!({"spec": {"a": 5}});
        remove_unapplied(&mut live, &prev, &next);
        apply_merge(&mut live, &next);
        assert_eq!(live, json!({"spec": {"a": 5, "other": 3}}));
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8").ok(),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml").ok(),
            Some(PatchType::Apply)
        );
        assert!(PatchType::from_content_type("text/plain").is_err());
    }
}

//! Strategic merge patch: JSON merge plus merging of lists by their merge key (for the common
//! built-in list fields) and the `$patch`, `$setElementOrder`, `$deleteFromPrimitiveList`
//! and `$retainKeys` directives. Custom resources get plain merge semantics.

use serde_json::{Map, Value};

/// Merge keys of the built-in list fields, by field name.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "secrets"
        | "subsets"
        | "readinessGates"
        | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "ownerReferences" => "uid",
        "conditions" => "type",
        _ => return None,
    })
}

fn merge_list(target: &mut Vec<Value>, patch: &[Value], key: &str) {
    for p in patch {
        let Some(pk) = p.get(key) else {
            target.push(p.clone());
            continue;
        };
        let directive = p.get("$patch").and_then(Value::as_str);
        let pos = target.iter().position(|t| t.get(key) == Some(pk));
        match (directive, pos) {
            (Some("delete"), Some(i)) => {
                target.remove(i);
            }
            (Some("delete"), None) => {}
            (Some("replace"), Some(i)) => target[i] = strip_directives(p),
            (_, Some(i)) => strategic_merge(&mut target[i], p),
            (_, None) => target.push(strip_directives(p)),
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn reorder(list: &mut [Value], order: &[Value], key: Option<&str>) {
    let rank = |v: &Value| {
        let probe = match key {
            Some(k) => v.get(k),
            None => Some(v),
        };
        order
            .iter()
            .position(|o| match key {
                Some(k) => o.get(k) == probe,
                None => Some(o) == probe,
            })
            .unwrap_or(usize::MAX)
    };
    list.sort_by_key(rank);
}

fn apply_directives(t: &mut Map<String, Value>, p: &Map<String, Value>) {
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
            && let (Some(Value::Array(list)), Some(del)) = (t.get_mut(field), v.as_array())
        {
            list.retain(|x| !del.contains(x));
        }
    }
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        t.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$setElementOrder/")
            && let (Some(Value::Array(list)), Some(order)) = (t.get_mut(field), v.as_array())
        {
            reorder(list, order, merge_key(field));
        }
    }
}

/// Applies a strategic merge patch in place.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (merge_key(k), v, t.get_mut(k)) {
            (Some(key), Value::Array(pl), Some(Value::Array(tl))) => merge_list(tl, pl, key),
            (_, Value::Object(_), Some(existing)) if existing.is_object() => {
                strategic_merge(existing, v)
            }
            _ => {
                t.insert(k.clone(), strip_directives(v));
            }
        }
    }
    apply_directives(t, p);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_lists_by_key_and_honours_directives() {
        let mut t = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}
        ], "args": ["x", "y"]}, "metadata": {"labels": {"k": "v", "drop": "me"}}});
        let p = json!({
            "spec": {
                "containers": [{"name": "b", "image": "b:2"}, {"name": "a", "$patch": "delete"}, {"name": "c", "image": "c:1"}],
                "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}],
                "$deleteFromPrimitiveList/args": ["x"]
            },
            "metadata": {"labels": {"drop": null}}
        });
        strategic_merge(&mut t, &p);
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "c", "image": "c:1"}, {"name": "b", "image": "b:2"}], "args": ["y"]},
                   "metadata": {"labels": {"k": "v"}}})
        );
    }
}

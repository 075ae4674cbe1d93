//! Field ownership (`metadata.managedFields`), simplified from structured-merge-diff: maps
//! are tracked field by field, lists and scalars as a whole. Updates move the fields they
//! change to their manager; server-side apply records what a manager applies, removes what it
//! stops applying, and fails with 409 when it would change a field another manager owns
//! (unless forced) — the conflict leader election with Leases relies on.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::meta;

/// A field path (`["spec", "holderIdentity"]`).
pub type Path = Vec<String>;

const META_OWNED: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// Leaf paths of the owned part of an object (or of an applied configuration).
pub fn leaf_paths(obj: &Value, with_status: bool) -> Vec<Path> {
    let mut out = Vec::new();
    if let Some(o) = obj.as_object() {
        for (k, v) in o {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "status" if !with_status => {}
                "metadata" => {
                    for mk in META_OWNED {
                        if let Some(mv) = v.get(*mk) {
                            walk(mv, vec!["metadata".into(), (*mk).to_string()], &mut out);
                        }
                    }
                }
                _ => walk(v, vec![k.clone()], &mut out),
            }
        }
    }
    out
}

fn walk(v: &Value, path: Path, out: &mut Vec<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let mut p = path.clone();
                p.push(k.clone());
                walk(x, p, out);
            }
        }
        _ => out.push(path),
    }
}

fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |cur, k| cur.get(k))
}

/// The FieldsV1 set of `paths`.
pub fn to_set(paths: &[Path]) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for k in p {
            let entry = cur.entry(format!("f:{k}")).or_insert_with(|| json!({}));
            let Value::Object(next) = entry else { break };
            cur = next;
        }
    }
    Value::Object(root)
}

/// The leaf paths of a FieldsV1 set.
pub fn from_set(set: &Value) -> Vec<Path> {
    fn rec(v: &Value, path: Path, out: &mut Vec<Path>) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("f:"))
            .collect();
        if children.is_empty() {
            if !path.is_empty() {
                out.push(path);
            }
            return;
        }
        for (k, c) in children {
            let mut p = path.clone();
            p.push(k[2..].to_string());
            rec(c, p, out);
        }
    }
    let mut out = Vec::new();
    rec(set, Vec::new(), &mut out);
    out
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

fn entries(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn same_entry(e: &Value, manager: &str, op: &str, sub: Option<&str>) -> bool {
    e["manager"] == manager
        && e["operation"] == op
        && e.get("subresource").and_then(Value::as_str) == sub
}

/// Who performs a write.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    /// Field manager name.
    pub manager: &'a str,
    /// `Apply` or `Update`.
    pub apply: bool,
    /// Subresource written (`status`).
    pub subresource: Option<&'a str>,
    /// `apiVersion` of the request.
    pub api_version: &'a str,
}

impl Writer<'_> {
    fn op(&self) -> &'static str {
        if self.apply { "Apply" } else { "Update" }
    }
}

/// Fails with 409 if applying `config` would change fields other managers own.
pub fn check_apply_conflicts(
    live: &Value,
    config: &Value,
    w: Writer<'_>,
    with_status: bool,
) -> ApiResult<()> {
    let mut conflicts: Vec<(String, String)> = Vec::new();
    let applied = leaf_paths(config, with_status);
    for e in entries(live) {
        let manager = e["manager"].as_str().unwrap_or("");
        if manager == w.manager {
            continue;
        }
        let owned = from_set(e.get("fieldsV1").unwrap_or(&Value::Null));
        for p in &applied {
            if owned.iter().any(|o| overlaps(o, p)) && get(live, p) != get(config, p) {
                conflicts.push((manager.to_string(), format!(".{}", p.join("."))));
            }
        }
    }
    if conflicts.is_empty() {
        return Ok(());
    }
    conflicts.sort();
    conflicts.dedup();
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(m, f)| format!("- conflict with {m:?} using {}: {f}", w.api_version))
        .collect();
    let mut e = ApiError::conflict_plain(format!(
        "Apply failed with {} conflict{}: {}",
        conflicts.len(),
        if conflicts.len() == 1 { "" } else { "s" },
        lines.join("\n")
    ));
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, f)| json!({"type": "FieldManagerConflict", "message": format!("conflict with {m:?}"), "field": f}))
        .collect();
    e.details = Some(json!({"causes": causes}));
    Err(e)
}

/// Records ownership after a write from `old` (None for a create) to `new`: the writer owns
/// what it applied (Apply) or changed (Update); others lose what changed or went away.
///
/// To keep memory low (tests hold 10^4–10^5 objects), plain updates of objects nobody ever
/// applied record nothing: ownership only matters once server-side apply is in play.
pub fn record(
    old: Option<&Value>,
    new: &mut Value,
    w: Writer<'_>,
    applied: Option<&Value>,
    with_status: bool,
    force: bool,
) {
    if applied.is_none() && entries(new).is_empty() {
        return;
    }
    let before = old.map(|o| leaf_paths(o, with_status)).unwrap_or_default();
    let after = leaf_paths(new, with_status);
    let changed: Vec<Path> = after
        .iter()
        .filter(|p| old.is_none_or(|o| get(o, p) != get(new, p)))
        .cloned()
        .collect();
    let removed: Vec<&Path> = before.iter().filter(|p| get(new, p).is_none()).collect();
    let mine: Vec<Path> = match applied {
        Some(cfg) => leaf_paths(cfg, with_status),
        None => {
            let prev = entries(new)
                .into_iter()
                .find(|e| same_entry(e, w.manager, w.op(), w.subresource))
                .map(|e| from_set(&e["fieldsV1"]))
                .unwrap_or_default();
            let mut m: Vec<Path> = prev.into_iter().filter(|p| get(new, p).is_some()).collect();
            m.extend(changed.iter().cloned());
            m.sort();
            m.dedup();
            m
        }
    };
    let forced: &[Path] = if force { &mine } else { &[] };
    let take_from_others: Vec<&Path> = changed.iter().chain(forced.iter()).collect();
    let mine_entry = (!mine.is_empty() || applied.is_some()).then(|| {
        let mut e = json!({
            "manager": w.manager,
            "operation": w.op(),
            "apiVersion": w.api_version,
            "time": meta::now_rfc3339(),
            "fieldsType": "FieldsV1",
            "fieldsV1": to_set(&mine),
        });
        if let Some(s) = w.subresource {
            e["subresource"] = json!(s);
        }
        e
    });
    let mut list: Vec<Value> = Vec::new();
    let mut placed = false;
    for mut e in entries(new) {
        if same_entry(&e, w.manager, w.op(), w.subresource) {
            // Keep the writer's entry where it was, so an unchanged re-apply is a no-op.
            if let Some(m) = &mine_entry {
                list.push(m.clone());
            }
            placed = true;
            continue;
        }
        let owned: Vec<Path> = from_set(e.get("fieldsV1").unwrap_or(&Value::Null))
            .into_iter()
            .filter(|o| !removed.iter().any(|r| overlaps(o, r)))
            .filter(|o| !take_from_others.iter().any(|t| overlaps(o, t)))
            .collect();
        if owned.is_empty() {
            continue;
        }
        e["fieldsV1"] = to_set(&owned);
        list.push(e);
    }
    if let (false, Some(m)) = (placed, mine_entry) {
        list.push(m);
    }
    meta::meta_mut(new).insert("managedFields".into(), Value::Array(list));
}

/// The default field manager of a request without `fieldManager`: the User-Agent up to its
/// first `/`, as kube-apiserver derives it.
pub fn default_manager(user_agent: &str) -> String {
    let m = user_agent.split('/').next().unwrap_or("").trim();
    if m.is_empty() {
        "unknown".to_string()
    } else {
        m.chars().take(128).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w<'a>(m: &'a str, apply: bool) -> Writer<'a> {
        Writer {
            manager: m,
            apply,
            subresource: None,
            api_version: "coordination.k8s.io/v1",
        }
    }

    #[test]
    fn sets_round_trip() {
        let paths = vec![
            vec!["spec".to_string(), "a".to_string()],
            vec!["metadata".into(), "labels".into(), "x".into()],
        ];
        assert_eq!(from_set(&to_set(&paths)).len(), 2);
        assert_eq!(
            to_set(&paths),
            json!({"f:spec": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
        );
    }

    #[test]
    fn a_second_applier_conflicts_unless_values_agree_or_forced() {
        let cfg_a = json!({"spec": {"holderIdentity": "a", "renewTime": "t1"}});
        let mut live =
            json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "renewTime": "t1"}});
        record(
            None,
            &mut live,
            w("mgr-a", true),
            Some(&cfg_a),
            false,
            false,
        );
        let cfg_b = json!({"spec": {"holderIdentity": "b", "renewTime": "t2"}});
        let err = check_apply_conflicts(&live, &cfg_b, w("mgr-b", true), false).unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("mgr-a") && err.message.contains(".spec.holderIdentity"),
            "{}",
            err.message
        );
        assert!(
            check_apply_conflicts(&live, &cfg_a, w("mgr-b", true), false).is_ok(),
            "same values: shared"
        );
        // An update that removes the field frees it.
        let old = live.clone();
        live["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("holderIdentity");
        record(Some(&old), &mut live, w("mgr-b", false), None, false, false);
        let cfg_b2 = json!({"spec": {"holderIdentity": "b"}});
        assert!(check_apply_conflicts(&live, &cfg_b2, w("mgr-b", true), false).is_ok());
        assert_eq!(default_manager("kube/5.0.0"), "kube");
    }
}

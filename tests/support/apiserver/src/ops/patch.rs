//! PATCH: merge, JSON, strategic merge and server-side apply, on the main resource or
//! `/status`. Server-side apply checks field-ownership conflicts (unless forced), removes the
//! fields a manager stops applying, and merges the rest.

use serde_json::{Map, Value, json};

use super::write::{create_as, owns_status, update_from};
use super::{Ctx, Written};
use crate::convert::to_served;
use crate::error::{ApiError, ApiResult};
use crate::http::query::Query;
use crate::managed::{self, Writer};
use crate::patch::{PatchType, apply_json_patch, apply_merge, merge_patch, strategic_merge};
use crate::store::Store;

/// Applies a patch of `kind` with body `raw`.
pub fn patch(
    store: &mut Store,
    ctx: &Ctx,
    q: &Query,
    kind: PatchType,
    raw: &[u8],
) -> ApiResult<Written> {
    let body: Value = match kind {
        PatchType::Apply => parse_yaml_or_json(raw)?,
        _ => serde_json::from_slice(raw)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
    };
    if kind == PatchType::Strategic && ctx.def.is_custom() {
        return Err(ApiError::unsupported_media_type(
            "application/strategic-merge-patch+json is not supported for custom resources",
        ));
    }
    if kind != PatchType::Apply && q.force {
        return Err(ApiError::bad_request(
            "force may only be set for apply patches",
        ));
    }
    if kind == PatchType::Apply {
        manager(q)?;
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "apply configuration must be an object",
            ));
        }
    }
    let old = store.get(ctx.sk(), ctx.ns(), ctx.name()).cloned();
    let Some(old) = old else {
        if kind == PatchType::Apply && !ctx.is_status() {
            return create_as(store, ctx, q, body.clone(), Some(&body));
        }
        return Err(ApiError::not_found(ctx.target(ctx.name())));
    };
    let live = to_served(&ctx.def, &ctx.version, &old).into_owned();
    let patched = match kind {
        PatchType::Merge => {
            let mut t = live;
            merge_patch(&mut t, &body);
            t
        }
        PatchType::Strategic => {
            let mut t = live;
            strategic_merge(&mut t, &body);
            t
        }
        PatchType::Json => apply_json_patch(&live, &body)?,
        PatchType::Apply => server_side_apply(ctx, q, live, &body)?,
    };
    let applied = (kind == PatchType::Apply).then_some(&body);
    update_from(store, ctx, q, patched, &old, applied)
}

fn manager(q: &Query) -> ApiResult<String> {
    q.field_manager
        .clone()
        .ok_or_else(|| ApiError::bad_request("PATCH /apply requires fieldManager to be set"))
}

fn parse_yaml_or_json(raw: &[u8]) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(raw) {
        return Ok(v);
    }
    let text = std::str::from_utf8(raw)
        .map_err(|e| ApiError::bad_request(format!("apply body is not UTF-8: {e}")))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML apply body: {e}")))
}

/// Removes from `live` what `prev` owned and `next` no longer does, unless another apply
/// manager owns it too; maps emptied by the removal go as well.
fn remove_unowned(live: &mut Value, prev: &Value, next: &Value, others: &[&Value]) {
    let (Value::Object(l), Some(p)) = (live, prev.as_object()) else {
        return;
    };
    let empty = json!({});
    for (fk, pchild) in p {
        let Some(field) = fk.strip_prefix("f:") else {
            continue;
        };
        let sub: Vec<&Value> = others.iter().filter_map(|o| o.get(fk)).collect();
        let leaf = pchild.as_object().is_none_or(Map::is_empty);
        match next.get(fk) {
            Some(nchild) if !leaf => {
                if let Some(lv) = l.get_mut(field) {
                    remove_unowned(lv, pchild, nchild, &sub);
                }
            }
            Some(_) => {}
            None if leaf => {
                if sub.is_empty() && field != "metadata" {
                    l.remove(field);
                }
            }
            None => {
                let emptied = match l.get_mut(field) {
                    Some(lv) => {
                        let was_empty = lv.as_object().is_some_and(Map::is_empty);
                        remove_unowned(lv, pchild, &empty, &sub);
                        !was_empty && lv.as_object().is_some_and(Map::is_empty)
                    }
                    None => false,
                };
                if emptied && field != "metadata" {
                    l.remove(field);
                }
            }
        }
    }
}

fn apply_entries(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|e| e["operation"] == "Apply")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn server_side_apply(ctx: &Ctx, q: &Query, mut live: Value, config: &Value) -> ApiResult<Value> {
    let manager = manager(q)?;
    let sub = ctx.subresource.as_deref();
    let with_status = owns_status(ctx);
    let av = ctx.def.api_version(&ctx.version);
    let w = Writer {
        manager: &manager,
        apply: true,
        subresource: sub,
        api_version: &av,
    };
    if !q.force {
        managed::check_apply_conflicts(&live, config, w, with_status)?;
    }
    let existing = apply_entries(&live);
    let mine = |e: &&Value| {
        e["manager"] == manager.as_str() && e.get("subresource").and_then(Value::as_str) == sub
    };
    let prev = existing
        .iter()
        .find(mine)
        .and_then(|e| e.get("fieldsV1").cloned())
        .unwrap_or_else(|| json!({}));
    let others: Vec<&Value> = existing
        .iter()
        .filter(|e| !mine(e))
        .filter_map(|e| e.get("fieldsV1"))
        .collect();
    let next = managed::to_set(&managed::leaf_paths(config, with_status));
    remove_unowned(&mut live, &prev, &next, &others);
    let mut cfg = config.clone();
    if let Some(m) = cfg.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    apply_merge(&mut live, &cfg);
    Ok(live)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: Value) -> Value {
        managed::to_set(&managed::leaf_paths(&v, true))
    }

    #[test]
    fn removal_of_fields_a_manager_stopped_applying() {
        let prev =
            set(json!({"spec": {"a": 1, "b": {"c": 2}}, "metadata": {"labels": {"x": "1"}}}));
        let next = set(json!({"spec": {"a": 1}}));
        let other = set(json!({"spec": {"b": {"c": 2}}}));
        let mut live = json!({"spec": {"a": 1, "b": {"c": 2}, "d": 4}, "metadata": {"labels": {"x": "1", "y": "2"}}});
        remove_unowned(&mut live, &prev, &next, &[&other]);
        assert_eq!(
            live,
            json!({"spec": {"a": 1, "b": {"c": 2}, "d": 4}, "metadata": {"labels": {"y": "2"}}})
        );
        let mut live2 = json!({"spec": {"a": 1, "b": {"c": 2}}});
        remove_unowned(&mut live2, &prev, &next, &[]);
        assert_eq!(live2, json!({"spec": {"a": 1}}));
    }
}

//! create and update (PUT), on the main resource and on `/status`.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Ctx, Written, check_kind, check_namespace, check_namespace_usable};
use crate::admission::{admit, crd_status, prepare_any, prepare_create};
use crate::convert::{to_served, to_storage};
use crate::error::{ApiError, ApiResult, FieldCause};
use crate::http::query::Query;
use crate::managed::{self, Writer};
use crate::meta;
use crate::ops::delete::{after_change, finish_deletion};
use crate::store::Store;

const SERVER_FIELDS: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
];

/// Whether field ownership covers `status` for writes through `ctx`.
pub fn owns_status(ctx: &Ctx) -> bool {
    !ctx.def.has_status(&ctx.version) || ctx.is_status()
}

fn writer<'a>(ctx: &'a Ctx, manager: &'a str, apply: bool, api_version: &'a str) -> Writer<'a> {
    Writer {
        manager,
        apply,
        subresource: ctx.subresource.as_deref(),
        api_version,
    }
}

/// Creates an object from `body` (served form).
pub fn create(store: &mut Store, ctx: &Ctx, q: &Query, body: Value) -> ApiResult<Written> {
    create_as(store, ctx, q, body, None)
}

/// Creates an object; `applied` is the configuration of a server-side apply that creates.
pub fn create_as(
    store: &mut Store,
    ctx: &Ctx,
    q: &Query,
    mut body: Value,
    applied: Option<&Value>,
) -> ApiResult<Written> {
    check_kind(ctx, &mut body)?;
    check_namespace(ctx, &mut body)?;
    if !meta::resource_version(&body).is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if meta::name(&body).is_empty() {
        let prefix = meta::get_str(&body, "generateName").to_string();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                &ctx.def.kind,
                &ctx.def.group,
                "",
                vec![FieldCause {
                    reason: "FieldValueRequired",
                    field: "metadata.name".into(),
                    message: "Required value: name or generateName is required".into(),
                }],
            ));
        }
        let name = format!("{prefix}{}", store.name_suffix());
        meta::set_str(&mut body, "name", &name);
    }
    let name = meta::name(&body).to_string();
    {
        let m = meta::meta_mut(&mut body);
        for f in SERVER_FIELDS {
            m.remove(*f);
        }
        m.remove("managedFields");
        m.insert("generation".into(), Value::from(1));
        m.insert(
            "creationTimestamp".into(),
            Value::String(meta::now_rfc3339()),
        );
    }
    let uid = store.new_uid();
    meta::set_str(&mut body, "uid", &uid);
    prepare_create(&ctx.def, &ctx.version, &mut body);
    let warnings = admit(&ctx.def, &ctx.version, &mut body, None, q.field_validation)?;
    let manager = q.manager();
    let av = ctx.def.api_version(&ctx.version);
    let w = writer(ctx, &manager, applied.is_some(), &av);
    managed::record(None, &mut body, w, applied, owns_status(ctx), q.force);
    check_namespace_usable(store, ctx)?;
    if store.get(ctx.sk(), ctx.ns(), &name).is_some() {
        return Err(ApiError::already_exists(ctx.target(&name)));
    }
    if q.dry_run {
        return Ok(Written {
            code: 201,
            obj: body,
            warnings,
        });
    }
    let stored = store.put(ctx.sk(), to_storage(&ctx.def, body));
    after_change(store, ctx, &stored);
    let obj = to_served(&ctx.def, &ctx.version, &stored).into_owned();
    Ok(Written {
        code: 201,
        obj,
        warnings,
    })
}

/// Replaces an object (PUT) with `body` (served form).
pub fn update(store: &mut Store, ctx: &Ctx, q: &Query, body: Value) -> ApiResult<Written> {
    let old = store
        .get(ctx.sk(), ctx.ns(), ctx.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(ctx.target(ctx.name())))?;
    update_from(store, ctx, q, body, &old, None)
}

/// Whether the maps hold the same fields with equal values, leaving out the fields `skip`
/// names (no copy of either map).
fn same_fields_except(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether `a` and `b` agree outside `metadata` (and outside `status` when `drop_status`):
/// the change that moves `metadata.generation`.
fn same_spec(a: &Value, b: &Value, drop_status: bool) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            same_fields_except(a, b, |k| k == "metadata" || (drop_status && k == "status"))
        }
        _ => a == b,
    }
}

/// Whether `a` and `b` are the same object but for `metadata.resourceVersion` and the
/// times of their managedFields entries: a write that changes nothing else is not stored.
fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if !same_fields_except(a, b, |k| k == "metadata") {
        return false;
    }
    match (a.get("metadata"), b.get("metadata")) {
        (Some(Value::Object(ma)), Some(Value::Object(mb))) => {
            same_fields_except(ma, mb, |k| k == "resourceVersion" || k == "managedFields")
                && same_managed_fields(ma.get("managedFields"), mb.get("managedFields"))
        }
        (ma, mb) => ma == mb,
    }
}

/// Ownership changes are changes; a refreshed timestamp alone is not.
fn same_managed_fields(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(ea, eb)| match (ea, eb) {
                    (Value::Object(ea), Value::Object(eb)) => {
                        same_fields_except(ea, eb, |k| k == "time")
                    }
                    _ => ea == eb,
                })
        }
        _ => a == b,
    }
}

/// The update pipeline shared by PUT and PATCH: `body` is the complete new object (served form).
pub fn update_from(
    store: &mut Store,
    ctx: &Ctx,
    q: &Query,
    mut body: Value,
    old: &Arc<Value>,
    applied: Option<&Value>,
) -> ApiResult<Written> {
    check_kind(ctx, &mut body)?;
    if meta::name(&body).is_empty() {
        meta::set_str(&mut body, "name", ctx.name());
    }
    if meta::name(&body) != ctx.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            meta::name(&body),
            ctx.name()
        )));
    }
    check_namespace(ctx, &mut body)?;
    let body_rv = meta::resource_version(&body).to_string();
    if body_rv.is_empty() {
        if !ctx.def.unconditional_update() {
            return Err(ApiError::invalid(
                &ctx.def.kind,
                &ctx.def.group,
                ctx.name(),
                vec![FieldCause::invalid(
                    "metadata.resourceVersion",
                    &Value::from(0),
                    "must be specified for an update",
                )],
            ));
        }
    } else if body_rv != meta::resource_version(old) {
        return Err(ApiError::stale(ctx.target(ctx.name())));
    }
    // Borrowed unless the stored version differs: copied only where it is returned.
    let old_served = to_served(&ctx.def, &ctx.version, old);
    let old_served: &Value = &old_served;
    let has_status = ctx.def.has_status(&ctx.version);
    let mut new = if ctx.is_status() {
        let mut n = old_served.clone();
        match (n.as_object_mut(), body.get("status")) {
            (Some(o), Some(s)) => {
                o.insert("status".into(), s.clone());
            }
            (Some(o), None) => {
                o.remove("status");
            }
            _ => {}
        }
        n
    } else {
        let mut n = body;
        if has_status && let Some(o) = n.as_object_mut() {
            match old_served.get("status") {
                Some(s) => o.insert("status".into(), s.clone()),
                None => o.remove("status"),
            };
        }
        n
    };
    copy_server_fields(old_served, &mut new);
    match old_served.pointer("/metadata/managedFields") {
        Some(mf) => meta::meta_mut(&mut new).insert("managedFields".into(), mf.clone()),
        None => meta::meta_mut(&mut new).remove("managedFields"),
    };
    if meta::is_deleting(old) {
        let before = meta::finalizers(old);
        if meta::finalizers(&new).iter().any(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                &ctx.def.kind,
                &ctx.def.group,
                ctx.name(),
                vec![FieldCause::forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted",
                )],
            ));
        }
    }
    prepare_any(&ctx.def, &mut new);
    if ctx.def.group == "apiextensions.k8s.io" {
        crd_status(&mut new);
    }
    let warnings = admit(
        &ctx.def,
        &ctx.version,
        &mut new,
        Some(old_served),
        q.field_validation,
    )?;
    let manager = q.manager();
    let av = ctx.def.api_version(&ctx.version);
    let w = writer(ctx, &manager, applied.is_some(), &av);
    managed::record(
        Some(old_served),
        &mut new,
        w,
        applied,
        owns_status(ctx),
        q.force,
    );
    let drop_status = has_status || ctx.def.group == "apiextensions.k8s.io";
    if !same_spec(&new, old_served, drop_status) {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        meta::meta_mut(&mut new).insert("generation".into(), Value::from(g + 1));
    }
    if same_ignoring_rv(&new, old_served) {
        return Ok(Written {
            code: 200,
            obj: old_served.clone(),
            warnings,
        });
    }
    if q.dry_run {
        return Ok(Written {
            code: 200,
            obj: new,
            warnings,
        });
    }
    let stored = store.put(ctx.sk(), to_storage(&ctx.def, new));
    after_change(store, ctx, &stored);
    let stored = finish_deletion(store, ctx, stored);
    let obj = to_served(&ctx.def, &ctx.version, &stored).into_owned();
    Ok(Written {
        code: 200,
        obj,
        warnings,
    })
}

fn copy_server_fields(old: &Value, new: &mut Value) {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let m = meta::meta_mut(new);
    for f in SERVER_FIELDS.iter().chain(["name", "namespace"].iter()) {
        match old_meta.and_then(|o| o.get(*f)) {
            Some(v) => m.insert((*f).to_string(), v.clone()),
            None => m.remove(*f),
        };
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The definitions the comparisons replaced: copies with the ignored fields removed.
    fn stripped(v: &Value, drop_status: bool) -> Value {
        let mut c = v.clone();
        if let Some(o) = c.as_object_mut() {
            o.remove("metadata");
            if drop_status {
                o.remove("status");
            }
        }
        c
    }

    fn stripped_rv(v: &Value) -> Value {
        let mut c = v.clone();
        if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
                for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                    e.remove("time");
                }
            }
        }
        c
    }

    fn variants() -> Vec<Value> {
        let base = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "1", "generation": 1,
                "managedFields": [{"manager": "m", "time": "2026-01-01T00:00:00Z", "fieldsV1": {"f:data": {}}}]},
            "data": {"k": "v"},
            "status": {"phase": "x"}
        });
        let mut out = vec![base.clone(), json!(null), json!({}), json!({"metadata": 1})];
        let edits: [(&str, Value); 9] = [
            ("/metadata/resourceVersion", json!("2")),
            (
                "/metadata/managedFields/0/time",
                json!("2026-02-01T00:00:00Z"),
            ),
            ("/metadata/managedFields/0/manager", json!("other")),
            ("/metadata/generation", json!(2)),
            ("/data/k", json!("w")),
            ("/status/phase", json!("y")),
            ("/metadata/managedFields", json!([])),
            ("/metadata", json!({"name": "a"})),
            ("/data", json!(null)),
        ];
        for (pointer, value) in edits {
            let mut v = base.clone();
            *v.pointer_mut(pointer).expect("an existing field") = value;
            out.push(v);
        }
        let mut without_status = base.clone();
        without_status
            .as_object_mut()
            .expect("an object")
            .remove("status");
        out.push(without_status);
        let mut extra = base;
        extra["spec"] = json!({});
        out.push(extra);
        out
    }

    #[test]
    fn the_comparisons_agree_with_comparing_stripped_copies() {
        let all = variants();
        for a in &all {
            for b in &all {
                for drop_status in [false, true] {
                    assert_eq!(
                        same_spec(a, b, drop_status),
                        stripped(a, drop_status) == stripped(b, drop_status),
                        "same_spec({a}, {b}, {drop_status})"
                    );
                }
                assert_eq!(
                    same_ignoring_rv(a, b),
                    stripped_rv(a) == stripped_rv(b),
                    "same_ignoring_rv({a}, {b})"
                );
            }
        }
    }
}

//! delete and deletecollection, finalizers, and the cascades kube-apiserver's controllers
//! would perform (namespace contents, custom resources of a deleted CRD).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Ctx, Written, list};
use crate::convert::to_served;
use crate::error::{ApiError, ApiResult};
use crate::http::query::Query;
use crate::meta;
use crate::registry::{StorageKey, defs_from_crd};
use crate::store::Store;

fn is_crd(sk: &StorageKey) -> bool {
    sk.group == "apiextensions.k8s.io" && sk.resource == "customresourcedefinitions"
}

fn is_namespace(sk: &StorageKey) -> bool {
    sk.group.is_empty() && sk.resource == "namespaces"
}

fn namespaces_key() -> StorageKey {
    StorageKey {
        group: String::new(),
        resource: "namespaces".into(),
    }
}

/// Side effects of a stored change: a CRD (re)defines its resource.
pub fn after_change(store: &mut Store, ctx: &Ctx, stored: &Arc<Value>) {
    if is_crd(ctx.sk()) && !meta::is_deleting(stored) {
        let group = stored
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("");
        let plural = stored
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        match defs_from_crd(stored) {
            Some(def) => store.registry.insert(def),
            None => {
                store.registry.remove(group, plural);
            }
        }
    }
}

/// Removes an object whose deletion is pending once its last finalizer is gone; returns the
/// final state.
pub fn finish_deletion(store: &mut Store, ctx: &Ctx, obj: Arc<Value>) -> Arc<Value> {
    if !meta::is_deleting(&obj) || !meta::finalizers(&obj).is_empty() {
        return obj;
    }
    let ns = meta::namespace(&obj).to_string();
    let name = meta::name(&obj).to_string();
    remove_now(store, ctx.sk(), &ns, &name).unwrap_or(obj)
}

fn remove_now(store: &mut Store, sk: &StorageKey, ns: &str, name: &str) -> Option<Arc<Value>> {
    let gone = store.remove(sk, ns, name)?;
    if is_crd(sk) {
        let group = gone
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let plural = gone
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        store.registry.remove(&group, &plural);
        let crs = StorageKey {
            group,
            resource: plural,
        };
        let keys: Vec<(String, String)> = store
            .range(&crs, None, None)
            .map(|(k, _)| k.clone())
            .collect();
        for (ns, n) in keys {
            store.remove(&crs, &ns, &n);
        }
    }
    if !ns.is_empty() {
        reap_namespace(store, ns);
    }
    Some(gone)
}

/// Removes a terminating namespace once nothing is left in it.
fn reap_namespace(store: &mut Store, ns: &str) {
    let nk = namespaces_key();
    let terminating = store.get(&nk, "", ns).is_some_and(|n| meta::is_deleting(n));
    if terminating && !store.namespace_in_use(ns) {
        store.remove(&nk, "", ns);
    }
}

fn check_preconditions(ctx: &Ctx, old: &Value, opts: Option<&Value>) -> ApiResult<()> {
    let Some(pre) = opts.and_then(|o| o.get("preconditions")) else {
        return Ok(());
    };
    let name = ctx.name();
    if let Some(uid) = pre.get("uid").and_then(Value::as_str) {
        let have = meta::get_str(old, "uid");
        if uid != have {
            return Err(ApiError::conflict(
                ctx.target(name),
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"
                ),
            ));
        }
    }
    if let Some(rv) = pre.get("resourceVersion").and_then(Value::as_str) {
        let have = meta::resource_version(old);
        if rv != have {
            return Err(ApiError::conflict(
                ctx.target(name),
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {have}"
                ),
            ));
        }
    }
    Ok(())
}

/// Deletes one object (honouring finalizers and preconditions).
pub fn delete(store: &mut Store, ctx: &Ctx, q: &Query, opts: Option<&Value>) -> ApiResult<Written> {
    let old = store
        .get(ctx.sk(), ctx.ns(), ctx.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(ctx.target(ctx.name())))?;
    check_preconditions(ctx, &old, opts)?;
    let dry_run = q.dry_run
        || opts
            .and_then(|o| o.get("dryRun"))
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"));
    if dry_run {
        return Ok(Written {
            code: 200,
            obj: to_served(&ctx.def, &ctx.version, &old).into_owned(),
            warnings: vec![],
        });
    }
    let result = delete_stored(store, ctx.sk(), &old);
    Ok(Written {
        code: 200,
        obj: to_served(&ctx.def, &ctx.version, &result).into_owned(),
        warnings: vec![],
    })
}

fn delete_stored(store: &mut Store, sk: &StorageKey, old: &Arc<Value>) -> Arc<Value> {
    let ns = meta::namespace(old).to_string();
    let name = meta::name(old).to_string();
    let pending = !meta::finalizers(old).is_empty() || is_namespace(sk);
    if !pending {
        return remove_now(store, sk, &ns, &name).unwrap_or_else(|| old.clone());
    }
    let mut current = old.clone();
    if !meta::is_deleting(old) {
        let mut marked = (**old).clone();
        let m = meta::meta_mut(&mut marked);
        m.insert(
            "deletionTimestamp".into(),
            Value::String(meta::now_rfc3339()),
        );
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if is_namespace(sk) {
            marked["status"] = json!({"phase": "Terminating"});
        }
        current = store.put(sk, marked);
    }
    if is_namespace(sk) {
        for (content_sk, n) in store.keys_in_namespace(&name) {
            if let Some(o) = store.get(&content_sk, &name, &n).cloned() {
                delete_stored(store, &content_sk, &o);
            }
        }
        reap_namespace(store, &name);
        if let Some(gone) = store.get(sk, "", &name).cloned() {
            current = gone;
        }
    }
    current
}

/// Deletes every object matching the query; returns the list of deleted objects.
pub fn delete_collection(store: &mut Store, ctx: &Ctx, q: &Query) -> ApiResult<Value> {
    let mut all = Query {
        limit: 0,
        continue_token: None,
        ..q.clone()
    };
    all.resource_version = None;
    let page = list(store, ctx, &all)?;
    let mut items = Vec::new();
    for obj in page.items {
        let result = if q.dry_run {
            obj
        } else {
            delete_stored(store, ctx.sk(), &obj)
        };
        items.push(to_served(&ctx.def, &ctx.version, &result).into_owned());
    }
    Ok(json!({
        "kind": ctx.def.list_kind,
        "apiVersion": ctx.def.api_version(&ctx.version),
        "metadata": {"resourceVersion": store.rv().to_string()},
        "items": items,
    }))
}

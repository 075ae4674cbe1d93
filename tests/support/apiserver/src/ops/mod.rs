//! The API verbs on the store: get, list, create, update, patch, delete (all run under the
//! server lock; rendering happens outside it).

mod delete;
mod patch;
mod read;
mod write;

use std::sync::Arc;

use serde_json::Value;

pub use delete::{delete, delete_collection};
pub use patch::patch;
pub use read::{ListResult, get, list, served_selectors};
pub use write::{create, update};

use crate::error::{ApiError, ApiResult, Target};
use crate::registry::{ResourceDef, StorageKey};
use crate::store::Store;

/// What a request addresses.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The resource.
    pub def: Arc<ResourceDef>,
    /// The requested version.
    pub version: String,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
    /// Subresource (`status`).
    pub subresource: Option<String>,
}

impl Ctx {
    /// Error target for `name`.
    pub fn target<'a>(&'a self, name: &'a str) -> Target<'a> {
        Target {
            resource: &self.def.plural,
            group: &self.def.group,
            name,
        }
    }

    /// The namespace ("" for cluster-scoped).
    pub fn ns(&self) -> &str {
        if self.def.namespaced {
            self.namespace.as_deref().unwrap_or("")
        } else {
            ""
        }
    }

    /// The object name from the path ("" for collections).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// Storage key.
    pub fn sk(&self) -> &StorageKey {
        &self.def.storage
    }

    /// Whether the request is on `/status`.
    pub fn is_status(&self) -> bool {
        self.subresource.as_deref() == Some("status")
    }
}

/// The result of a write.
#[derive(Debug, Clone)]
pub struct Written {
    /// HTTP status (200 or 201).
    pub code: u16,
    /// The object, in served form.
    pub obj: Value,
    /// Warnings (`Warning:` headers).
    pub warnings: Vec<String>,
}

/// Checks `apiVersion`/`kind` of a request body against the resource and fills them in.
pub fn check_kind(ctx: &Ctx, body: &mut Value) -> ApiResult<()> {
    let want_av = ctx.def.api_version(&ctx.version);
    let Some(o) = body.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON or YAML object",
        ));
    };
    match o.get("apiVersion").and_then(Value::as_str) {
        Some(av) if !av.is_empty() && av != want_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        _ => {}
    }
    match o.get("kind").and_then(Value::as_str) {
        Some(k) if !k.is_empty() && k != ctx.def.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                ctx.def.kind
            )));
        }
        _ => {}
    }
    o.insert("apiVersion".into(), Value::String(want_av));
    o.insert("kind".into(), Value::String(ctx.def.kind.clone()));
    Ok(())
}

/// Checks/fills `metadata.namespace` against the path.
pub fn check_namespace(ctx: &Ctx, body: &mut Value) -> ApiResult<()> {
    let in_body = crate::meta::namespace(body).to_string();
    if ctx.def.namespaced {
        if !in_body.is_empty() && in_body != ctx.ns() {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        crate::meta::set_str(body, "namespace", ctx.ns());
    } else if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("namespace");
    }
    Ok(())
}

/// Fails unless the namespace exists and is not terminating.
pub fn check_namespace_usable(store: &Store, ctx: &Ctx) -> ApiResult<()> {
    if !ctx.def.namespaced {
        return Ok(());
    }
    let sk = StorageKey {
        group: String::new(),
        resource: "namespaces".into(),
    };
    match store.get(&sk, "", ctx.ns()) {
        None => Err(ApiError::not_found(Target {
            resource: "namespaces",
            group: "",
            name: ctx.ns(),
        })),
        Some(ns) if crate::meta::is_deleting(ns) => Err(ApiError::forbidden(format!(
            "{} {:?} is forbidden: unable to create new content in namespace {} because it is being terminated",
            ctx.def.plural,
            ctx.name(),
            ctx.ns()
        ))),
        Some(_) => Ok(()),
    }
}

//! get and list (with selectors, limit/continue and resourceVersion semantics).

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use super::Ctx;
use crate::convert::field_selector_renames;
use crate::error::{ApiError, ApiResult};
use crate::http::query::Query;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{ObjKey, Store};

/// Reads one object (stored form).
pub fn get(store: &Store, ctx: &Ctx) -> ApiResult<Arc<Value>> {
    store
        .get(ctx.sk(), ctx.ns(), ctx.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(ctx.target(ctx.name())))
}

/// One page of a list.
#[derive(Debug)]
pub struct ListResult {
    /// Matching objects (stored form), in key order.
    pub items: Vec<Arc<Value>>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Continue token for the next page.
    pub continue_token: Option<String>,
    /// Objects left after this page (only without selectors).
    pub remaining: Option<u64>,
}

fn encode_token(rv: u64, key: &ObjKey) -> String {
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_token(tok: &str) -> ApiResult<(u64, ObjKey)> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {tok:?}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let ns = v["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = v["name"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, (ns, name)))
}

/// Selectors in terms of the stored form of `ctx`'s resource.
pub fn served_selectors(ctx: &Ctx, q: &Query) -> (LabelSelector, FieldSelector) {
    let mut fields = q.fields.clone();
    for (served, stored) in field_selector_renames(&ctx.def) {
        fields.rename_root(served, stored);
    }
    (q.labels.clone(), fields)
}

/// Parses a resourceVersion parameter.
pub fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

/// Lists objects (stored form) matching the query.
pub fn list(store: &Store, ctx: &Ctx, q: &Query) -> ApiResult<ListResult> {
    let (labels, fields) = served_selectors(ctx, q);
    let (list_rv, after) = match &q.continue_token {
        Some(tok) => {
            let (rv, key) = decode_token(tok)?;
            if store.history.check(rv).is_err() {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ));
            }
            (rv, Some(key))
        }
        None => {
            let current = store.rv();
            if q.resource_version_match.as_deref() == Some("Exact")
                && let Some(rv) = &q.resource_version
            {
                let want = parse_rv(rv)?;
                if want != current {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {want} ({current})"
                    )));
                }
            }
            (current, None)
        }
    };
    let ns = if ctx.def.namespaced {
        ctx.namespace.as_deref()
    } else {
        None
    };
    let filtered = !labels.is_empty() || !fields.is_empty();
    let mut items = Vec::new();
    let mut last_key: Option<ObjKey> = None;
    let mut more = false;
    for (key, obj) in store.range(ctx.sk(), ns, after.as_ref()) {
        if filtered && !(labels.matches(obj) && fields.matches(obj)) {
            continue;
        }
        if q.limit > 0 && items.len() == q.limit {
            more = true;
            break;
        }
        items.push(obj.clone());
        last_key = Some(key.clone());
    }
    let mut remaining = None;
    let continue_token = match (more, &last_key) {
        (true, Some(k)) => {
            if !filtered {
                let rest = store.range(ctx.sk(), ns, Some(k)).count();
                remaining = Some(rest as u64);
            }
            Some(encode_token(list_rv, k))
        }
        _ => None,
    };
    Ok(ListResult {
        items,
        rv: list_rv,
        continue_token,
        remaining,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let key = ("ns".to_string(), "a-b".to_string());
        let tok = encode_token(42, &key);
        assert_eq!(decode_token(&tok).expect("decode"), (42, key));
        assert!(decode_token("!!").is_err());
    }
}

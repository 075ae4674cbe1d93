//! Content negotiation and rendering of objects, lists and errors.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::convert::to_served;
use crate::error::ApiError;
use crate::ops::{Ctx, ListResult};
use crate::tables::{Columns, IncludeObject, partial_metadata};

/// The representation a client asked for with `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The object(s) themselves.
    Object,
    /// `meta.k8s.io/v1` Table.
    Table,
    /// `PartialObjectMetadata(List)`.
    Partial,
}

/// Picks the first acceptable representation from an `Accept` header.
pub fn negotiate(accept: &str) -> Shape {
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        let as_ = parts.find_map(|p| p.strip_prefix("as=")).unwrap_or("");
        if base.contains("protobuf") || base.contains("cbor") {
            continue;
        }
        match as_ {
            "Table" => return Shape::Table,
            "PartialObjectMetadata" | "PartialObjectMetadataList" => return Shape::Partial,
            "" => return Shape::Object,
            _ => continue,
        }
    }
    Shape::Object
}

/// A JSON response.
pub fn json_bytes(code: u16, body: Vec<u8>, warnings: &[String]) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append("Warning", v);
        }
    }
    r
}

/// A JSON value response.
pub fn json_value(code: u16, v: &Value) -> Response<Body> {
    json_bytes(code, serde_json::to_vec(v).unwrap_or_default(), &[])
}

/// A `Status` error response.
pub fn error(e: &ApiError) -> Response<Body> {
    let mut r = json_value(e.code, &e.status());
    if let Some(s) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// One object in the requested shape.
pub fn object(
    ctx: &Ctx,
    shape: Shape,
    include: IncludeObject,
    obj: &Value,
    code: u16,
    warnings: &[String],
) -> Response<Body> {
    let body = match shape {
        Shape::Object => serde_json::to_vec(obj),
        Shape::Partial => serde_json::to_vec(&partial_metadata(obj)),
        Shape::Table => {
            let cols = Columns::for_resource(&ctx.def, &ctx.version);
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null);
            serde_json::to_vec(&cols.table(
                std::iter::once(obj),
                json!({"resourceVersion": rv}),
                include,
                true,
            ))
        }
    };
    json_bytes(code, body.unwrap_or_default(), warnings)
}

fn list_meta(l: &ListResult) -> Value {
    let mut m = json!({"resourceVersion": l.rv.to_string()});
    if let Some(c) = &l.continue_token {
        m["continue"] = json!(c);
    }
    if let Some(n) = l.remaining {
        m["remainingItemCount"] = json!(n);
    }
    m
}

/// A list in the requested shape. Items are serialized one by one (no intermediate copy
/// of the whole list).
pub fn list(ctx: &Ctx, shape: Shape, include: IncludeObject, l: &ListResult) -> Response<Body> {
    let meta = list_meta(l);
    if shape == Shape::Table {
        let cols = Columns::for_resource(&ctx.def, &ctx.version);
        let served: Vec<Value> = l
            .items
            .iter()
            .map(|o| to_served(&ctx.def, &ctx.version, o).into_owned())
            .collect();
        let table = cols.table(served.iter(), meta, include, true);
        return json_value(200, &table);
    }
    let (kind, api_version) = match shape {
        Shape::Partial => (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
        ),
        _ => (ctx.def.list_kind.clone(), ctx.def.api_version(&ctx.version)),
    };
    let mut buf: Vec<u8> = Vec::with_capacity(64 + l.items.len() * 1024);
    let head = json!({"kind": kind, "apiVersion": api_version, "metadata": meta});
    let head = serde_json::to_string(&head).unwrap_or_default();
    buf.extend_from_slice(&head.as_bytes()[..head.len().saturating_sub(1)]);
    buf.extend_from_slice(b",\"items\":[");
    for (i, o) in l.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        let served = to_served(&ctx.def, &ctx.version, o);
        let r = match shape {
            Shape::Partial => serde_json::to_writer(&mut buf, &partial_metadata(&served)),
            _ => serde_json::to_writer(&mut buf, &*served),
        };
        if let Err(e) = r {
            return error(&ApiError::internal(format!(
                "serializing {}: {e}",
                ctx.def.plural
            )));
        }
    }
    buf.extend_from_slice(b"]}");
    json_bytes(200, buf, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_kubectl_accept_headers() {
        assert_eq!(
            negotiate(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            ),
            Shape::Table
        );
        assert_eq!(
            negotiate("application/vnd.kubernetes.protobuf, application/json"),
            Shape::Object
        );
        assert_eq!(
            negotiate("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
            Shape::Partial
        );
        assert_eq!(negotiate("*/*"), Shape::Object);
        assert_eq!(negotiate(""), Shape::Object);
    }
}

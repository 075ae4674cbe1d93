//! API errors rendered as `meta.k8s.io/v1` `Status` objects, like kube-apiserver does.

use serde_json::{Value, json};

/// One field-level cause of an `Invalid` error (`details.causes[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    /// The field path, e.g. `spec.volumePath`.
    pub field: String,
    /// The human-readable part after `field: `.
    pub message: String,
}

impl FieldCause {
    /// `field: Invalid value: <value>: detail`.
    pub fn invalid(field: &str, value: &Value, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        let shown = short_value(value);
        let message = if detail.is_empty() {
            format!("Invalid value: {shown}")
        } else {
            format!("Invalid value: {shown}: {detail}")
        };
        FieldCause {
            reason: "FieldValueInvalid",
            field: field.to_string(),
            message,
        }
    }

    /// `field: Required value`.
    pub fn required(field: &str) -> Self {
        FieldCause {
            reason: "FieldValueRequired",
            field: field.to_string(),
            message: "Required value".to_string(),
        }
    }

    /// `field: Unsupported value: "x": supported values: ...`.
    pub fn unsupported(field: &str, value: &Value, allowed: &[Value]) -> Self {
        let list: Vec<String> = allowed.iter().map(short_value).collect();
        FieldCause {
            reason: "FieldValueNotSupported",
            field: field.to_string(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                short_value(value),
                list.join(", ")
            ),
        }
    }

    /// `field: Forbidden: detail`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        FieldCause {
            reason: "FieldValueForbidden",
            field: field.to_string(),
            message: format!("Forbidden: {}", detail.into()),
        }
    }

    /// `field: Too many: ...` / `Too long: ...` style messages.
    pub fn too_many(field: &str, detail: impl Into<String>) -> Self {
        FieldCause {
            reason: "FieldValueTooMany",
            field: field.to_string(),
            message: detail.into(),
        }
    }

    fn render(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// Renders a value the way Go's `%#v`-ish field errors show it (strings quoted, scalars bare,
/// containers by type).
fn short_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".to_string(),
        Value::Array(_) => "\"array\"".to_string(),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// An error answered to an API client as a `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` (name, group, kind, causes), if any.
    pub details: Option<Value>,
    /// `Retry-After` seconds for 429s.
    pub retry_after: Option<u64>,
}

/// Short alias used across the crate.
pub type ApiResult<T> = Result<T, ApiError>;

/// Identifies the object an error is about: `resource[.group]` and name.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Plural resource name.
    pub resource: &'a str,
    /// API group ("" for core).
    pub group: &'a str,
    /// Object name.
    pub name: &'a str,
}

impl Target<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self) -> Value {
        json!({"name": self.name, "group": self.group, "kind": self.resource})
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for an object.
    pub fn not_found(t: Target<'_>) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} {:?} not found", t.qualified(), t.name),
        );
        e.details = Some(t.details());
        e
    }

    /// 404 NotFound for a path that serves nothing.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(t: Target<'_>) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} {:?} already exists", t.qualified(), t.name),
        );
        e.details = Some(t.details());
        e
    }

    /// 409 Conflict on a stale resourceVersion or failed precondition.
    pub fn conflict(t: Target<'_>, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {:?}: {why}",
                t.qualified(),
                t.name
            ),
        );
        e.details = Some(t.details());
        e
    }

    /// 409 Conflict with a free-form message (server-side apply conflicts).
    pub fn conflict_plain(message: impl Into<String>) -> Self {
        Self::new(409, "Conflict", message)
    }

    /// 409 Conflict with the standard "object has been modified" text.
    pub fn stale(t: Target<'_>) -> Self {
        Self::conflict(
            t,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid naming each bad field.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<FieldCause>) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let rendered: Vec<String> = causes.iter().map(FieldCause::render).collect();
        let joined = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified} {name:?} is invalid: {joined}"),
        );
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        e.details = Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}));
        e
    }

    /// 422 without field causes (a patch that does not apply).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 410 Gone / Expired for a resourceVersion that left the history window.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml (got {accept:?})"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// 429 TooManyRequests with Retry-After.
    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.retry_after = Some(retry_after);
        e.details = Some(json!({"retryAfterSeconds": retry_after}));
        e
    }

    /// 403 Forbidden (used for writes into a terminating namespace).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some(d), Some(obj)) = (&self.details, s.as_object_mut()) {
            obj.insert("details".into(), d.clone());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_the_field_and_value() {
        let e = ApiError::invalid(
            "VolumeMigration",
            "volmig.io",
            "a",
            vec![FieldCause::invalid(
                "spec.volumePath",
                &json!("x"),
                "volumePath is immutable",
            )],
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "VolumeMigration.volmig.io \"a\" is invalid: spec.volumePath: Invalid value: \"x\": volumePath is immutable"
        );
        assert_eq!(
            e.status()["details"]["causes"][0]["field"],
            "spec.volumePath"
        );
    }

    #[test]
    fn conflict_message_matches_apiserver() {
        let e = ApiError::stale(Target {
            resource: "persistentvolumes",
            group: "",
            name: "pv1",
        });
        assert!(
            e.message
                .starts_with("Operation cannot be fulfilled on persistentvolumes \"pv1\"")
        );
        assert_eq!(e.status()["reason"], "Conflict");
    }
}

//! The authentication/authorization endpoints clients call: TokenRequest
//! (`serviceaccounts/{name}/token`, `kubectl create token`), SelfSubjectAccessReview
//! (`kubectl auth can-i`), SubjectAccessReview (`kubectl auth can-i --as`, the rights of
//! another user) and SelfSubjectReview (`kubectl auth whoami`).

use serde_json::{Value, json};

use super::rbac::{Decision, authorize};
use super::{Attributes, DEFAULT_TOKEN_SECONDS, MIN_TOKEN_SECONDS, UserInfo};
use crate::error::{ApiError, ApiResult, FieldCause};
use crate::server::Shared;

/// Answers a TokenRequest for the ServiceAccount `namespace/name`: the TokenRequest with
/// `status.token` and `status.expirationTimestamp`.
pub fn token_request(
    shared: &Shared,
    namespace: &str,
    name: &str,
    body: &Value,
) -> ApiResult<Value> {
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    if !kind.is_empty() && kind != "TokenRequest" {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind (TokenRequest)"
        )));
    }
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_TOKEN_SECONDS,
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| ApiError::bad_request(format!("invalid expirationSeconds {v}")))?,
    };
    if seconds < MIN_TOKEN_SECONDS {
        return Err(ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            name,
            vec![FieldCause::invalid(
                "spec.expirationSeconds",
                &json!(seconds),
                "may not specify a duration less than 10 minutes",
            )],
        ));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let minted = {
        let store = shared.store();
        let mut tokens = shared.tokens();
        tokens.mint(&store, namespace, name, seconds, audiences)?
    };
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": crate::meta::now_rfc3339(),
        },
        "spec": {
            "audiences": minted.audiences,
            "expirationSeconds": seconds,
            "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null),
        },
        "status": {
            "token": minted.token,
            "expirationTimestamp": minted.expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        },
    }))
}

fn attrs_of(spec: &Value) -> ApiResult<Attributes> {
    let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(r) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        return Ok(Attributes {
            verb: s(r, "verb"),
            resource_request: true,
            group: s(r, "group"),
            version: s(r, "version"),
            resource: s(r, "resource"),
            subresource: s(r, "subresource"),
            namespace: s(r, "namespace"),
            name: s(r, "name"),
            path: String::new(),
        });
    }
    if let Some(n) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        return Ok(Attributes {
            verb: s(n, "verb"),
            path: s(n, "path"),
            ..Attributes::non_resource("", "")
        });
    }
    Err(ApiError::invalid(
        "SelfSubjectAccessReview",
        "authorization.k8s.io",
        "",
        vec![FieldCause::required("spec.resourceAttributes")],
    ))
}

/// Answers a SelfSubjectAccessReview of `user`.
pub fn self_subject_access_review(
    shared: &Shared,
    user: &UserInfo,
    body: &Value,
) -> ApiResult<Value> {
    access_review(shared, user, body, "SelfSubjectAccessReview")
}

/// Answers a SubjectAccessReview: the rights of `spec.user` with `spec.groups` (as
/// kube-apiserver's SubjectAccessReview REST storage, which requires a user or a group).
pub fn subject_access_review(shared: &Shared, body: &Value) -> ApiResult<Value> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let name = spec
        .get("user")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if name.is_empty() && groups.is_empty() {
        return Err(ApiError::invalid(
            "SubjectAccessReview",
            "authorization.k8s.io",
            "",
            vec![FieldCause::required("spec.user")],
        ));
    }
    access_review(
        shared,
        &UserInfo { name, groups },
        body,
        "SubjectAccessReview",
    )
}

/// Answers a SelfSubjectReview: who `user` is.
pub fn self_subject_review(user: &UserInfo) -> Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": Value::Null},
        "status": {"userInfo": {"username": user.name, "groups": user.groups}},
    })
}

fn access_review(shared: &Shared, user: &UserInfo, body: &Value, kind: &str) -> ApiResult<Value> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let a = attrs_of(&spec)?;
    let decision = authorize(&shared.store(), user, &a);
    let status = match decision {
        Decision::Allow(reason) if reason.is_empty() => json!({"allowed": true}),
        Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        Decision::Deny(reason) if reason.is_empty() => json!({"allowed": false}),
        Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
    };
    Ok(json!({
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": Value::Null},
        "spec": spec,
        "status": status,
    }))
}
